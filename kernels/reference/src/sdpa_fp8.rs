//! FP8 SDPA forward: the numeric definition of `kernels/core/fp8-attention.md` §3.
//!
//! Scalar loops in `f64`, so the only roundings are the ones the semantics name: P quantized
//! to FP8 (when `scale_s` is given), O quantized to its output type, and the `f32` outputs
//! (LSE, amax). Anything faster (f32 accumulation, blocked online softmax) differs from this by
//! at most a flip of one of those roundings; conformance therefore compares engines with this
//! function under a tolerance, while the conversions themselves are bit-exact
//! ([`Fp8Format`]).
//!
//! Speed comes only from what leaves every value unchanged: codes are decoded through a
//! 256-entry table, each (sequence, KV head) decodes its K and V rows once for all the query
//! heads of its group, those items run in parallel on the crate's pool, and four dot products
//! run side by side, each still adding its terms in order. Every sum keeps the definition's
//! order, so the result is bit-for-bit what the plain loops give, on any number of threads.
//!
//! Layout (packed, ragged): sequence `b` owns rows `[Σ_{c<b} L(c), Σ_{c≤b} L(c))`; Q is
//! `[T_q, H_q, D_qk]`, K `[T_kv, H_kv, D_qk]`, V `[T_kv, H_kv, D_v]`, O `[T_q, H_q, D_v]` and
//! LSE `[T_q, H_q]`, all row-major. [`sdpa_forward_fp8_tensors`] stages the SDK's strided,
//! dense or ragged tensors into that layout and writes the results back.

mod tensors;

pub use tensors::{Fp8Amaxes, Fp8Attributes, Fp8Tensors, sdpa_forward_fp8_tensors};

use half::{bf16, f16};
use parking_lot::Mutex;
use ragged_core::error::{KernelError, Role};
use ragged_core::{Fp8Format, MaskBand};

use crate::parallel;

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

    let group = p.heads_q / p.heads_kv;
    let score_scale =
        f64::from(p.scales.descale_q) * f64::from(p.scales.descale_k) * f64::from(p.attn_scale);
    let plan = Plan {
        problem: p,
        decoded: decode_table(p.input),
        group,
        score_scale,
        descale_v: f64::from(p.scales.descale_v),
    };

    // One item per (sequence, KV head): its K and V rows are decoded once and serve every query
    // head of its group. Items write disjoint rows, so each fills its own buffers, copied into O'
    // and the LSE afterwards in item order.
    let mut items = Vec::with_capacity(p.seq_lens_q.len() * p.heads_kv);
    let (mut q0, mut kv0) = (0usize, 0usize);
    for (&lq, &lkv) in p.seq_lens_q.iter().zip(p.seq_lens_kv) {
        for g in 0..p.heads_kv {
            items.push(Item {
                index: items.len(),
                q0,
                kv0,
                lq,
                lkv,
                g,
            });
        }
        q0 += lq;
        kv0 += lkv;
    }
    let results: Vec<Mutex<Option<ItemOutput>>> = items.iter().map(|_| Mutex::new(None)).collect();
    parallel::for_each_init(items.clone(), Scratch::default, |scratch, item| {
        let out = plan.run(&item, q, k, v, scratch);
        *results[item.index].lock() = Some(out);
    });

    // O' (before scale_o) for every element, zero where a row sees no key.
    let mut o_exact = vec![0.0f64; total_q * p.heads_q * p.d_v];
    let mut lse = vec![f32::NEG_INFINITY; total_q * p.heads_q];
    // `nan_max` is commutative and associative (NaN absorbs), so folding the items' maxima in
    // any order gives the maximum over every pair.
    let mut amax_s = 0.0f64;
    for (item, slot) in items.iter().zip(results) {
        let out = slot
            .into_inner()
            .unwrap_or_else(|| unreachable!("for_each_init runs every item"));
        amax_s = nan_max(amax_s, out.amax_s);
        for (local, h) in (item.g * group..(item.g + 1) * group).enumerate() {
            for i in 0..item.lq {
                let row = (item.q0 + i) * p.heads_q + h;
                let at = local * item.lq + i;
                lse[row] = out.lse[at];
                o_exact[row * p.d_v..][..p.d_v].copy_from_slice(&out.o[at * p.d_v..][..p.d_v]);
            }
        }
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

/// Every code's exact value, so the inner loops index a table instead of decoding bit fields.
fn decode_table(format: Fp8Format) -> [f64; 256] {
    std::array::from_fn(|code| format.decode_f64(code as u8))
}

/// One work item: sequence `(q0, kv0, lq, lkv)` and KV head `g` with its query heads.
#[derive(Debug, Clone, Copy)]
struct Item {
    index: usize,
    q0: usize,
    kv0: usize,
    lq: usize,
    lkv: usize,
    g: usize,
}

/// What one item computed: O' and the LSE of its rows, `[local head, row]` order, and its amax_s.
struct ItemOutput {
    o: Vec<f64>,
    lse: Vec<f32>,
    amax_s: f64,
}

/// Per-thread buffers, reused from item to item.
#[derive(Default)]
struct Scratch {
    k: Vec<f64>,
    v: Vec<f64>,
    q_row: Vec<f64>,
    scores: Vec<f64>,
}

/// The problem with everything every item shares resolved once.
struct Plan<'p, 'a> {
    problem: &'p Fp8SdpaProblem<'a>,
    decoded: [f64; 256],
    group: usize,
    score_scale: f64,
    descale_v: f64,
}

impl Plan<'_, '_> {
    /// Steps 1–4 of `sdpa_forward_fp8` for every row of `item`'s query heads, with the same
    /// operations in the same order as the definition: each dot product and each sum runs over
    /// its terms in index order, so the result does not depend on how items are scheduled.
    fn run(&self, item: &Item, q: &[u8], k: &[u8], v: &[u8], s: &mut Scratch) -> ItemOutput {
        let p = self.problem;
        let table = &self.decoded;
        let (d_qk, d_v) = (p.d_qk, p.d_v);
        let gather = |dst: &mut Vec<f64>, src: &[u8], dim: usize| {
            dst.clear();
            for j in 0..item.lkv {
                let row = &src[((item.kv0 + j) * p.heads_kv + item.g) * dim..][..dim];
                dst.extend(row.iter().map(|&c| table[usize::from(c)]));
            }
        };
        gather(&mut s.k, k, d_qk);
        gather(&mut s.v, v, d_v);
        let mut out = ItemOutput {
            o: vec![0.0; self.group * item.lq * d_v],
            lse: vec![f32::NEG_INFINITY; self.group * item.lq],
            amax_s: 0.0,
        };
        for local in 0..self.group {
            let h = item.g * self.group + local;
            for i in 0..item.lq {
                let keys = p.mask.admitted(i, item.lq, item.lkv);
                if keys.is_empty() {
                    continue;
                }
                let q_row = &q[((item.q0 + i) * p.heads_q + h) * d_qk..][..d_qk];
                s.q_row.clear();
                s.q_row.extend(q_row.iter().map(|&c| table[usize::from(c)]));
                // Step 1: scores of the admitted keys.
                let rows = &s.k[keys.start * d_qk..keys.end * d_qk];
                scores(&s.q_row, rows, keys.len(), &mut s.scores);
                s.scores.iter_mut().for_each(|x| *x *= self.score_scale);
                // Step 2: softmax and LSE; the scores become e^(S − m) in place.
                let max = s.scores.iter().copied().fold(f64::NEG_INFINITY, nan_max);
                s.scores.iter_mut().for_each(|x| *x = (*x - max).exp());
                let sum: f64 = s.scores.iter().sum();
                let at = local * item.lq + i;
                out.lse[at] = (max + sum.ln()) as f32;
                // Steps 3 and 4: amax_s, P's quantization, the second product.
                let o_row = &mut out.o[at * d_v..][..d_v];
                for (j, &e) in keys.zip(&s.scores) {
                    let prob = e / sum;
                    out.amax_s = nan_max(out.amax_s, prob);
                    let weight = match p.scales.softmax {
                        Some(sq) => {
                            p.input.quantize(prob * f64::from(sq.scale_s)) * f64::from(sq.descale_s)
                        }
                        None => prob,
                    };
                    let v_row = &s.v[j * d_v..][..d_v];
                    for (acc, &x) in o_row.iter_mut().zip(v_row) {
                        *acc += weight * x;
                    }
                }
                for acc in o_row.iter_mut() {
                    *acc *= self.descale_v;
                }
            }
        }
        out
    }
}

/// `Σ_d q_d · k_jd` for each of the `count` key rows of `keys` (rows of `q.len()`), into `out`.
///
/// Four keys at a time, each with its own accumulator, so the additions of different keys
/// overlap while every dot product still adds its terms in `d` order, starting from −0.0 as
/// `f64`'s `Sum` does: the values are those of `q.iter().zip(k).map(|(a, b)| a * b).sum()`.
fn scores(q: &[f64], keys: &[f64], count: usize, out: &mut Vec<f64>) {
    let d = q.len();
    out.clear();
    if d == 0 {
        out.resize(count, -0.0);
        return;
    }
    let mut blocks = keys.chunks_exact(4 * d);
    for block in blocks.by_ref() {
        let (k0, rest) = block.split_at(d);
        let (k1, rest) = rest.split_at(d);
        let (k2, k3) = rest.split_at(d);
        let mut acc = [-0.0f64; 4];
        for (x, (((a, b), c), e)) in q.iter().zip(k0.iter().zip(k1).zip(k2).zip(k3)) {
            acc[0] += x * a;
            acc[1] += x * b;
            acc[2] += x * c;
            acc[3] += x * e;
        }
        out.extend_from_slice(&acc);
    }
    for row in blocks.remainder().chunks_exact(d) {
        out.push(q.iter().zip(row).map(|(a, b)| a * b).sum());
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
    fn four_way_scores_equal_the_plain_sums_bit_for_bit() {
        // Head dims 0, 1 and 5; 7 keys (a block of four and three left over); signed zeros,
        // whose sign `Sum`'s −0.0 start decides, and values whose sum depends on the order.
        let table = decode_table(Fp8Format::E5M2);
        for d in [0usize, 1, 5] {
            let q: Vec<f64> = (0..d).map(|i| table[(i * 37 + 3) % 256]).collect();
            let mut keys: Vec<f64> = (0..7 * d).map(|i| table[(i * 91 + 11) % 256]).collect();
            keys.iter_mut().take(d).for_each(|x| *x = -0.0);
            let mut got = Vec::new();
            scores(&q, &keys, 7, &mut got);
            let want: Vec<f64> = (0..7)
                .map(|j| {
                    q.iter()
                        .zip(&keys[j * d..(j + 1) * d])
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "d = {d}");
        }
    }

    #[test]
    fn the_result_does_not_depend_on_the_threads() {
        let e4m3 = Fp8Format::E4M3;
        let (lens_q, lens_kv) = ([3usize, 0, 6, 2], [5usize, 2, 6, 0]);
        let problem = Fp8SdpaProblem {
            output: Fp8Output::Fp8 {
                format: Fp8Format::E5M2,
                scale_o: 8.0,
            },
            heads_q: 4,
            heads_kv: 2,
            d_qk: 6,
            d_v: 3,
            seq_lens_q: &lens_q,
            seq_lens_kv: &lens_kv,
            attn_scale: 0.4,
            mask: MaskBand::causal_bottom_right(),
            ..one_row(
                &[1],
                Some(SoftmaxQuantization {
                    scale_s: 448.0,
                    descale_s: 1.0 / 448.0,
                }),
            )
        };
        let codes = |n: usize, salt: usize| -> Vec<u8> {
            (0..n)
                .map(|i| e4m3.encode(((i * 7919 + salt) % 97) as f64 / 12.0 - 4.0))
                .collect()
        };
        let (q, k, v) = (
            codes(11 * 4 * 6, 1),
            codes(13 * 2 * 6, 2),
            codes(13 * 2 * 3, 3),
        );
        let pooled = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap();
        let inline =
            crate::parallel::on_calling_thread(|| sdpa_forward_fp8(&problem, &q, &k, &v)).unwrap();
        assert_eq!(pooled.o, inline.o);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&pooled.lse), bits(&inline.lse));
        assert_eq!(
            (pooled.amax_s.to_bits(), pooled.amax_o.to_bits()),
            (inline.amax_s.to_bits(), inline.amax_o.to_bits())
        );
        assert!(pooled.amax_s > 0.0 && pooled.amax_o > 0.0);
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
