//! Bit-exact conversion between `f64`/`f32` and the four 8-bit float formats hipDNN names
//! (`FP8_E4M3`, `FP8_E5M2`, `FP8_E4M3_FNUZ`, `FP8_E5M2_FNUZ`).
//!
//! The rules are those of `kernels/core/fp8-attention.md` §2: round to nearest, ties to even;
//! a finite value whose rounded magnitude exceeds the format's largest finite value saturates
//! to it; NaN stays NaN; an infinity stays infinite where the format has one (OCP E5M2) and
//! becomes NaN where it has none. Every FP8 value is exactly representable in `f32`, so decoding
//! is exact and encoding from `f32` goes through `f64` without a second rounding.
//!
//! The formats are plain codes (`u8`) rather than element types: nothing in the tensor SDK
//! carries FP8 yet, and a code is what a kernel reads and writes.

use std::fmt;

/// One of the four 8-bit float encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// OCP `E4M3` ("e4m3fn"): bias 7, largest finite 448, NaN `S.1111.111`, no infinity,
    /// signed zeros.
    E4M3,
    /// OCP `E5M2`: bias 15, largest finite 57344, infinities `S.11111.00`, NaN `S.11111.{01,10,11}`,
    /// signed zeros (IEEE-754 binary16 truncated to its top byte).
    E5M2,
    /// `E4M3_FNUZ` (AMD CDNA3): bias 8, largest finite 240, one NaN `0x80`, no infinity, no
    /// negative zero.
    E4M3Fnuz,
    /// `E5M2_FNUZ` (AMD CDNA3): bias 16, largest finite 57344, one NaN `0x80`, no infinity, no
    /// negative zero.
    E5M2Fnuz,
}

impl Fp8Format {
    /// All four formats, for exhaustive tests.
    pub const ALL: [Fp8Format; 4] = [
        Fp8Format::E4M3,
        Fp8Format::E5M2,
        Fp8Format::E4M3Fnuz,
        Fp8Format::E5M2Fnuz,
    ];

    /// Exponent field width in bits.
    pub const fn exponent_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3 | Fp8Format::E4M3Fnuz => 4,
            Fp8Format::E5M2 | Fp8Format::E5M2Fnuz => 5,
        }
    }

    /// Mantissa (trailing significand) field width in bits.
    pub const fn mantissa_bits(self) -> u32 {
        7 - self.exponent_bits()
    }

    /// Exponent bias.
    pub const fn bias(self) -> i32 {
        match self {
            Fp8Format::E4M3 => 7,
            Fp8Format::E5M2 => 15,
            Fp8Format::E4M3Fnuz => 8,
            Fp8Format::E5M2Fnuz => 16,
        }
    }

    /// Whether the format is one of the "finite, unsigned zero" variants: code `0x80` is the
    /// only NaN and there is neither a negative zero nor an infinity.
    pub const fn is_fnuz(self) -> bool {
        matches!(self, Fp8Format::E4M3Fnuz | Fp8Format::E5M2Fnuz)
    }

    /// Whether the format encodes infinities (only OCP E5M2 does).
    pub const fn has_infinity(self) -> bool {
        matches!(self, Fp8Format::E5M2)
    }

    /// Largest finite magnitude: 448, 57344, 240, 57344.
    pub const fn max_finite(self) -> f64 {
        match self {
            Fp8Format::E4M3 => 448.0,
            Fp8Format::E5M2 | Fp8Format::E5M2Fnuz => 57344.0,
            Fp8Format::E4M3Fnuz => 240.0,
        }
    }

    /// Smallest positive normal value, `2^(1 − bias)`.
    pub fn min_normal(self) -> f64 {
        pow2(1 - self.bias())
    }

    /// Smallest positive subnormal value, `2^(1 − bias − mantissa_bits)`.
    pub fn min_subnormal(self) -> f64 {
        pow2(1 - self.bias() - self.mantissa_bits() as i32)
    }

    /// The NaN this format produces for a NaN of the given sign. OCP formats keep the sign
    /// (`0x7F`/`0xFF` for E4M3, the quiet `0x7E`/`0xFE` for E5M2); FNUZ formats have one NaN.
    pub const fn nan_code(self, negative: bool) -> u8 {
        let sign = if negative { 0x80 } else { 0 };
        match self {
            Fp8Format::E4M3 => sign | 0x7F,
            Fp8Format::E5M2 => sign | 0x7E,
            Fp8Format::E4M3Fnuz | Fp8Format::E5M2Fnuz => 0x80,
        }
    }

    /// The code of the largest finite value with the given sign.
    pub const fn max_code(self, negative: bool) -> u8 {
        let sign = if negative { 0x80 } else { 0 };
        match self {
            Fp8Format::E4M3 => sign | 0x7E,
            Fp8Format::E5M2 => sign | 0x7B,
            Fp8Format::E4M3Fnuz | Fp8Format::E5M2Fnuz => sign | 0x7F,
        }
    }

    /// The schema's JSON name of the data type (`schema.md` §5).
    pub const fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "fp8_e4m3",
            Fp8Format::E5M2 => "fp8_e5m2",
            Fp8Format::E4M3Fnuz => "fp8_e4m3_fnuz",
            Fp8Format::E5M2Fnuz => "fp8_e5m2_fnuz",
        }
    }

    /// Whether `code` is a NaN of this format.
    pub fn is_nan(self, code: u8) -> bool {
        let magnitude = code & 0x7F;
        match self {
            Fp8Format::E4M3 => magnitude == 0x7F,
            Fp8Format::E5M2 => magnitude > 0x7C,
            Fp8Format::E4M3Fnuz | Fp8Format::E5M2Fnuz => code == 0x80,
        }
    }

    /// The exact value of `code`.
    pub fn decode(self, code: u8) -> f32 {
        // Exact: every FP8 value has at most 4 significant bits and an exponent within f32's
        // normal range.
        self.decode_f64(code) as f32
    }

    /// The exact value of `code`, as `f64`.
    pub fn decode_f64(self, code: u8) -> f64 {
        let negative = code & 0x80 != 0;
        if self.is_nan(code) {
            // OCP NaNs carry a sign, and encoding gives it back; the FNUZ NaN has none.
            return if negative && !self.is_fnuz() {
                -f64::NAN
            } else {
                f64::NAN
            };
        }
        let m = self.mantissa_bits();
        let exponent_field = i32::from((code & 0x7F) >> m);
        let mantissa = f64::from(code & ((1 << m) - 1));
        if self.has_infinity() && exponent_field == (1 << self.exponent_bits()) - 1 {
            // Only mantissa 0 is left here: the NaNs were handled above.
            return if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
        }
        let magnitude = if exponent_field == 0 {
            mantissa * pow2(1 - self.bias() - m as i32)
        } else {
            (f64::from(1u32 << m) + mantissa) * pow2(exponent_field - self.bias() - m as i32)
        };
        if negative { -magnitude } else { magnitude }
    }

    /// Encodes `value` (exactly widened to `f64`); see [`Fp8Format::encode`].
    pub fn encode_f32(self, value: f32) -> u8 {
        self.encode(f64::from(value))
    }

    /// Encodes `value`: round to nearest with ties to the even code, saturate finite overflow
    /// to the largest finite value, keep NaN (and infinity where representable).
    ///
    /// Saturation rather than overflow to NaN/infinity is what the hardware conversions the
    /// attention kernels use do (`fp8-attention.md` §2.3); an overflowing probability or output
    /// is a badly chosen scale, and a saturated value keeps the row usable.
    pub fn encode(self, value: f64) -> u8 {
        let negative = value.is_sign_negative();
        let sign = if negative { 0x80u8 } else { 0 };
        if value.is_nan() {
            return self.nan_code(negative);
        }
        if value.is_infinite() {
            return if self.has_infinity() {
                sign | 0x7C
            } else {
                self.nan_code(negative)
            };
        }
        let magnitude = value.abs();
        let m = self.mantissa_bits() as i32;
        let min_exponent = 1 - self.bias();
        // The spacing of the FP8 values around `magnitude`: 2^(e − m) for a normal binade e,
        // 2^(min_exponent − m) throughout the subnormal range.
        let quantum = pow2(binade(magnitude).max(min_exponent) - m);
        // Both the division and the product are exact (scaling by powers of two well inside
        // f64's range), so the only rounding is round_ties_even's, onto the FP8 grid. The
        // integer's parity is the mantissa's last bit, hence ties go to the even code.
        let rounded = ((magnitude / quantum).round_ties_even() * quantum).min(self.max_finite());
        if rounded == 0.0 {
            return if self.is_fnuz() { 0 } else { sign };
        }
        let exponent = binade(rounded);
        let bits = if exponent < min_exponent {
            (rounded / pow2(min_exponent - m)) as u8
        } else {
            let exponent_field = (exponent + self.bias()) as u8;
            let mantissa = (rounded / pow2(exponent - m)) as u8 - (1u8 << m);
            (exponent_field << m) | mantissa
        };
        sign | bits
    }

    /// `value` rounded to this format and decoded again: the quantization step as a number.
    pub fn quantize(self, value: f64) -> f64 {
        self.decode_f64(self.encode(value))
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `2^n` for the small exponents used here, built from its bits so it is exact.
fn pow2(n: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// `⌊log2 x⌋` of a positive finite `x` (f64 subnormals report −1023, far below any FP8 binade).
fn binade(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7FF) as i32 - 1023
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positive finite codes in increasing order of value (codes grow with magnitude).
    fn positive_finite_codes(format: Fp8Format) -> Vec<u8> {
        (0u8..0x80)
            .filter(|&c| !format.is_nan(c) && format.decode_f64(c).is_finite())
            .collect()
    }

    #[test]
    fn every_code_round_trips_and_nans_become_the_canonical_nan() {
        for format in Fp8Format::ALL {
            for code in 0..=255u8 {
                let value = format.decode_f64(code);
                let back = format.encode(value);
                if format.is_nan(code) {
                    assert!(value.is_nan(), "{format} {code:#04x}");
                    assert_eq!(
                        back,
                        format.nan_code(code & 0x80 != 0),
                        "{format} {code:#04x}"
                    );
                } else {
                    assert_eq!(back, code, "{format} {code:#04x} = {value}");
                    // The f32 path agrees and decoding to f32 is exact.
                    assert_eq!(f64::from(format.decode(code)), value);
                    assert_eq!(format.encode_f32(format.decode(code)), code);
                }
            }
        }
    }

    #[test]
    fn nan_and_infinity_codes_are_where_each_format_puts_them() {
        let count = |format: Fp8Format, pred: &dyn Fn(f64) -> bool| {
            (0..=255u8).filter(|&c| pred(format.decode_f64(c))).count()
        };
        assert_eq!(count(Fp8Format::E4M3, &|v| v.is_nan()), 2);
        assert_eq!(count(Fp8Format::E5M2, &|v| v.is_nan()), 6);
        assert_eq!(count(Fp8Format::E4M3Fnuz, &|v| v.is_nan()), 1);
        assert_eq!(count(Fp8Format::E5M2Fnuz, &|v| v.is_nan()), 1);
        assert_eq!(count(Fp8Format::E5M2, &|v| v.is_infinite()), 2);
        for format in [Fp8Format::E4M3, Fp8Format::E4M3Fnuz, Fp8Format::E5M2Fnuz] {
            assert_eq!(count(format, &|v| v.is_infinite()), 0, "{format}");
        }
        assert!(Fp8Format::E4M3Fnuz.decode(0x80).is_nan());
        assert!(Fp8Format::E5M2Fnuz.decode(0x80).is_nan());
        assert_eq!(Fp8Format::E5M2.decode(0x7C), f32::INFINITY);
        assert_eq!(Fp8Format::E5M2.decode(0xFC), f32::NEG_INFINITY);
    }

    #[test]
    fn decoding_is_strictly_increasing_over_positive_codes() {
        for format in Fp8Format::ALL {
            let values: Vec<f64> = positive_finite_codes(format)
                .into_iter()
                .map(|c| format.decode_f64(c))
                .collect();
            assert!(values.windows(2).all(|w| w[0] < w[1]), "{format}");
            assert_eq!(values[0], 0.0);
            assert_eq!(values[1], format.min_subnormal(), "{format}");
            assert_eq!(*values.last().unwrap(), format.max_finite(), "{format}");
        }
    }

    #[test]
    fn known_values_have_known_codes() {
        // (format, value, code), from the format definitions.
        let table: &[(Fp8Format, f64, u8)] = &[
            (Fp8Format::E4M3, 1.0, 0x38),
            (Fp8Format::E4M3, 448.0, 0x7E),
            (Fp8Format::E4M3, -448.0, 0xFE),
            (Fp8Format::E4M3, 2f64.powi(-6), 0x08),
            (Fp8Format::E4M3, 2f64.powi(-9), 0x01),
            (Fp8Format::E4M3, 0.875 * 2f64.powi(-6), 0x07),
            (Fp8Format::E5M2, 1.0, 0x3C),
            (Fp8Format::E5M2, 57344.0, 0x7B),
            (Fp8Format::E5M2, 2f64.powi(-14), 0x04),
            (Fp8Format::E5M2, 2f64.powi(-16), 0x01),
            (Fp8Format::E4M3Fnuz, 1.0, 0x40),
            (Fp8Format::E4M3Fnuz, 240.0, 0x7F),
            (Fp8Format::E4M3Fnuz, -240.0, 0xFF),
            (Fp8Format::E4M3Fnuz, 2f64.powi(-7), 0x08),
            (Fp8Format::E4M3Fnuz, 2f64.powi(-10), 0x01),
            (Fp8Format::E5M2Fnuz, 1.0, 0x40),
            (Fp8Format::E5M2Fnuz, 57344.0, 0x7F),
            (Fp8Format::E5M2Fnuz, 2f64.powi(-15), 0x04),
            (Fp8Format::E5M2Fnuz, 2f64.powi(-17), 0x01),
        ];
        for &(format, value, code) in table {
            assert_eq!(format.encode(value), code, "{format} {value}");
            assert_eq!(format.decode_f64(code), value, "{format} {code:#04x}");
        }
        for format in Fp8Format::ALL {
            assert_eq!(
                format.decode_f64(format.max_code(false)),
                format.max_finite()
            );
            assert_eq!(
                format.decode_f64(format.max_code(true)),
                -format.max_finite()
            );
            assert_eq!(
                format.encode(format.min_normal()) & 0x7F,
                1 << format.mantissa_bits()
            );
        }
    }

    #[test]
    fn midpoints_round_to_the_even_code_and_anything_off_them_to_the_nearest() {
        for format in Fp8Format::ALL {
            let codes = positive_finite_codes(format);
            for pair in codes.windows(2) {
                let (lo, hi) = (pair[0], pair[1]);
                let (a, b) = (format.decode_f64(lo), format.decode_f64(hi));
                let mid = (a + b) / 2.0; // exact: one more bit than FP8 has
                let even = if lo % 2 == 0 { lo } else { hi };
                assert_eq!(format.encode(mid), even, "{format} tie {a}..{b}");
                assert_eq!(format.encode(mid.next_down()), lo, "{format} below {mid}");
                assert_eq!(format.encode(mid.next_up()), hi, "{format} above {mid}");
                // Below the smallest subnormal the even code is zero, unsigned in FNUZ formats.
                let negative_even = if even == 0 && format.is_fnuz() {
                    0
                } else {
                    even | 0x80
                };
                assert_eq!(format.encode(-mid), negative_even, "{format} tie -{mid}");
                // The f32 path sees the same ties (mid is exact in f32).
                assert_eq!(format.encode_f32(mid as f32), even);
            }
        }
    }

    #[test]
    fn half_the_smallest_subnormal_ties_to_zero() {
        for format in Fp8Format::ALL {
            let half = format.min_subnormal() / 2.0;
            assert_eq!(format.encode(half), 0, "{format}");
            assert_eq!(format.encode(half.next_up()), 1, "{format}");
            assert_eq!(format.encode(1e-300), 0, "{format}");
            assert_eq!(
                format.encode(f64::from_bits(1)),
                0,
                "{format} (f64 subnormal)"
            );
        }
    }

    #[test]
    fn finite_overflow_saturates_to_the_largest_finite_value() {
        for format in Fp8Format::ALL {
            let max = format.max_finite();
            let ulp = max - format.decode_f64(format.max_code(false) - 1);
            for beyond in [max + ulp / 2.0, max + ulp, 2.0 * max, 1e30, f64::MAX] {
                assert_eq!(
                    format.encode(beyond),
                    format.max_code(false),
                    "{format} {beyond}"
                );
                assert_eq!(
                    format.encode(-beyond),
                    format.max_code(true),
                    "{format} -{beyond}"
                );
            }
            assert_eq!(
                format.encode_f32(f32::MAX),
                format.max_code(false),
                "{format}"
            );
        }
    }

    #[test]
    fn infinity_stays_infinite_only_where_the_format_has_one() {
        assert_eq!(Fp8Format::E5M2.encode(f64::INFINITY), 0x7C);
        assert_eq!(Fp8Format::E5M2.encode(f64::NEG_INFINITY), 0xFC);
        assert_eq!(Fp8Format::E4M3.encode(f64::INFINITY), 0x7F);
        assert_eq!(Fp8Format::E4M3.encode(f64::NEG_INFINITY), 0xFF);
        assert_eq!(Fp8Format::E4M3Fnuz.encode(f64::INFINITY), 0x80);
        assert_eq!(Fp8Format::E5M2Fnuz.encode(f64::NEG_INFINITY), 0x80);
    }

    #[test]
    fn nan_keeps_its_sign_in_ocp_formats_and_is_0x80_in_fnuz() {
        let negative_nan = -f64::NAN;
        assert_eq!(Fp8Format::E4M3.encode(f64::NAN), 0x7F);
        assert_eq!(Fp8Format::E4M3.encode(negative_nan), 0xFF);
        assert_eq!(Fp8Format::E5M2.encode(f64::NAN), 0x7E);
        assert_eq!(Fp8Format::E5M2.encode(negative_nan), 0xFE);
        for format in [Fp8Format::E4M3Fnuz, Fp8Format::E5M2Fnuz] {
            assert_eq!(format.encode(f64::NAN), 0x80);
            assert_eq!(format.encode(negative_nan), 0x80);
            assert_eq!(format.encode_f32(f32::NAN), 0x80);
        }
    }

    #[test]
    fn negative_zero_exists_only_in_ocp_formats() {
        for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
            assert_eq!(format.encode(-0.0), 0x80, "{format}");
            assert_eq!(format.encode(-1e-30), 0x80, "{format}");
            let zero = format.decode_f64(0x80);
            assert!(zero == 0.0 && zero.is_sign_negative(), "{format}");
        }
        for format in [Fp8Format::E4M3Fnuz, Fp8Format::E5M2Fnuz] {
            assert_eq!(format.encode(-0.0), 0x00, "{format}");
            // A negative value that rounds to zero must not produce 0x80, the NaN.
            assert_eq!(
                format.encode(-format.min_subnormal() / 2.0),
                0x00,
                "{format}"
            );
            assert_eq!(format.encode(-1e-30), 0x00, "{format}");
        }
    }

    #[test]
    fn quantize_is_decode_after_encode() {
        assert_eq!(Fp8Format::E4M3.quantize(149.33), 144.0);
        assert_eq!(Fp8Format::E4M3.quantize(1000.0), 448.0);
        assert_eq!(Fp8Format::E4M3Fnuz.quantize(1000.0), 240.0);
        assert_eq!(Fp8Format::E5M2.quantize(0.3), 0.3125);
    }
}
