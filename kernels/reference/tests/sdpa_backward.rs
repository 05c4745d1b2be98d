//! The CPU reference backward against (1) an independent f64 oracle (`backward_support/`: plain
//! loops written from the formulas of `kernels/reference/src/sdpa_backward/README.md`) on random ragged,
//! dense, GQA, masked and padded problems in all three element types, and (2) central finite
//! differences of the forward reference (`sdpa_forward`), which checks the formulas themselves.
//!
//! Inputs hold NaN in every padding row, so reading one poisons the result; outputs start as the
//! sentinel, so every position the backward must not write is checked bit for bit.

mod backward_support;

use backward_support::{
    Case, Kind, Spec, check, oracle_backward, oracle_forward, place, random_values, seq_len_tensor,
};
use half::{bf16, f16};
use ragged_core::{
    BackwardFeature, DiagonalAlignment, Element, FloatElement, KernelError, MaskBand, Tensor,
    TensorMut,
};
use ragged_reference::{
    BackwardInputs, BackwardOutputs, SdpaBackwardParams, SdpaParams, sdpa_backward, sdpa_forward,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn run_case<T: FloatElement>(c: &Case, rng: &mut ChaCha8Rng, tol: f64) {
    let (sq, sk, sv) = (
        c.spec_q(c.heads_q, c.dim_qk),
        c.spec_kv(c.dim_qk),
        c.spec_kv(c.dim_v),
    );
    let so = c.spec_q(c.heads_q, c.dim_v);
    let sl = c.lse_spec();
    let mut q = random_values(rng, &c.len_q, c.heads_q, c.dim_qk);
    let mut k = random_values(rng, &c.len_kv, c.heads_kv, c.dim_qk);
    let mut v = random_values(rng, &c.len_kv, c.heads_kv, c.dim_v);
    let mut d_o = random_values(rng, &c.len_q, c.heads_q, c.dim_v);
    let (qt, kt, vt) = (
        sq.tensor(place::<T>(&sq, &mut q)),
        sk.tensor(place::<T>(&sk, &mut k)),
        sv.tensor(place::<T>(&sv, &mut v)),
    );
    let (mut o, mut lse) = oracle_forward(c, &q, &k, &v);
    let ot = so.tensor(place::<T>(&so, &mut o));
    let dot_t = so.tensor(place::<T>(&so, &mut d_o));
    let lt = sl.tensor(place::<f32>(&sl, &mut lse));
    let (slq, slk) = (seq_len_tensor(&c.len_q), seq_len_tensor(&c.len_kv));
    let inputs = BackwardInputs {
        q: &*qt,
        k: &*kt,
        v: &*vt,
        o: &*ot,
        d_o: &*dot_t,
        lse: &*lt,
        seq_len_q: c.seq_lens.then_some(&slq as &dyn Tensor),
        seq_len_kv: c.seq_lens.then_some(&slk as &dyn Tensor),
    };
    let (eq, ek, ev) = oracle_backward(c, [&q, &k, &v, &o, &d_o, &lse]);
    // On the pool and on the calling thread: with one thread, every (batch, KV head) is one
    // work item more often, and such items write their rows into the outputs themselves.
    for serial in [false, true] {
        let mut dq = sq.tensor(vec![T::sentinel(); sq.len()]);
        let mut dk = sk.tensor(vec![T::sentinel(); sk.len()]);
        let mut dv = sv.tensor(vec![T::sentinel(); sv.len()]);
        let outputs = BackwardOutputs {
            dq: &mut *dq,
            dk: &mut *dk,
            dv: &mut *dv,
        };
        let call = || sdpa_backward(&inputs, outputs, &params_of(c));
        let result = if serial {
            ragged_reference::parallel::on_calling_thread(call)
        } else {
            call()
        };
        result.unwrap_or_else(|e| panic!("{c:?}: {e}"));
        check::<T>("dQ", &*dq, &sq, &c.len_q, &eq, tol);
        check::<T>("dK", &*dk, &sk, &c.len_kv, &ek, tol);
        check::<T>("dV", &*dv, &sv, &c.len_kv, &ev, tol);
    }
}

#[test]
fn random_problems_match_the_f64_oracle_in_every_element_type() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x005D_BAC4);
    for n in 0..60 {
        let c = Case::random(&mut rng);
        match n % 3 {
            0 => run_case::<f32>(&c, &mut rng, 2e-5),
            1 => run_case::<f16>(&c, &mut rng, 4e-3),
            _ => run_case::<bf16>(&c, &mut rng, 3e-2),
        }
    }
}

fn fixed_case(len_q: Vec<usize>, len_kv: Vec<usize>, band: MaskBand) -> Case {
    let s_q = len_q.iter().copied().max().unwrap_or(0).max(1);
    let s_kv = len_kv.iter().copied().max().unwrap_or(0).max(1);
    Case {
        heads_q: 4,
        heads_kv: 2,
        dim_qk: 4,
        dim_v: 3,
        q_kind: Kind::RaggedBshd,
        kv_kind: Kind::RaggedBhsd,
        ext_q: len_q.clone(),
        ext_kv: len_kv.clone(),
        s_q,
        s_kv,
        len_q,
        len_kv,
        seq_lens: false,
        band,
        scale: 0.5,
    }
}

#[test]
fn zero_lengths_and_fully_masked_rows_give_exact_zeros() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Batch 0: no keys (dQ = 0); batch 1: no queries (dK = dV = 0); batch 2: bottom-right
    // causal with more queries than keys, so its first two rows admit nothing.
    let c = fixed_case(
        vec![3, 0, 4],
        vec![0, 5, 2],
        MaskBand::causal_bottom_right(),
    );
    let (sq, sk, sv) = (c.spec_q(4, 4), c.spec_kv(4), c.spec_kv(3));
    let (so, sl) = (c.spec_q(4, 3), c.lse_spec());
    let mut q = random_values(&mut rng, &c.len_q, 4, 4);
    let mut k = random_values(&mut rng, &c.len_kv, 2, 4);
    let mut v = random_values(&mut rng, &c.len_kv, 2, 3);
    let mut d_o = random_values(&mut rng, &c.len_q, 4, 3);
    let (qt, kt, vt) = (
        sq.tensor(place::<f32>(&sq, &mut q)),
        sk.tensor(place::<f32>(&sk, &mut k)),
        sv.tensor(place::<f32>(&sv, &mut v)),
    );
    let (mut o, mut lse) = oracle_forward(&c, &q, &k, &v);
    let (ot, dot_t, lt) = (
        so.tensor(place::<f32>(&so, &mut o)),
        so.tensor(place::<f32>(&so, &mut d_o)),
        sl.tensor(place::<f32>(&sl, &mut lse)),
    );
    let mut dq = sq.tensor(vec![f32::sentinel(); sq.len()]);
    let mut dk = sk.tensor(vec![f32::sentinel(); sk.len()]);
    let mut dv = sv.tensor(vec![f32::sentinel(); sv.len()]);
    backward(
        [&*qt, &*kt, &*vt, &*ot, &*dot_t, &*lt],
        [&mut *dq, &mut *dk, &mut *dv],
        &params_of(&c),
    )
    .unwrap();
    let dq_data = f32::slice(dq.host_data()).unwrap();
    for h in 0..4 {
        for s in 0..3 {
            for d in 0..4 {
                assert_eq!(dq_data[sq.pos(0, s, h, d)].to_bits(), 0, "batch 0 dQ");
            }
        }
        for s in 0..2 {
            for d in 0..4 {
                assert_eq!(dq_data[sq.pos(2, s, h, d)].to_bits(), 0, "masked row {s}");
            }
        }
    }
    for (t, spec, width) in [(&dk, &sk, 4), (&dv, &sv, 3)] {
        let data = f32::slice(t.host_data()).unwrap();
        for g in 0..2 {
            for j in 0..5 {
                for d in 0..width {
                    assert_eq!(data[spec.pos(1, j, g, d)].to_bits(), 0, "batch 1 dK/dV");
                }
            }
        }
    }
    // Everything else against the oracle, and nothing outside the logical rows written.
    let (eq, ek, ev) = oracle_backward(&c, [&q, &k, &v, &o, &d_o, &lse]);
    check::<f32>("dQ", &*dq, &sq, &c.len_q, &eq, 2e-5);
    check::<f32>("dK", &*dk, &sk, &c.len_kv, &ek, 2e-5);
    check::<f32>("dV", &*dv, &sv, &c.len_kv, &ev, 2e-5);
}

/// `Σ W ∘ O` for the forward reference run on the given (f32, ragged BSHD) Q, K, V.
fn loss(c: &Case, tensors: [&dyn Tensor; 3], weights: &[f32], so: &Spec) -> f64 {
    let mut o = so.tensor(vec![0f32; so.len()]);
    let params = SdpaParams {
        scale: c.scale,
        band: c.band,
    };
    sdpa_forward(
        tensors[0], tensors[1], tensors[2], &mut *o, None, None, None, &params,
    )
    .unwrap();
    let data = f32::slice(o.host_data()).unwrap();
    data.iter()
        .zip(weights)
        .map(|(&x, &w)| f64::from(x) * f64::from(w))
        .sum()
}

#[test]
fn gradients_match_finite_differences_of_the_forward() {
    for band in [
        MaskBand::none(),
        MaskBand::causal_top_left(),
        MaskBand::window(Some(1), Some(1), DiagonalAlignment::BottomRight),
    ] {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let c = Case {
            kv_kind: Kind::RaggedBshd,
            ..fixed_case(vec![3, 4], vec![4, 2], band)
        };
        let (sq, sk, sv, so) = (c.spec_q(4, 4), c.spec_kv(4), c.spec_kv(3), c.spec_q(4, 3));
        let random = |rng: &mut ChaCha8Rng, n: usize| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
        };
        let buffers = [
            random(&mut rng, sq.len()),
            random(&mut rng, sk.len()),
            random(&mut rng, sv.len()),
        ];
        let specs = [&sq, &sk, &sv];
        let weights = random(&mut rng, so.len());
        let tensors: Vec<Box<dyn TensorMut>> = buffers
            .iter()
            .zip(specs)
            .map(|(data, spec)| spec.tensor(data.clone()))
            .collect();

        // Forward for O and LSE, then the backward with dO = W.
        let mut o = so.tensor(vec![0f32; so.len()]);
        let sl = c.lse_spec();
        let mut lse = sl.tensor(vec![0f32; sl.len()]);
        sdpa_forward(
            &*tensors[0],
            &*tensors[1],
            &*tensors[2],
            &mut *o,
            Some(&mut *lse),
            None,
            None,
            &SdpaParams {
                scale: c.scale,
                band: c.band,
            },
        )
        .unwrap();
        let w = so.tensor(weights.clone());
        let mut grads: Vec<Box<dyn TensorMut>> = specs
            .iter()
            .map(|spec| spec.tensor(vec![f32::NAN; spec.len()]))
            .collect();
        let [dq, dk, dv] = &mut grads[..] else {
            unreachable!()
        };
        backward(
            [&*tensors[0], &*tensors[1], &*tensors[2], &*o, &*w, &*lse],
            [&mut **dq, &mut **dk, &mut **dv],
            &params_of(&c),
        )
        .unwrap();

        let eps = 1e-2f32;
        for which in 0..3 {
            let analytic = f32::slice(grads[which].host_data()).unwrap().to_vec();
            for at in 0..buffers[which].len() {
                let shifted = |delta: f32| {
                    let mut data = buffers[which].clone();
                    data[at] += delta;
                    let moved = specs[which].tensor(data);
                    let mut three: [&dyn Tensor; 3] = [&*tensors[0], &*tensors[1], &*tensors[2]];
                    three[which] = &*moved;
                    loss(&c, three, &weights, &so)
                };
                let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * f64::from(eps));
                let got = f64::from(analytic[at]);
                assert!(
                    (got - numeric).abs() <= 2e-3,
                    "{band:?}: operand {which} element {at}: backward {got}, finite difference {numeric}"
                );
            }
        }
    }
}

fn tiny_operands() -> (Case, Vec<Box<dyn TensorMut>>) {
    let c = fixed_case(vec![2], vec![2], MaskBand::none());
    let specs = [
        c.spec_q(4, 4),
        c.spec_kv(4),
        c.spec_kv(3),
        c.spec_q(4, 3),
        c.spec_q(4, 3),
        c.lse_spec(),
        c.spec_q(4, 4),
        c.spec_kv(4),
        c.spec_kv(3),
    ];
    let tensors = specs
        .iter()
        .map(|s| s.tensor(vec![f32::sentinel(); s.len()]))
        .collect();
    (c, tensors)
}

fn call(t: &mut [Box<dyn TensorMut>], params: &SdpaBackwardParams) -> Result<(), KernelError> {
    let (i, outputs) = t.split_at_mut(6);
    let [dq, dk, dv] = outputs else {
        unreachable!()
    };
    backward(
        [&*i[0], &*i[1], &*i[2], &*i[3], &*i[4], &*i[5]],
        [&mut **dq, &mut **dk, &mut **dv],
        params,
    )
}

/// The backward without seq_len tensors: Q, K, V, O, dO and LSE in, dQ, dK and dV out.
fn backward(
    [q, k, v, o, d_o, lse]: [&dyn Tensor; 6],
    [dq, dk, dv]: [&mut dyn TensorMut; 3],
    params: &SdpaBackwardParams,
) -> Result<(), KernelError> {
    let inputs = BackwardInputs {
        q,
        k,
        v,
        o,
        d_o,
        lse,
        seq_len_q: None,
        seq_len_kv: None,
    };
    sdpa_backward(&inputs, BackwardOutputs { dq, dk, dv }, params)
}

/// The case's scale and band, every optional feature off.
fn params_of(c: &Case) -> SdpaBackwardParams {
    SdpaBackwardParams {
        scale: c.scale,
        band: c.band,
        ..SdpaBackwardParams::default()
    }
}

fn untouched(t: &[Box<dyn TensorMut>]) -> bool {
    t[6..].iter().all(|g| {
        f32::slice(g.host_data())
            .unwrap()
            .iter()
            .all(|x| x.to_bits() == f32::sentinel().to_bits())
    })
}

#[test]
fn unsupported_features_are_declined_with_typed_errors_and_write_nothing() {
    let (_, mut t) = tiny_operands();
    let base = SdpaBackwardParams::default();
    for (params, feature) in [
        (
            SdpaBackwardParams {
                dropout_probability: Some(0.2),
                ..base
            },
            BackwardFeature::Dropout { probability: 0.2 },
        ),
        (
            SdpaBackwardParams {
                attn_bias: true,
                ..base
            },
            BackwardFeature::AttnBias,
        ),
        (
            SdpaBackwardParams {
                alibi: true,
                ..base
            },
            BackwardFeature::Alibi,
        ),
        (
            SdpaBackwardParams {
                dbias: true,
                ..base
            },
            BackwardFeature::DBias,
        ),
        (
            SdpaBackwardParams { fp8: true, ..base },
            BackwardFeature::Fp8,
        ),
    ] {
        let err = call(&mut t, &params).unwrap_err();
        assert_eq!(err, KernelError::BackwardUnsupported { feature });
        assert!(err.to_string().contains("not supported"), "{err}");
        assert!(untouched(&t));
    }
}

#[test]
fn a_gradient_of_the_wrong_shape_is_an_error_and_nothing_is_written() {
    let (c, mut t) = tiny_operands();
    // dK with D = 3 instead of D_qk = 4.
    let wrong = c.spec_kv(3);
    t[7] = wrong.tensor(vec![f32::sentinel(); wrong.len()]);
    let err = call(&mut t, &SdpaBackwardParams::default()).unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::SdpaDim {
                field: "head_dim",
                value: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("dK: head_dim = 3"), "{err}");
    assert!(untouched(&t));
}

/// Q/K 192 with V/O 128 (issue 14 item 1) over several tiles and key chunks, causal, GQA.
#[test]
fn distinct_qk_and_v_head_dims_match_the_f64_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(192);
    let mut c = fixed_case(vec![140, 9], vec![260, 30], MaskBand::causal_bottom_right());
    c.dim_qk = 192;
    c.dim_v = 128;
    c.scale = 1.0 / 192f32.sqrt();
    run_case::<f32>(&c, &mut rng, 2e-5);
    c.band = MaskBand::none();
    run_case::<bf16>(&c, &mut rng, 3e-2);
}

/// The head dims the GPU engines serve, in bf16 (on AMX tiles where the CPU has them: 32-row
/// and 32-key blocks with partial last blocks, several key chunks, GQA), every mask kind.
#[test]
fn bf16_head_dims_64_and_128_match_the_f64_oracle_under_every_mask() {
    let mut rng = ChaCha8Rng::seed_from_u64(128);
    for (dim, band) in [
        (64, MaskBand::none()),
        (64, MaskBand::causal_top_left()),
        (128, MaskBand::causal_bottom_right()),
        (
            128,
            MaskBand::window(Some(40), Some(7), DiagonalAlignment::TopLeft),
        ),
    ] {
        let mut c = fixed_case(vec![301, 17, 64], vec![283, 70, 1], band);
        c.dim_qk = dim;
        c.dim_v = dim;
        c.scale = 1.0 / (dim as f32).sqrt();
        run_case::<bf16>(&c, &mut rng, 3e-2);
    }
}
