//! The FP8 forward against a float64 oracle written here from `kernels/core/fp8-attention.md`
//! alone: its own FP8 value tables, its own round-to-nearest-even (a search over the table, not
//! the core's arithmetic), its own masks and indexing. Only the input codes are shared.
//!
//! Both sides work in f64, so they agree to the bit unless a value lands within an f64 ulp of
//! an FP8 rounding midpoint; the fixed seeds below were checked to contain no such case, and
//! any future disagreement is therefore a real change of semantics.

use half::{bf16, f16};
use ragged_core::{DiagonalAlignment, Fp8Format, MaskBand};
use ragged_reference::{
    Fp8Output, Fp8OutputData, Fp8Scales, Fp8SdpaProblem, SoftmaxQuantization, sdpa_forward_fp8,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One FP8 format as the oracle sees it: every positive finite code with its value, ascending.
struct Table {
    fnuz: bool,
    positive: Vec<(u8, f64)>,
}

impl Table {
    fn new(format: Fp8Format) -> Table {
        // (exponent bits, bias, fnuz, the top positive codes that are not finite numbers)
        let (e_bits, bias, fnuz, non_finite): (u32, i32, bool, &[u8]) = match format {
            Fp8Format::E4M3 => (4, 7, false, &[0x7F]),
            Fp8Format::E5M2 => (5, 15, false, &[0x7C, 0x7D, 0x7E, 0x7F]),
            Fp8Format::E4M3Fnuz => (4, 8, true, &[]),
            Fp8Format::E5M2Fnuz => (5, 16, true, &[]),
        };
        let m_bits = 7 - e_bits;
        let positive = (0u8..0x80)
            .filter(|c| !non_finite.contains(c))
            .map(|c| {
                let e = i32::from(c >> m_bits);
                let f = f64::from(c & ((1 << m_bits) - 1));
                let scale = f64::from(1u32 << m_bits);
                let value = if e == 0 {
                    f / scale * 2f64.powi(1 - bias)
                } else {
                    (1.0 + f / scale) * 2f64.powi(e - bias)
                };
                (c, value)
            })
            .collect();
        Table { fnuz, positive }
    }

    fn value(&self, code: u8) -> f64 {
        let magnitude = self.positive[usize::from(code & 0x7F)].1;
        if code & 0x80 != 0 {
            -magnitude
        } else {
            magnitude
        }
    }

    /// Nearest code, ties to the even code, magnitudes beyond the largest saturating to it.
    fn round(&self, x: f64) -> u8 {
        assert!(x.is_finite(), "the oracle's inputs stay finite");
        let a = x.abs();
        let last = self.positive.len() - 1;
        let code = match self.positive.iter().position(|&(_, v)| v >= a) {
            None => self.positive[last].0,
            Some(0) => 0,
            Some(hi) => {
                let (lo_code, lo) = self.positive[hi - 1];
                let (hi_code, hi) = self.positive[hi];
                if a - lo < hi - a {
                    lo_code
                } else if hi - a < a - lo {
                    hi_code
                } else if lo_code % 2 == 0 {
                    lo_code
                } else {
                    hi_code
                }
            }
        };
        let zero_is_unsigned = code == 0 && self.fnuz;
        if x.is_sign_negative() && !zero_is_unsigned {
            code | 0x80
        } else {
            code
        }
    }
}

#[derive(Clone, Copy)]
enum Causal {
    TopLeft,
    BottomRight,
}

struct Case {
    input: Fp8Format,
    output: Fp8Output,
    heads_q: usize,
    heads_kv: usize,
    d_qk: usize,
    d_v: usize,
    lens_q: Vec<usize>,
    lens_kv: Vec<usize>,
    causal: Causal,
    descale: [f32; 3],
    softmax: Option<(f32, f32)>,
    seed: u64,
}

struct OracleOut {
    /// O before rounding to the output type (after scale_o for FP8 outputs).
    o: Vec<f64>,
    lse: Vec<f64>,
    amax_s: f64,
    amax_o: f64,
}

/// The semantics of fp8-attention.md §3, step by step, in the plainest f64.
fn oracle(case: &Case, q: &[u8], k: &[u8], v: &[u8]) -> OracleOut {
    let table = Table::new(case.input);
    let [descale_q, descale_k, descale_v] = case.descale.map(f64::from);
    let attn_scale = 1.0 / (case.d_qk as f64).sqrt();
    let attn_scale = f64::from(attn_scale as f32); // the graph carries it as f32
    let rows_q: usize = case.lens_q.iter().sum();
    let mut out = OracleOut {
        o: vec![0.0; rows_q * case.heads_q * case.d_v],
        lse: vec![f64::NEG_INFINITY; rows_q * case.heads_q],
        amax_s: 0.0,
        amax_o: 0.0,
    };
    let q_at =
        |t: usize, h: usize, d: usize| table.value(q[(t * case.heads_q + h) * case.d_qk + d]);
    let k_at =
        |t: usize, g: usize, d: usize| table.value(k[(t * case.heads_kv + g) * case.d_qk + d]);
    let v_at =
        |t: usize, g: usize, d: usize| table.value(v[(t * case.heads_kv + g) * case.d_v + d]);

    let (mut q_start, mut kv_start) = (0, 0);
    for b in 0..case.lens_q.len() {
        let (lq, lkv) = (case.lens_q[b], case.lens_kv[b]);
        for h in 0..case.heads_q {
            let g = h * case.heads_kv / case.heads_q;
            for i in 0..lq {
                let limit = match case.causal {
                    Causal::TopLeft => i as i64,
                    Causal::BottomRight => i as i64 + lkv as i64 - lq as i64,
                };
                let keys: Vec<usize> = (0..lkv).filter(|&j| j as i64 <= limit).collect();
                if keys.is_empty() {
                    continue;
                }
                // Descaled Q·K, then the attention scale.
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let mut dot = 0.0;
                        for d in 0..case.d_qk {
                            dot += (q_at(q_start + i, h, d) * descale_q)
                                * (k_at(kv_start + j, g, d) * descale_k);
                        }
                        dot * attn_scale
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                out.lse[(q_start + i) * case.heads_q + h] = lse;
                for dv in 0..case.d_v {
                    let mut acc = 0.0;
                    for (n, &j) in keys.iter().enumerate() {
                        let p = (s[n] - lse).exp();
                        if dv == 0 {
                            out.amax_s = out.amax_s.max(p);
                        }
                        let p_used = match case.softmax {
                            // Quantize P·scale_s to the inputs' format, multiply back by descale_s.
                            Some((scale_s, descale_s)) => {
                                let code = table.round(p * f64::from(scale_s));
                                table.value(code) * f64::from(descale_s)
                            }
                            None => p,
                        };
                        acc += p_used * (v_at(kv_start + j, g, dv) * descale_v);
                    }
                    out.o[((q_start + i) * case.heads_q + h) * case.d_v + dv] = acc;
                }
            }
        }
        q_start += lq;
        kv_start += lkv;
    }
    out.amax_o = out.o.iter().fold(0.0, |m, x| m.max(x.abs()));
    if let Fp8Output::Fp8 { scale_o, .. } = case.output {
        for x in &mut out.o {
            *x *= f64::from(scale_o);
        }
    }
    out
}

/// Random codes with magnitudes up to about half the format's range, as a per-tensor scale
/// chosen from the data would give.
fn random_codes(format: Fp8Format, count: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let table = Table::new(format);
    let half_range = table.positive.last().unwrap().1 / 2.0;
    (0..count)
        .map(|_| table.round(rng.random_range(-1.0..1.0) * half_range))
        .collect()
}

fn run(case: &Case) {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    let rows_q: usize = case.lens_q.iter().sum();
    let rows_kv: usize = case.lens_kv.iter().sum();
    let q = random_codes(case.input, rows_q * case.heads_q * case.d_qk, &mut rng);
    let k = random_codes(case.input, rows_kv * case.heads_kv * case.d_qk, &mut rng);
    let v = random_codes(case.input, rows_kv * case.heads_kv * case.d_v, &mut rng);

    let alignment = match case.causal {
        Causal::TopLeft => DiagonalAlignment::TopLeft,
        Causal::BottomRight => DiagonalAlignment::BottomRight,
    };
    let problem = Fp8SdpaProblem {
        input: case.input,
        output: case.output,
        heads_q: case.heads_q,
        heads_kv: case.heads_kv,
        d_qk: case.d_qk,
        d_v: case.d_v,
        seq_lens_q: &case.lens_q,
        seq_lens_kv: &case.lens_kv,
        attn_scale: 1.0 / (case.d_qk as f32).sqrt(),
        mask: MaskBand::window(None, Some(0), alignment),
        scales: Fp8Scales {
            descale_q: case.descale[0],
            descale_k: case.descale[1],
            descale_v: case.descale[2],
            softmax: case
                .softmax
                .map(|(scale_s, descale_s)| SoftmaxQuantization { scale_s, descale_s }),
        },
    };
    let got = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap();
    let want = oracle(case, &q, &k, &v);

    assert_eq!(got.amax_s, want.amax_s as f32, "amax_s");
    assert_eq!(got.amax_o, want.amax_o as f32, "amax_o");
    let lse_want: Vec<f32> = want.lse.iter().map(|&x| x as f32).collect();
    assert_eq!(got.lse, lse_want, "lse");
    assert!(got.lse.contains(&f32::NEG_INFINITY) == want.lse.contains(&f64::NEG_INFINITY));
    match (&got.o, case.output) {
        (Fp8OutputData::Fp8(codes), Fp8Output::Fp8 { format, .. }) => {
            let table = Table::new(format);
            let want: Vec<u8> = want.o.iter().map(|&x| table.round(x)).collect();
            assert_eq!(codes, &want, "O codes");
        }
        (Fp8OutputData::F32(o), Fp8Output::F32) => {
            let want: Vec<f32> = want.o.iter().map(|&x| x as f32).collect();
            assert_eq!(o, &want, "O");
        }
        (Fp8OutputData::F16(o), Fp8Output::F16) => {
            let want: Vec<f16> = want.o.iter().map(|&x| f16::from_f64(x)).collect();
            assert_eq!(o, &want, "O");
        }
        (Fp8OutputData::BF16(o), Fp8Output::BF16) => {
            let want: Vec<bf16> = want.o.iter().map(|&x| bf16::from_f64(x)).collect();
            assert_eq!(o, &want, "O");
        }
        _ => panic!("O came back in another type than asked for"),
    }

    // The quantization of P must matter on these inputs, or the comparison proves little.
    if case.softmax.is_some() {
        let quantized = Case {
            output: Fp8Output::F32,
            ..clone_case(case)
        };
        let exact = Case {
            softmax: None,
            ..clone_case(&quantized)
        };
        assert_ne!(
            oracle(&exact, &q, &k, &v).o,
            oracle(&quantized, &q, &k, &v).o,
            "P's quantization changed nothing"
        );
    }
}

fn clone_case(case: &Case) -> Case {
    Case {
        lens_q: case.lens_q.clone(),
        lens_kv: case.lens_kv.clone(),
        ..*case
    }
}

#[test]
fn e4m3_quantized_p_e4m3_output_causal_gqa() {
    run(&Case {
        input: Fp8Format::E4M3,
        output: Fp8Output::Fp8 {
            format: Fp8Format::E4M3,
            scale_o: 200.0,
        },
        heads_q: 4,
        heads_kv: 2,
        d_qk: 16,
        d_v: 8,
        lens_q: vec![3, 0, 5, 2],
        lens_kv: vec![3, 4, 7, 6],
        causal: Causal::TopLeft,
        descale: [1.7 / 448.0, 1.3 / 448.0, 2.0 / 448.0],
        softmax: Some((448.0, 1.0 / 448.0)),
        seed: 1,
    });
}

#[test]
fn e5m2_quantized_p_e5m2_output_bottom_right_with_empty_rows() {
    run(&Case {
        input: Fp8Format::E5M2,
        output: Fp8Output::Fp8 {
            format: Fp8Format::E5M2,
            scale_o: 30000.0,
        },
        heads_q: 6,
        heads_kv: 2,
        d_qk: 16,
        d_v: 16,
        // Sequence 0 and 2 have more queries than keys: their top rows see no key.
        lens_q: vec![4, 2, 3],
        lens_kv: vec![2, 5, 0],
        causal: Causal::BottomRight,
        descale: [1.0 / 20000.0, 1.0 / 30000.0, 1.0 / 28672.0],
        softmax: Some((32768.0, 1.0 / 32768.0)),
        seed: 2,
    });
}

#[test]
fn e4m3_fnuz_exact_p_bf16_output_mqa() {
    // Upstream's FP8 form: Q, K, V descaled, P kept exact, a 16-bit O with no output scale.
    run(&Case {
        input: Fp8Format::E4M3Fnuz,
        output: Fp8Output::BF16,
        heads_q: 4,
        heads_kv: 1,
        d_qk: 32,
        d_v: 8,
        lens_q: vec![5, 1, 4],
        lens_kv: vec![5, 3, 9],
        causal: Causal::TopLeft,
        descale: [1.0 / 120.0, 1.0 / 100.0, 0.013],
        softmax: None,
        seed: 3,
    });
}

#[test]
fn e5m2_fnuz_quantized_p_f32_output_bottom_right() {
    run(&Case {
        input: Fp8Format::E5M2Fnuz,
        output: Fp8Output::F32,
        heads_q: 2,
        heads_kv: 2,
        d_qk: 8,
        d_v: 8,
        lens_q: vec![2, 6, 1],
        lens_kv: vec![7, 6, 4],
        causal: Causal::BottomRight,
        descale: [0.9 / 28672.0, 1.1 / 28672.0, 1.0 / 28672.0],
        softmax: Some((16384.0, 1.0 / 16384.0)),
        seed: 4,
    });
}

#[test]
fn e4m3_quantized_p_f16_output_p_scale_not_a_power_of_two() {
    run(&Case {
        input: Fp8Format::E4M3,
        output: Fp8Output::F16,
        heads_q: 3,
        heads_kv: 1,
        d_qk: 16,
        d_v: 4,
        lens_q: vec![6, 2],
        lens_kv: vec![6, 8],
        causal: Causal::TopLeft,
        descale: [1.0 / 224.0, 1.0 / 224.0, 1.0 / 224.0],
        softmax: Some((300.0, 1.0 / 300.0)),
        seed: 5,
    });
}
