//! The CPU reference reads one BSHD-packed ragged memory the same whichever upstream dims order
//! describes it (ragged-sdpa.md §1, revised 2026-12-01): `[B, S, H, D]` with sequence axis 1, or
//! cuDNN's `[B, H, S, D]` with sequence axis 2. Each case runs once per order over byte-identical
//! inputs and requires byte-identical outputs, and checks a few rows against a direct evaluation
//! so that two equally wrong readings cannot agree.

use std::sync::Arc;

use ragged_core::problem::{SEQ_AXIS_1, SEQ_AXIS_2, resolve_axes};
use ragged_core::tensor::packed_strides;
use ragged_core::{DenseTensor, MaskBand, RaggedTensor, Tensor, TensorMutExt};
use ragged_reference::{SdpaParams, sdpa_forward};

/// `[B, S, H, D]` dims and strides, and the same memory as `[B, H, S, D]`.
fn orders(bshd: [i64; 4]) -> [(Vec<i64>, Vec<i64>, usize); 2] {
    let [b, s, h, d] = bshd;
    let strides = packed_strides(&bshd);
    let a = (bshd.to_vec(), strides.clone(), 1);
    let swapped = (
        vec![b, h, s, d],
        vec![strides[0], strides[2], strides[1], strides[3]],
        2,
    );
    [a, swapped]
}

fn aux(values: &[i32]) -> Arc<dyn Tensor> {
    let n = values.len() as i64;
    Arc::new(DenseTensor::from_vec(values.to_vec(), vec![n, 1, 1, 1], vec![1, 1, 1, 1]).unwrap())
}

struct Case {
    bshd_q: [i64; 4],
    bshd_kv: [i64; 4],
    /// Token counts per batch (cumulative), Q/O then K/V.
    tokens_q: Vec<i32>,
    tokens_kv: Vec<i32>,
    /// Offsets in tokens (multiplier H·D) instead of elements.
    token_units: bool,
    band: MaskBand,
}

/// O's buffer and the dense LSE buffer of one run in the order `form` (0 or 1).
fn run(case: &Case, form: usize) -> (Vec<f32>, Vec<f32>) {
    let offsets = |tokens: &[i32], bshd: [i64; 4]| {
        let row = (bshd[2] * bshd[3]) as i32;
        if case.token_units {
            (aux(tokens), i64::from(row))
        } else {
            (aux(&tokens.iter().map(|t| t * row).collect::<Vec<_>>()), 1)
        }
    };
    let (aux_q, m_q) = offsets(&case.tokens_q, case.bshd_q);
    let (aux_kv, m_kv) = offsets(&case.tokens_kv, case.bshd_kv);
    let make = |bshd: [i64; 4], aux: &Arc<dyn Tensor>, m: i64, seed: Option<u64>| {
        let (dims, strides, axis) = orders(bshd)[form].clone();
        let dims4: [i64; 4] = dims.clone().try_into().unwrap();
        let strides4: [i64; 4] = strides.clone().try_into().unwrap();
        assert_eq!(
            resolve_axes(&dims4, &strides4, true),
            if form == 0 { SEQ_AXIS_1 } else { SEQ_AXIS_2 }
        );
        let mut t =
            RaggedTensor::<f32>::new(dims, strides, axis, Arc::clone(aux), m, None).unwrap();
        match seed {
            Some(seed) => t.fill_random(seed),
            None => t.fill_sentinel(),
        }
        t
    };
    let q = make(case.bshd_q, &aux_q, m_q, Some(1));
    let k = make(case.bshd_kv, &aux_kv, m_kv, Some(2));
    let v = make(case.bshd_kv, &aux_kv, m_kv, Some(3));
    let mut o = make(case.bshd_q, &aux_q, m_q, None);
    let [b, s, h, _] = case.bshd_q;
    let mut lse = DenseTensor::<f32>::new(vec![b, h, s, 1], packed_strides(&[b, h, s, 1])).unwrap();
    lse.fill_sentinel();
    let params = SdpaParams {
        scale: 0.3,
        band: case.band,
    };
    sdpa_forward(&q, &k, &v, &mut o, Some(&mut lse), None, None, &params).unwrap();
    (o.as_slice().to_vec(), lse.as_slice().to_vec())
}

/// O at token `i` of batch `b`, head `h`, straight from the formula (no mask).
fn direct(case: &Case, b: usize, i: usize, h: usize) -> Vec<f64> {
    let [_, _, h_q, d] = case.bshd_q.map(|x| x as usize);
    let h_kv = case.bshd_kv[2] as usize;
    let g = h / (h_q / h_kv);
    let fill = |bshd: [i64; 4], aux: &[i32], seed| {
        let row = (bshd[2] * bshd[3]) as i32;
        let offs: Vec<i32> = aux.iter().map(|t| t * row).collect();
        let strides = packed_strides(&bshd);
        let mut t =
            RaggedTensor::<f32>::new(bshd.to_vec(), strides, 1, self::aux(&offs), 1, None).unwrap();
        t.fill_random(seed);
        t.as_slice().to_vec()
    };
    let (q, k, v) = (
        fill(case.bshd_q, &case.tokens_q, 1),
        fill(case.bshd_kv, &case.tokens_kv, 2),
        fill(case.bshd_kv, &case.tokens_kv, 3),
    );
    let q0 = case.tokens_q[b] as usize;
    let (k0, k1) = (case.tokens_kv[b] as usize, case.tokens_kv[b + 1] as usize);
    let qrow = &q[((q0 + i) * h_q + h) * d..][..d];
    let scores: Vec<f64> = (k0..k1)
        .map(|j| {
            let krow = &k[(j * h_kv + g) * d..][..d];
            0.3 * qrow
                .iter()
                .zip(krow)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum::<f64>()
        })
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let total: f64 = w.iter().sum();
    (0..d)
        .map(|e| {
            (k0..k1)
                .zip(&w)
                .map(|(j, p)| p * f64::from(v[(j * h_kv + g) * d + e]))
                .sum::<f64>()
                / total
        })
        .collect()
}

fn check(case: &Case) {
    let (o_a, lse_a) = run(case, 0);
    let (o_b, lse_b) = run(case, 1);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&o_a), bits(&o_b), "O differs between the dims orders");
    assert_eq!(
        bits(&lse_a),
        bits(&lse_b),
        "LSE differs between the dims orders"
    );
    if case.band == MaskBand::none() {
        let [_, _, h_q, d] = case.bshd_q.map(|x| x as usize);
        let q0 = case.tokens_q[1] as usize;
        let want = direct(case, 1, 0, h_q - 1);
        let got = &o_a[((q0) * h_q + h_q - 1) * d..][..d];
        for (g, w) in got.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() < 1e-5, "O {g} vs {w}");
        }
    }
}

#[test]
fn gqa_with_unequal_query_and_key_lengths_reads_alike_in_both_orders() {
    // S_q = 5 and H_q = 4 against S_kv = 6 and H_kv = 2: a positional reading of the
    // [B, H, S, D] order would see 5 heads against 6.
    for token_units in [false, true] {
        check(&Case {
            bshd_q: [3, 5, 4, 8],
            bshd_kv: [3, 6, 2, 8],
            tokens_q: vec![0, 2, 7, 10],
            tokens_kv: vec![0, 6, 9, 13],
            token_units,
            band: MaskBand::none(),
        });
    }
}

#[test]
fn causal_and_one_head_read_alike_in_both_orders() {
    check(&Case {
        bshd_q: [2, 4, 1, 16],
        bshd_kv: [2, 4, 1, 16],
        tokens_q: vec![0, 3, 7],
        tokens_kv: vec![0, 4, 5],
        token_units: true,
        band: MaskBand::causal_bottom_right(),
    });
}
