//! The oracle's own FP8 arithmetic (kernels/core/fp8-attention.md §2), written from the
//! document's table rather than taken from `ragged_core::fp8`: every code's value built from
//! its sign, exponent and mantissa fields, and rounding done as a search for the nearest value
//! of that list, so a wrong bit manipulation in the core would show as a disagreement.

use hipdnn_shim::harness::Bundle;
use ragged_core::{Fp8Format, HostData};
use ragged_schema::model::{Graph, SdpaAttributes};

use super::{scalar, tensor};

/// One FP8 format: every non-negative finite value in code order (which is value order).
#[derive(Debug, Clone)]
pub struct Fp8Table {
    format: Fp8Format,
    /// `(code, value)` for codes `0x00..0x80` that are finite numbers.
    positive: Vec<(u8, f64)>,
}

impl Fp8Table {
    pub fn new(format: Fp8Format) -> Fp8Table {
        // §2's table: exponent bits, bias, and the top positive codes that are not numbers.
        let (exponent_bits, bias, not_numbers): (u32, i32, &[u8]) = match format {
            Fp8Format::E4M3 => (4, 7, &[0x7F]),
            Fp8Format::E5M2 => (5, 15, &[0x7C, 0x7D, 0x7E, 0x7F]),
            Fp8Format::E4M3Fnuz => (4, 8, &[]),
            Fp8Format::E5M2Fnuz => (5, 16, &[]),
        };
        let mantissa_bits = 7 - exponent_bits;
        let positive = (0u8..0x80)
            .filter(|code| !not_numbers.contains(code))
            .map(|code| {
                let exponent = i32::from(code >> mantissa_bits);
                let fraction =
                    f64::from(code & ((1 << mantissa_bits) - 1)) / f64::from(1u32 << mantissa_bits);
                let value = if exponent == 0 {
                    fraction * 2f64.powi(1 - bias)
                } else {
                    (1.0 + fraction) * 2f64.powi(exponent - bias)
                };
                (code, value)
            })
            .collect();
        Fp8Table { format, positive }
    }

    fn fnuz(&self) -> bool {
        matches!(self.format, Fp8Format::E4M3Fnuz | Fp8Format::E5M2Fnuz)
    }

    /// The value of `code`: NaN codes give NaN, E5M2's `S.11111.00` infinity.
    pub fn value(&self, code: u8) -> f64 {
        let negative = code & 0x80 != 0;
        let magnitude = code & 0x7F;
        if self.fnuz() {
            if code == 0x80 {
                return f64::NAN;
            }
        } else if self.format == Fp8Format::E5M2 && magnitude == 0x7C {
            return if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
        }
        match self.positive.get(usize::from(magnitude)) {
            Some(&(_, v)) if !negative => v,
            Some(&(_, v)) => -v,
            None => f64::NAN,
        }
    }

    /// The code of `x`: nearest value, ties to the even code, finite values beyond the largest
    /// saturating to it; NaN stays NaN, infinity stays infinite only in E5M2; FNUZ has no −0.
    pub fn round(&self, x: f64) -> u8 {
        let nan = if self.fnuz() { 0x80 } else { 0x7F };
        if x.is_nan() {
            return nan;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0x00 };
        if x.is_infinite() {
            return if self.format == Fp8Format::E5M2 {
                sign | 0x7C
            } else {
                nan
            };
        }
        let a = x.abs();
        let above = self.positive.partition_point(|&(_, v)| v < a);
        let code = match above {
            0 => self.positive[0].0,
            n if n == self.positive.len() => self.positive[n - 1].0,
            n => {
                let (lo_code, lo) = self.positive[n - 1];
                let (hi_code, hi) = self.positive[n];
                if a - lo < hi - a || (a - lo == hi - a && lo_code % 2 == 0) {
                    lo_code
                } else {
                    hi_code
                }
            }
        };
        // FNUZ: a negative value that rounds to zero is +0 (0x80 is NaN there).
        if code == 0 && self.fnuz() {
            0
        } else {
            sign | code
        }
    }

    /// `value(round(x))`.
    pub fn quantize(&self, x: f64) -> f64 {
        self.value(self.round(x))
    }
}

/// The FP8 steps of fp8-attention.md §3 for one node, resolved.
pub(super) struct Fp8Steps {
    /// `descale_q · descale_k`, applied to every score (step 1).
    pub(super) score_descale: f64,
    pub(super) descale_v: f64,
    /// `(scale_s, descale_s, format of Q)`: P quantized (step 4).
    pub(super) softmax: Option<(f64, f64, Fp8Table)>,
    /// O's scale, FP8 O only (step 6).
    pub(super) scale_o: f64,
}

/// The node's FP8 steps when Q holds FP8 codes; the scalar fields on a 16-bit node are refused.
pub(super) fn fp8_steps(
    graph: &Graph,
    bundle: &Bundle,
    a: &SdpaAttributes,
) -> Result<Option<Fp8Steps>, String> {
    let format = match tensor(bundle, a.q_tensor_uid)?.host_data() {
        HostData::Fp8(format, _) => format,
        _ => {
            let fields = [
                ("descale_q_tensor_uid", a.descale_q_tensor_uid),
                ("descale_k_tensor_uid", a.descale_k_tensor_uid),
                ("descale_v_tensor_uid", a.descale_v_tensor_uid),
                ("descale_s_tensor_uid", a.descale_s_tensor_uid),
                ("scale_s_tensor_uid", a.scale_s_tensor_uid),
                ("scale_o_tensor_uid", a.scale_o_tensor_uid),
                ("amax_s_tensor_uid", a.amax_s_tensor_uid),
                ("amax_o_tensor_uid", a.amax_o_tensor_uid),
            ];
            return match fields.iter().find(|(_, uid)| uid.is_some()) {
                Some((name, _)) => Err(format!("{name} is set on a graph whose Q is not FP8")),
                None => Ok(None),
            };
        }
    };
    if a.page_table_k_tensor_uid.is_some() || a.sink_token_tensor_uid.is_some() {
        return Err("an FP8 graph with paged K/V or sinks; the oracle does not model it".into());
    }
    let required = |uid: Option<i64>, name: &str| -> Result<f64, String> {
        let uid = uid.ok_or_else(|| format!("an FP8 graph without {name}"))?;
        scalar(graph, bundle, uid)
    };
    let softmax = match (a.scale_s_tensor_uid, a.descale_s_tensor_uid) {
        (None, None) => None,
        (scale_s, descale_s) => Some((
            required(scale_s, "scale_s_tensor_uid")?,
            required(descale_s, "descale_s_tensor_uid")?,
            Fp8Table::new(format),
        )),
    };
    Ok(Some(Fp8Steps {
        score_descale: required(a.descale_q_tensor_uid, "descale_q_tensor_uid")?
            * required(a.descale_k_tensor_uid, "descale_k_tensor_uid")?,
        descale_v: required(a.descale_v_tensor_uid, "descale_v_tensor_uid")?,
        softmax,
        scale_o: match a.scale_o_tensor_uid {
            Some(uid) => scalar(graph, bundle, uid)?,
            None => 1.0,
        },
    }))
}

/// `max` that keeps a NaN (fp8-attention.md §3.7: NaN reaches the amaxes).
pub(super) fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documents_landmarks() {
        let e4m3 = Fp8Table::new(Fp8Format::E4M3);
        assert_eq!(e4m3.value(0x7E), 448.0);
        assert_eq!(e4m3.value(0x01), 2f64.powi(-9));
        assert!(e4m3.value(0xFF).is_nan());
        assert_eq!(e4m3.round(1000.0), 0x7E);
        assert_eq!(e4m3.round(-1e-9), 0x80);
        // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): the even code.
        assert_eq!(e4m3.round(1.0625), 0x38);
        assert_eq!(e4m3.round(1.1875), 0x3A);
        let e5m2 = Fp8Table::new(Fp8Format::E5M2);
        assert_eq!(e5m2.value(0x7B), 57344.0);
        assert_eq!(e5m2.value(0xFC), f64::NEG_INFINITY);
        assert_eq!(e5m2.round(f64::INFINITY), 0x7C);
        assert_eq!(e5m2.round(1e9), 0x7B);
        let fnuz = Fp8Table::new(Fp8Format::E4M3Fnuz);
        assert_eq!(fnuz.value(0x7F), 240.0);
        assert_eq!(fnuz.value(0x01), 2f64.powi(-10));
        assert!(fnuz.value(0x80).is_nan());
        assert_eq!(fnuz.round(-1e-9), 0x00);
        assert_eq!(fnuz.round(-240.0), 0xFF);
        assert_eq!(fnuz.value(0xFF), -240.0);
        assert_eq!(fnuz.round(f64::INFINITY), 0x80);
        assert_eq!(
            Fp8Table::new(Fp8Format::E5M2Fnuz).value(0x01),
            2f64.powi(-17)
        );
    }
}
