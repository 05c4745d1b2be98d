//! FP8 SDPA forward: the numeric definition of `kernels/core/fp8-attention.md` §3, written for
//! clarity rather than speed.
//!
//! Scalar loops in `f64`, so the only roundings are the ones the semantics name: P quantized
//! to FP8 (when `scale_s` is given), O quantized to its output type, and the `f32` outputs
//! (LSE, amax). Anything faster (f32 accumulation, blocked online softmax) differs from this by
//! at most a flip of one of those roundings; conformance therefore compares engines with this
//! function under a tolerance, while the conversions themselves are bit-exact
//! ([`Fp8Format`]).
//!
//! Layout (packed, ragged): sequence `b` owns rows `[Σ_{c<b} L(c), Σ_{c≤b} L(c))`; Q is
//! `[T_q, H_q, D_qk]`, K `[T_kv, H_kv, D_qk]`, V `[T_kv, H_kv, D_v]`, O `[T_q, H_q, D_v]` and
//! LSE `[T_q, H_q]`, all row-major. [`sdpa_forward_fp8_tensors`] stages the SDK's strided,
//! dense or ragged tensors into that layout and writes the results back.

mod tensors;

pub use tensors::{Fp8Amaxes, Fp8Attributes, Fp8Tensors, sdpa_forward_fp8_tensors};

use half::{bf16, f16};
use ragged_core::error::{KernelError, Role};
use ragged_core::{Fp8Format, MaskBand};

/// The per-tensor FP8 scalars (`[1,1,1,1]` FLOAT tensors in the graph).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8Scales {
    /// Multiplies every decoded Q element (`descale_q_tensor_uid`).
    pub descale_q: f32,
    /// Multiplies every decoded K element (`descale_k_tensor_uid`).
    pub descale_k: f32,
    /// Multiplies every decoded V element (`descale_v_tensor_uid`).
    pub descale_v: f32,
    /// P's quantization (`scale_s_tensor_uid`, `descale_s_tensor_uid`); `None` keeps P exact.
    pub softmax: Option<SoftmaxQuantization>,
}

/// How P is quantized before the second product.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxQuantization {
    /// P is multiplied by this before rounding to the inputs' FP8 format.
    pub scale_s: f32,
    /// The quantized P is multiplied by this in the second product.
    pub descale_s: f32,
}

/// O's element type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fp8Output {
    /// An FP8 format; O is multiplied by `scale_o` before rounding (`scale_o_tensor_uid`).
    Fp8 {
        /// O's format.
        format: Fp8Format,
        /// Applied after `amax_o` is taken, before rounding.
        scale_o: f32,
    },
    /// IEEE binary32, no output scale.
    F32,
    /// IEEE binary16, no output scale.
    F16,
    /// bfloat16, no output scale.
    BF16,
}

/// Shape and attributes of one FP8 forward.
#[derive(Debug, Clone, Copy)]
pub struct Fp8SdpaProblem<'a> {
    /// Format of Q, K and V, and of P when it is quantized.
    pub input: Fp8Format,
    /// O's element type.
    pub output: Fp8Output,
    /// Query heads `H_q`.
    pub heads_q: usize,
    /// Key/value heads `H_kv`; `H_q % H_kv == 0`, query head `h` uses `⌊h / (H_q/H_kv)⌋`.
    pub heads_kv: usize,
    /// Head dim of Q and K.
    pub d_qk: usize,
    /// Head dim of V and O.
    pub d_v: usize,
    /// `Lq(b)` per sequence.
    pub seq_lens_q: &'a [usize],
    /// `Lkv(b)` per sequence.
    pub seq_lens_kv: &'a [usize],
    /// The attention scale (already resolved, `schema.md` §6.2).
    pub attn_scale: f32,
    /// The resolved mask band.
    pub mask: MaskBand,
    /// The FP8 scalars.
    pub scales: Fp8Scales,
}

/// O in its output type.
#[derive(Debug, Clone, PartialEq)]
pub enum Fp8OutputData {
    /// FP8 codes.
    Fp8(Vec<u8>),
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
}

/// Everything an FP8 forward produces.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8SdpaOutputs {
    /// O, `[T_q, H_q, D_v]`.
    pub o: Fp8OutputData,
    /// Natural-log LSE of the descaled, attention-scaled scores, `[T_q, H_q]`; −∞ on a row with
    /// no admitted key.
    pub lse: Vec<f32>,
    /// `max P` over every admitted (row, key) pair, before `scale_s`; 0 when there is none.
    pub amax_s: f32,
    /// `max |O|` before `scale_o` and before rounding to the output type; 0 when O is empty.
    pub amax_o: f32,
}

/// Runs the FP8 forward of `fp8-attention.md` §3 on FP8 codes `q`, `k`, `v`.
///
/// Per sequence `b`, query head `h` (KV head `g`), query row `i` and admitted keys `J`:
/// 1. `S_ij = (Σ_d Q̂_id K̂_jd) · descale_q · descale_k · attn_scale`, `X̂` the decoded code;
/// 2. `m = max_J S`, `l = Σ_J e^(S − m)`, `P_ij = e^(S_ij − m) / l`, `LSE_i = m + ln l`;
/// 3. `amax_s` takes `P` (before any scale);
/// 4. with [`SoftmaxQuantization`]: `P̃ = decode(encode_input(P · scale_s))` and
///    `O'_i = descale_s · descale_v · Σ_J P̃_ij V̂_j`; without: `O'_i = descale_v · Σ_J P_ij V̂_j`;
/// 5. `amax_o` takes `|O'|`;
/// 6. O is `encode_output(O' · scale_o)` for FP8, `O'` rounded to nearest even otherwise.
///
/// A row with no admitted key has `O' = 0` and `LSE = −∞` and contributes nothing to either
/// amax. NaN anywhere propagates into O, LSE and both amaxes.
pub fn sdpa_forward_fp8(
    problem: &Fp8SdpaProblem<'_>,
    q: &[u8],
    k: &[u8],
    v: &[u8],
) -> Result<Fp8SdpaOutputs, KernelError> {
    // Inconsistent shapes: the plugin declines them long before; refused here rather than
    // indexed out of bounds.
    let p = problem;
    let dim = |role, field, value: usize, expected: String| KernelError::SdpaDim {
        role,
        field,
        value: i64::try_from(value).unwrap_or(i64::MAX),
        expected,
    };
    if p.heads_kv == 0 || p.heads_q == 0 || !p.heads_q.is_multiple_of(p.heads_kv) {
        return Err(dim(
            Role::Q,
            "heads",
            p.heads_q,
            format!("a positive multiple of H_kv = {}", p.heads_kv),
        ));
    }
    if p.seq_lens_q.len() != p.seq_lens_kv.len() {
        return Err(dim(
            Role::K,
            "batch (sequence lengths)",
            p.seq_lens_kv.len(),
            format!("{}, as Q's", p.seq_lens_q.len()),
        ));
    }
    let total_q: usize = p.seq_lens_q.iter().sum();
    let total_kv: usize = p.seq_lens_kv.iter().sum();
    for (role, expected, actual) in [
        (Role::Q, total_q * p.heads_q * p.d_qk, q.len()),
        (Role::K, total_kv * p.heads_kv * p.d_qk, k.len()),
        (Role::V, total_kv * p.heads_kv * p.d_v, v.len()),
    ] {
        if expected != actual {
            return Err(dim(role, "elements", actual, expected.to_string()));
        }
    }

    let fmt = p.input;
    let group = p.heads_q / p.heads_kv;
    let score_scale =
        f64::from(p.scales.descale_q) * f64::from(p.scales.descale_k) * f64::from(p.attn_scale);
    let descale_v = f64::from(p.scales.descale_v);

    // O' (before scale_o) for every element, zero where a row sees no key.
    let mut o_exact = vec![0.0f64; total_q * p.heads_q * p.d_v];
    let mut lse = vec![f32::NEG_INFINITY; total_q * p.heads_q];
    let mut amax_s = 0.0f64;

    let (mut q0, mut kv0) = (0usize, 0usize);
    for (&lq, &lkv) in p.seq_lens_q.iter().zip(p.seq_lens_kv) {
        for h in 0..p.heads_q {
            let g = h / group;
            for i in 0..lq {
                let keys = p.mask.admitted(i, lq, lkv);
                if keys.is_empty() {
                    continue;
                }
                let q_row = &q[((q0 + i) * p.heads_q + h) * p.d_qk..][..p.d_qk];
                // Step 1: scores of the admitted keys.
                let scores: Vec<f64> = keys
                    .clone()
                    .map(|j| {
                        let k_row = &k[((kv0 + j) * p.heads_kv + g) * p.d_qk..][..p.d_qk];
                        let dot: f64 = q_row
                            .iter()
                            .zip(k_row)
                            .map(|(&a, &b)| fmt.decode_f64(a) * fmt.decode_f64(b))
                            .sum();
                        dot * score_scale
                    })
                    .collect();
                // Step 2: softmax and LSE.
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, nan_max);
                let exps: Vec<f64> = scores.iter().map(|&s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                lse[(q0 + i) * p.heads_q + h] = (max + sum.ln()) as f32;
                // Steps 3 and 4: amax_s, P's quantization, the second product.
                let o_row = &mut o_exact[((q0 + i) * p.heads_q + h) * p.d_v..][..p.d_v];
                for (j, e) in keys.zip(exps) {
                    let prob = e / sum;
                    amax_s = nan_max(amax_s, prob);
                    let weight = match p.scales.softmax {
                        Some(sq) => {
                            fmt.quantize(prob * f64::from(sq.scale_s)) * f64::from(sq.descale_s)
                        }
                        None => prob,
                    };
                    let v_row = &v[((kv0 + j) * p.heads_kv + g) * p.d_v..][..p.d_v];
                    for (acc, &code) in o_row.iter_mut().zip(v_row) {
                        *acc += weight * fmt.decode_f64(code);
                    }
                }
                for acc in o_row.iter_mut() {
                    *acc *= descale_v;
                }
            }
        }
        q0 += lq;
        kv0 += lkv;
    }

    // Step 5: amax_o before the output scale. Rounding to f32 is monotonic, so this equals the
    // max over O' rounded to f32, which is what an f32-accumulating engine reduces.
    let amax_o = o_exact.iter().fold(0.0f64, |m, &x| nan_max(m, x.abs()));
    // Step 6: the output type.
    let o = match p.output {
        Fp8Output::Fp8 { format, scale_o } => Fp8OutputData::Fp8(
            o_exact
                .iter()
                .map(|&x| format.encode(x * f64::from(scale_o)))
                .collect(),
        ),
        Fp8Output::F32 => Fp8OutputData::F32(o_exact.iter().map(|&x| x as f32).collect()),
        Fp8Output::F16 => Fp8OutputData::F16(o_exact.iter().map(|&x| f16::from_f64(x)).collect()),
        Fp8Output::BF16 => {
            Fp8OutputData::BF16(o_exact.iter().map(|&x| bf16::from_f64(x)).collect())
        }
    };
    Ok(Fp8SdpaOutputs {
        o,
        lse,
        amax_s: amax_s as f32,
        amax_o: amax_o as f32,
    })
}

/// `max` that lets a NaN through (`f64::max` drops it), so a NaN input shows in the amaxes.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One query row over `lens_kv[0]` keys, head dims 1, unit scales, f32 output.
    fn one_row(lens_kv: &[usize], softmax: Option<SoftmaxQuantization>) -> Fp8SdpaProblem<'_> {
        Fp8SdpaProblem {
            input: Fp8Format::E4M3,
            output: Fp8Output::F32,
            heads_q: 1,
            heads_kv: 1,
            d_qk: 1,
            d_v: 1,
            seq_lens_q: &[1],
            seq_lens_kv: lens_kv,
            attn_scale: 1.0,
            mask: MaskBand::none(),
            scales: Fp8Scales {
                descale_q: 1.0,
                descale_k: 1.0,
                descale_v: 1.0,
                softmax,
            },
        }
    }

    #[test]
    fn equal_scores_quantize_p_by_hand() {
        // Three equal scores: P = 1/3; with scale_s = 448, 149.33 rounds to 144 in E4M3 (spacing
        // 16 in [128, 256)), so O = 144/448 · (v0 + v1 + v2) instead of the exact mean.
        let e4m3 = Fp8Format::E4M3;
        let quant = SoftmaxQuantization {
            scale_s: 448.0,
            descale_s: 1.0 / 448.0,
        };
        let problem = one_row(&[3], Some(quant));
        let q = [e4m3.encode(1.0)];
        let k = [e4m3.encode(0.5); 3];
        let v = [e4m3.encode(1.0), e4m3.encode(2.0), e4m3.encode(4.0)];
        let out = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap();
        let expected = (144.0f64 * f64::from(1.0f32 / 448.0) * 7.0) as f32;
        assert_eq!(out.o, Fp8OutputData::F32(vec![expected]));
        assert_eq!(out.amax_s, (1.0f64 / 3.0) as f32);
        assert_eq!(out.amax_o, expected);
        assert_eq!(out.lse[0], (0.5 + 3f64.ln()) as f32);

        // Without P quantization the same inputs give the exact mean.
        let exact = sdpa_forward_fp8(&one_row(&[3], None), &q, &k, &v).unwrap();
        assert_eq!(exact.o, Fp8OutputData::F32(vec![(7.0f64 / 3.0) as f32]));
    }

    #[test]
    fn fp8_output_is_scaled_after_amax_and_saturates() {
        let e4m3 = Fp8Format::E4M3;
        let mut problem = one_row(&[1], None);
        problem.output = Fp8Output::Fp8 {
            format: Fp8Format::E5M2,
            scale_o: 1000.0,
        };
        let q = [e4m3.encode(1.0)];
        let k = [e4m3.encode(1.0)];
        let v = [e4m3.encode(-96.0)];
        let out = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap();
        // O' = −96; amax_o = 96 (before scale_o); −96000 saturates to E5M2's −57344.
        assert_eq!(out.amax_o, 96.0);
        assert_eq!(out.amax_s, 1.0);
        assert_eq!(out.o, Fp8OutputData::Fp8(vec![0xFB]));
    }

    #[test]
    fn rows_without_keys_write_zero_and_minus_infinity_and_leave_the_amaxes_alone() {
        let mut problem = one_row(&[0], None);
        problem.output = Fp8Output::Fp8 {
            format: Fp8Format::E4M3Fnuz,
            scale_o: 2.0,
        };
        let out = sdpa_forward_fp8(&problem, &[0x40], &[], &[]).unwrap();
        assert_eq!(out.o, Fp8OutputData::Fp8(vec![0x00]));
        assert_eq!(out.lse, vec![f32::NEG_INFINITY]);
        assert_eq!((out.amax_s, out.amax_o), (0.0, 0.0));
    }

    #[test]
    fn nan_inputs_reach_the_amaxes() {
        let e4m3 = Fp8Format::E4M3;
        let problem = one_row(&[2], None);
        let q = [e4m3.encode(1.0)];
        let k = [e4m3.encode(1.0), e4m3.encode(1.0)];
        let v = [e4m3.encode(1.0), e4m3.nan_code(false)];
        let out = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap();
        assert!(out.amax_o.is_nan());
        assert_eq!(out.amax_s, 0.5);
    }

    #[test]
    fn inconsistent_shapes_are_refused() {
        let mut problem = one_row(&[2], None);
        assert_eq!(
            sdpa_forward_fp8(&problem, &[0], &[0], &[0, 0]),
            Err(KernelError::SdpaDim {
                role: Role::K,
                field: "elements",
                value: 1,
                expected: "2".to_owned(),
            })
        );
        problem.heads_kv = 2;
        assert!(matches!(
            sdpa_forward_fp8(&problem, &[0], &[0, 0], &[0, 0]),
            Err(KernelError::SdpaDim {
                role: Role::Q,
                field: "heads",
                ..
            })
        ));
    }
}
