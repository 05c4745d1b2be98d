//! Output validation, two ways (RFC §4.11.4 and its §7.3 caveat):
//!
//! * **coverage** (default): the positions a correct engine writes are derived from
//!   `ragged_offset` and `seq_lens`; those are compared with tolerance, every other position must
//!   still hold the sentinel bit pattern in *both* bundles. No value has to be "unproducible", so
//!   the NaN clash of §7.3 (a reference legitimately producing the sentinel) cannot hide an error.
//! * **sentinel-skip** (the RFC's): positions where the reference still holds the sentinel are
//!   skipped; the rest are compared with tolerance.
//!
//! Tolerances are the project rule of ragged-sdpa.md §8.

use std::collections::BTreeSet;
use std::fmt;

use ragged_core::{DataType as KernelType, HostData};

use crate::host_error::HostError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValidationMode {
    #[default]
    Coverage,
    SentinelSkip,
}

impl fmt::Display for ValidationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValidationMode::Coverage => "coverage",
            ValidationMode::SentinelSkip => "sentinel-skip",
        })
    }
}

/// `abs(x − ref) ≤ atol + rtol · abs(ref)`, on decoded values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    /// An FP8 output also passes where the engine's code is the reference's neighbour (no
    /// finite value of the format between the two): one rounding that went the other way
    /// (fp8-attention.md §3, normalized versus running-max P).
    pub neighbour_codes: bool,
}

impl Tolerance {
    /// Bit-for-bit (up to the sign of zero).
    pub const EXACT: Tolerance = Tolerance {
        atol: 0.0,
        rtol: 0.0,
        neighbour_codes: false,
    };

    /// O's tolerance by element type (ragged-sdpa.md §8).
    pub fn for_output(dtype: KernelType) -> Tolerance {
        let t = match dtype {
            KernelType::F32 => 1e-4,
            KernelType::F16 => 2e-3,
            _ => 1e-2,
        };
        Tolerance {
            atol: t,
            rtol: t,
            neighbour_codes: false,
        }
    }

    /// LSE's tolerance, which depends on the *input* type (LSE itself is always f32).
    pub fn for_lse(input: KernelType) -> Tolerance {
        let t = if input == KernelType::F32 { 1e-4 } else { 1e-3 };
        Tolerance {
            atol: t,
            rtol: t,
            neighbour_codes: false,
        }
    }
}

/// The outcome for one output tensor.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    pub uid: i64,
    pub compared: usize,
    pub skipped: usize,
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    /// Human-readable descriptions of the first few failures.
    pub failures: Vec<String>,
    pub failure_count: usize,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.failure_count == 0
    }

    fn fail(&mut self, message: String) {
        self.failure_count += 1;
        if self.failures.len() < 8 {
            self.failures.push(message);
        }
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "uid {}: {} compared, {} skipped, max abs err {:.3e}, max rel err {:.3e}, {} failure(s)",
            self.uid,
            self.compared,
            self.skipped,
            self.max_abs_error,
            self.max_rel_error,
            self.failure_count
        )
    }
}

/// Element `i` as f64 and as raw bits (for sentinel identity).
fn element(data: HostData<'_>, i: usize) -> (f64, u64) {
    match data {
        HostData::F32(s) => (f64::from(s[i]), u64::from(s[i].to_bits())),
        HostData::F16(s) => (s[i].to_f64(), u64::from(s[i].to_bits())),
        HostData::BF16(s) => (s[i].to_f64(), u64::from(s[i].to_bits())),
        HostData::I32(s) => (f64::from(s[i]), s[i] as u32 as u64),
        HostData::I64(s) => (s[i] as f64, s[i] as u64),
        HostData::Fp8(format, s) => (format.decode_f64(s[i]), u64::from(s[i])),
    }
}

/// The sentinel's bit pattern for an element type (what `fill_sentinel` writes).
pub fn sentinel_bits(dtype: KernelType) -> u64 {
    use ragged_core::Element;
    match dtype {
        KernelType::F32 => u64::from(f32::sentinel().to_bits()),
        KernelType::F16 => u64::from(half::f16::sentinel().to_bits()),
        KernelType::BF16 => u64::from(half::bf16::sentinel().to_bits()),
        KernelType::I32 => i32::sentinel() as u32 as u64,
        KernelType::I64 => i64::sentinel() as u64,
        KernelType::Fp8(format) => u64::from(format.nan_code(false)),
    }
}

/// What is known about an output's positions before comparing values.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expectation<'a> {
    /// The positions a correct engine writes; required for coverage mode.
    pub written: Option<&'a BTreeSet<usize>>,
    /// O rows that admit no key: the engine must hold exactly ±0 there, whatever the tolerance.
    pub exact_zero: Option<&'a BTreeSet<usize>>,
    /// Positions of a downstream node whose inputs were never written (a pointwise node reading
    /// an intermediate's padding rows): any value is correct there, so they are skipped.
    pub undefined: Option<&'a BTreeSet<usize>>,
}

/// Compares output `uid` of the engine bundle with the reference bundle under `expect`.
pub fn compare_bundles(
    uid: i64,
    reference: &super::Bundle,
    engine: &super::Bundle,
    expect: Expectation<'_>,
    mode: ValidationMode,
    tolerance: Tolerance,
) -> Result<Comparison, HostError> {
    let (r, e) = (reference.get(uid)?, engine.get(uid)?);
    compare(uid, r.host_data(), e.host_data(), expect, mode, tolerance)
}

/// Compares one output under `expect` (see [`Expectation`]).
pub fn compare(
    uid: i64,
    reference: HostData<'_>,
    actual: HostData<'_>,
    expect: Expectation<'_>,
    mode: ValidationMode,
    tolerance: Tolerance,
) -> Result<Comparison, HostError> {
    let Expectation {
        written,
        exact_zero,
        undefined,
    } = expect;
    if reference.len() != actual.len() || reference.data_type() != actual.data_type() {
        return Err(HostError::Harness(format!(
            "output uid {uid}: reference buffer is {} x {}, engine buffer {} x {}",
            reference.len(),
            reference.data_type(),
            actual.len(),
            actual.data_type()
        )));
    }
    let sentinel = sentinel_bits(reference.data_type());
    let mut out = Comparison {
        uid,
        ..Comparison::default()
    };
    for i in 0..reference.len() {
        if undefined.is_some_and(|u| u.contains(&i)) {
            out.skipped += 1;
            continue;
        }
        let (r, r_bits) = element(reference, i);
        let (a, a_bits) = element(actual, i);
        let must_compare = match mode {
            ValidationMode::Coverage => {
                let covered = written.is_some_and(|w| w.contains(&i));
                if !covered {
                    out.skipped += 1;
                    if r_bits != sentinel || a_bits != sentinel {
                        out.fail(format!(
                            "position {i} must be unwritten: reference bits {r_bits:#x}, engine bits {a_bits:#x}, sentinel {sentinel:#x}"
                        ));
                    }
                    continue;
                }
                true
            }
            ValidationMode::SentinelSkip => r_bits != sentinel,
        };
        if !must_compare {
            out.skipped += 1;
            continue;
        }
        out.compared += 1;
        if exact_zero.is_some_and(|z| z.contains(&i)) {
            if a != 0.0 || r != 0.0 {
                out.fail(format!(
                    "position {i}: its row admits no key, so it must be exactly 0 (reference {r}, engine {a})"
                ));
            }
            continue;
        }
        if r.is_nan() || a.is_nan() {
            out.fail(format!(
                "position {i}: NaN at a written position (reference {r}, engine {a})"
            ));
            continue;
        }
        if r.is_infinite() || a.is_infinite() {
            if r != a {
                out.fail(format!(
                    "position {i}: reference {r}, engine {a} (infinities must match exactly)"
                ));
            }
            continue;
        }
        let abs = (a - r).abs();
        let rel = if r == 0.0 { abs } else { abs / r.abs() };
        out.max_abs_error = out.max_abs_error.max(abs);
        out.max_rel_error = out.max_rel_error.max(rel);
        let neighbours = tolerance.neighbour_codes
            && match reference {
                HostData::Fp8(format, _) => adjacent_codes(format, r, a),
                _ => false,
            };
        if abs > tolerance.atol + tolerance.rtol * r.abs() && !neighbours {
            out.fail(format!(
                "position {i}: reference {r}, engine {a}, |diff| {abs:.3e} > {:.1e} + {:.1e}*|ref|",
                tolerance.atol, tolerance.rtol
            ));
        }
    }
    Ok(out)
}

/// Whether no finite value of `format` lies strictly between the decoded values `r` and `a`.
fn adjacent_codes(format: ragged_core::Fp8Format, r: f64, a: f64) -> bool {
    let (lo, hi) = (r.min(a), r.max(a));
    !(0..=u8::MAX)
        .map(|code| format.decode_f64(code))
        .any(|x| x.is_finite() && lo < x && x < hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_core::Element;

    const TOL: Tolerance = Tolerance {
        atol: 1e-3,
        rtol: 1e-3,
        neighbour_codes: false,
    };

    fn run(
        reference: &[f32],
        engine: &[f32],
        expect: Expectation<'_>,
        mode: ValidationMode,
    ) -> Comparison {
        compare(
            7,
            HostData::F32(reference),
            HostData::F32(engine),
            expect,
            mode,
            TOL,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn covering(written: &BTreeSet<usize>) -> Expectation<'_> {
        Expectation {
            written: Some(written),
            ..Expectation::default()
        }
    }

    #[test]
    fn coverage_catches_an_engine_writing_padding_and_a_reference_nan_sentinel_clash() {
        let s = f32::sentinel();
        let reference = [1.0, s, 0.5];
        let written = BTreeSet::from([0, 1, 2]);
        // The reference produced the sentinel pattern at a written position (RFC §7.3's clash):
        // sentinel-skip would silently skip it; coverage reports the NaN.
        let engine = [1.0, 2.0, 0.5];
        let c = run(
            &reference,
            &engine,
            covering(&written),
            ValidationMode::Coverage,
        );
        assert_eq!((c.compared, c.failure_count), (3, 1));
        let skip = run(
            &reference,
            &engine,
            Expectation::default(),
            ValidationMode::SentinelSkip,
        );
        assert_eq!((skip.compared, skip.skipped, skip.failure_count), (2, 1, 0));

        // An engine that writes a padding position fails coverage.
        let only_first = BTreeSet::from([0]);
        let c = run(
            &[1.0, s],
            &[1.0, 0.0],
            covering(&only_first),
            ValidationMode::Coverage,
        );
        assert_eq!(c.failure_count, 1);
        assert!(
            c.failures[0].starts_with("position 1 must be unwritten"),
            "{:?}",
            c.failures
        );
    }

    #[test]
    fn undefined_positions_are_neither_compared_nor_required_intact() {
        let s = f32::sentinel();
        let written = BTreeSet::from([0]);
        let undefined = BTreeSet::from([1]);
        let expect = Expectation {
            undefined: Some(&undefined),
            ..covering(&written)
        };
        let c = run(
            &[1.0, s, s],
            &[1.0, 5.0, s],
            expect,
            ValidationMode::Coverage,
        );
        assert_eq!((c.compared, c.skipped, c.failure_count), (1, 2, 0));
        let c = run(
            &[1.0, s, s],
            &[1.0, 5.0, 5.0],
            expect,
            ValidationMode::Coverage,
        );
        assert_eq!(c.failure_count, 1, "position 2 is padding, not undefined");
    }

    #[test]
    fn tolerance_and_infinities() {
        let reference = [1.0f32, f32::NEG_INFINITY, 2.0];
        let none = Expectation::default();
        let c = run(
            &reference,
            &[1.0005, f32::NEG_INFINITY, 2.1],
            none,
            ValidationMode::SentinelSkip,
        );
        assert_eq!(c.failure_count, 1);
        assert!(c.failures[0].starts_with("position 2"), "{:?}", c.failures);
        let c = run(
            &reference,
            &[1.0, f32::INFINITY, 2.0],
            none,
            ValidationMode::SentinelSkip,
        );
        assert_eq!(c.failure_count, 1);
    }

    #[test]
    fn exact_zero_positions_ignore_the_tolerance() {
        let reference = [0.0f32, 0.5, 0.0];
        let engine = [2f32.powi(-14), 0.5, -0.0];
        let with = |exact_zero| Expectation {
            exact_zero,
            ..Expectation::default()
        };
        let c = run(
            &reference,
            &engine,
            with(None),
            ValidationMode::SentinelSkip,
        );
        assert_eq!(c.failure_count, 0, "2^-14 is inside the tolerance");
        let zeros = BTreeSet::from([0, 2]);
        let c = run(
            &reference,
            &engine,
            with(Some(&zeros)),
            ValidationMode::SentinelSkip,
        );
        assert_eq!(c.failure_count, 1, "{:?}", c.failures);
        assert_eq!(
            c.failures[0],
            "position 0: its row admits no key, so it must be exactly 0 (reference 0, engine 0.00006103515625)"
        );
    }

    #[test]
    fn fp8_codes_pass_as_neighbours_and_fail_two_apart() {
        use ragged_core::Fp8Format;
        let e4m3 = Fp8Format::E4M3;
        let tolerance = Tolerance {
            neighbour_codes: true,
            ..Tolerance::EXACT
        };
        let check = |reference: &[u8], engine: &[u8], tolerance| {
            compare(
                3,
                HostData::Fp8(e4m3, reference),
                HostData::Fp8(e4m3, engine),
                Expectation::default(),
                ValidationMode::SentinelSkip,
                tolerance,
            )
            .unwrap_or_else(|e| panic!("{e}"))
            .failure_count
        };
        // 1.0 is 0x38; 0x39 (1.125) is its neighbour, 0x3A (1.25) is not; 0x00 and 0x80 (±0)
        // are equal values, 0x01 (2^-9) is the neighbour of both.
        let reference = [0x38, 0x38, 0x00, 0x80];
        assert_eq!(check(&reference, &[0x39, 0x37, 0x80, 0x01], tolerance), 0);
        assert_eq!(check(&reference, &[0x3A, 0x38, 0x00, 0x80], tolerance), 1);
        assert_eq!(
            check(&reference, &[0x39, 0x38, 0x00, 0x80], Tolerance::EXACT),
            1
        );
    }
}
