//! The CPU graph executor against an independent float64 oracle written here (plain loops over
//! packed buffers, no code of the crate): SDPA feeding pointwise nodes through virtual ragged
//! intermediates, a pointwise-only ragged graph, dense broadcasting, and the rejections.

use ragged_core::{DataType, HostData, HostDataMut};
use ragged_reference::SdpaParams;
use ragged_reference::executor::{
    ExecGraph, ExecNode, ExecutorError, NodeOp, PointwiseNode, PointwiseOp, SdpaNode, TensorDesc,
    VariantPack, create_tensor_from_attribute_in, execute,
};

/// Deterministic values in [-1, 1) from a 64-bit LCG.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// Element offsets of packed BSHD rows: lengths in tokens × `row` elements per token.
fn offsets(lengths: &[i64], row: i64) -> Vec<i32> {
    let mut out = vec![0i32];
    for &l in lengths {
        out.push(out[out.len() - 1] + (l * row) as i32);
    }
    out
}

const B: usize = 3;
const HQ: usize = 2;
const HKV: usize = 1;
const D: usize = 8;
const LQ: [i64; B] = [3, 0, 5];
const LKV: [i64; B] = [4, 2, 6];
const SQ_MAX: i64 = 5;
const SKV_MAX: i64 = 6;

// uids
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const R: i64 = 5;
const Y: i64 = 6;
const SCALAR: i64 = 7;
const S: i64 = 8;
const AUX_Q: i64 = 10;
const AUX_KV: i64 = 11;

fn ragged(uid: i64, s_max: i64, heads: usize, aux: i64) -> TensorDesc {
    let h = heads as i64;
    let d = D as i64;
    TensorDesc::dense(uid, DataType::F32, vec![B as i64, s_max, h, d])
        .with_strides(vec![s_max * h * d, h * d, d, 1])
        .ragged_on(aux)
}

fn aux(uid: i64) -> TensorDesc {
    TensorDesc::dense(uid, DataType::I32, vec![B as i64 + 1, 1, 1, 1])
}

struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    r: Vec<f32>,
    off_q: Vec<i32>,
    off_kv: Vec<i32>,
}

fn inputs() -> Inputs {
    let off_q = offsets(&LQ, (HQ * D) as i64);
    let off_kv = offsets(&LKV, (HKV * D) as i64);
    let nq = off_q[B] as usize;
    let nkv = off_kv[B] as usize;
    Inputs {
        q: values(1, nq),
        k: values(2, nkv),
        v: values(3, nkv),
        r: values(4, nq),
        off_q,
        off_kv,
    }
}

/// Float64 SDPA over packed BSHD buffers (no mask): O[token, h, d] for every valid token.
fn oracle_sdpa(x: &Inputs, scale: f64) -> Vec<f64> {
    let mut o = vec![0.0f64; x.q.len()];
    let group = HQ / HKV;
    for b in 0..B {
        let q0 = x.off_q[b] as usize / (HQ * D);
        let k0 = x.off_kv[b] as usize / (HKV * D);
        for i in 0..LQ[b] as usize {
            for h in 0..HQ {
                let g = h / group;
                let qrow = &x.q[((q0 + i) * HQ + h) * D..][..D];
                let scores: Vec<f64> = (0..LKV[b] as usize)
                    .map(|j| {
                        let krow = &x.k[((k0 + j) * HKV + g) * D..][..D];
                        scale
                            * qrow
                                .iter()
                                .zip(krow)
                                .map(|(&a, &c)| f64::from(a) * f64::from(c))
                                .sum::<f64>()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for dd in 0..D {
                    let mut acc = 0.0;
                    for (j, w) in weights.iter().enumerate() {
                        acc += w * f64::from(x.v[((k0 + j) * HKV + g) * D + dd]);
                    }
                    o[((q0 + i) * HQ + h) * D + dd] = if total > 0.0 { acc / total } else { 0.0 };
                }
            }
        }
    }
    o
}

fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol,
            "element {i}: got {g}, want {w}"
        );
    }
}

fn sdpa_node(o: i64, scale: f32) -> ExecNode {
    ExecNode {
        name: "sdpa".into(),
        op: NodeOp::Sdpa(SdpaNode {
            q: Q,
            k: K,
            v: V,
            o,
            stats: None,
            seq_len_q: None,
            seq_len_kv: None,
            params: SdpaParams {
                scale,
                ..SdpaParams::default()
            },
        }),
    }
}

fn pointwise(name: &str, op: PointwiseOp, in_0: i64, in_1: Option<i64>, out_0: i64) -> ExecNode {
    ExecNode {
        name: name.into(),
        op: NodeOp::Pointwise(PointwiseNode {
            op,
            in_0,
            in_1,
            out_0,
        }),
    }
}

fn sdpa_tensors() -> Vec<TensorDesc> {
    vec![
        aux(AUX_Q),
        aux(AUX_KV),
        ragged(Q, SQ_MAX, HQ, AUX_Q),
        ragged(K, SKV_MAX, HKV, AUX_KV),
        ragged(V, SKV_MAX, HKV, AUX_KV),
        ragged(O, SQ_MAX, HQ, AUX_Q).virtual_(),
        ragged(R, SQ_MAX, HQ, AUX_Q),
        ragged(Y, SQ_MAX, HQ, AUX_Q),
    ]
}

fn bind<'a>(x: &'a Inputs) -> VariantPack<'a> {
    VariantPack::new()
        .bind_input(AUX_Q, HostData::I32(&x.off_q))
        .bind_input(AUX_KV, HostData::I32(&x.off_kv))
        .bind_input(Q, HostData::F32(&x.q))
        .bind_input(K, HostData::F32(&x.k))
        .bind_input(V, HostData::F32(&x.v))
        .bind_input(R, HostData::F32(&x.r))
}

#[test]
fn sdpa_then_ragged_residual_add_matches_the_oracle() {
    let x = inputs();
    let graph = ExecGraph {
        tensors: sdpa_tensors(),
        nodes: vec![
            sdpa_node(O, 0.35),
            pointwise("residual", PointwiseOp::Add, O, Some(R), Y),
        ],
    };
    let mut y = vec![f32::NAN; x.q.len()];
    let report = execute(&graph, bind(&x).bind_output(Y, HostDataMut::F32(&mut y)))
        .unwrap_or_else(|e| panic!("{e}"));
    let o = oracle_sdpa(&x, 0.35);
    let want: Vec<f64> = o.iter().zip(&x.r).map(|(a, &r)| a + f64::from(r)).collect();
    assert_close(&y, &want, 1e-5);
    assert_eq!(report.allocated, vec![O]);
    assert_eq!(report.freed, vec![(1, O)]);
}

#[test]
fn sdpa_then_scale_then_add_matches_the_oracle() {
    let x = inputs();
    let mut tensors = sdpa_tensors();
    tensors.push(TensorDesc::dense(SCALAR, DataType::F32, vec![1]));
    tensors.push(ragged(S, SQ_MAX, HQ, AUX_Q).virtual_());
    let graph = ExecGraph {
        tensors,
        nodes: vec![
            sdpa_node(O, 0.5),
            pointwise("scale", PointwiseOp::Mul, O, Some(SCALAR), S),
            pointwise("residual", PointwiseOp::Add, S, Some(R), Y),
        ],
    };
    let scalar = [-1.75f32];
    let mut y = vec![f32::NAN; x.q.len()];
    let pack = bind(&x)
        .bind_input(SCALAR, HostData::F32(&scalar))
        .bind_output(Y, HostDataMut::F32(&mut y));
    let report = execute(&graph, pack).unwrap_or_else(|e| panic!("{e}"));
    let o = oracle_sdpa(&x, 0.5);
    let want: Vec<f64> = o
        .iter()
        .zip(&x.r)
        .map(|(a, &r)| a * -1.75 + f64::from(r))
        .collect();
    assert_close(&y, &want, 1e-5);
    assert_eq!(report.allocated, vec![O, S]);
    // Each intermediate goes as soon as its only reader has run.
    assert_eq!(report.freed, vec![(1, O), (2, S)]);
}

#[test]
fn pointwise_only_ragged_graph_in_bhsd_form_matches_the_oracle() {
    // [B, H, S, D] dims over BSHD memory: the sequence axis is the largest-stride one, 2.
    let h = HQ as i64;
    let d = D as i64;
    let bhsd = |uid: i64| {
        TensorDesc::dense(uid, DataType::F32, vec![B as i64, h, SQ_MAX, d])
            .with_strides(vec![SQ_MAX * h * d, d, h * d, 1])
            .ragged_on(AUX_Q)
    };
    let bias = TensorDesc::dense(20, DataType::F32, vec![1, h, 1, d]);
    let half = TensorDesc::dense(21, DataType::F32, vec![1]).with_value(0.5);
    let graph = ExecGraph {
        tensors: vec![
            aux(AUX_Q),
            bhsd(Q),
            bhsd(R),
            bhsd(30).virtual_(),
            bhsd(31).virtual_(),
            bhsd(32).virtual_(),
            bhsd(Y),
            bias,
            half,
        ],
        nodes: vec![
            pointwise(
                "relu",
                PointwiseOp::Relu {
                    lower: 0.0,
                    upper: None,
                    slope: 0.0,
                },
                Q,
                None,
                30,
            ),
            pointwise("bias", PointwiseOp::Sub, 30, Some(20), 31),
            pointwise("halve", PointwiseOp::Mul, 31, Some(21), 32),
            pointwise("max", PointwiseOp::Max, 32, Some(R), Y),
        ],
    };
    let x = inputs();
    let bias_values = values(9, HQ * D);
    let mut y = vec![f32::NAN; x.q.len()];
    let pack = VariantPack::new()
        .bind_input(AUX_Q, HostData::I32(&x.off_q))
        .bind_input(Q, HostData::F32(&x.q))
        .bind_input(R, HostData::F32(&x.r))
        .bind_input(20, HostData::F32(&bias_values))
        .bind_output(Y, HostDataMut::F32(&mut y));
    let report = execute(&graph, pack).unwrap_or_else(|e| panic!("{e}"));
    // Oracle over the packed buffer: element e belongs to head (e / D) % H, dim e % D.
    let want: Vec<f64> = (0..x.q.len())
        .map(|e| {
            let (hh, dd) = ((e / D) % HQ, e % D);
            let t = f64::from(x.q[e]).max(0.0) - f64::from(bias_values[hh * D + dd]);
            (t * 0.5).max(f64::from(x.r[e]))
        })
        .collect();
    assert_close(&y, &want, 1e-6);
    assert_eq!(report.freed, vec![(1, 30), (2, 31), (3, 32)]);
}

#[test]
fn dense_pointwise_broadcasts_size_one_axes() {
    let a = values(5, 24);
    let b = values(6, 3);
    let graph = ExecGraph {
        tensors: vec![
            TensorDesc::dense(1, DataType::F32, vec![2, 3, 4]),
            TensorDesc::dense(2, DataType::F32, vec![1, 3, 1]),
            TensorDesc::dense(3, DataType::F32, vec![2, 3, 4]),
        ],
        nodes: vec![pointwise("div", PointwiseOp::Div, 1, Some(2), 3)],
    };
    let mut out = vec![0.0f32; 24];
    let pack = VariantPack::new()
        .bind_input(1, HostData::F32(&a))
        .bind_input(2, HostData::F32(&b))
        .bind_output(3, HostDataMut::F32(&mut out));
    execute(&graph, pack).unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<f64> = (0..24)
        .map(|e| f64::from(a[e]) / f64::from(b[(e / 4) % 3]))
        .collect();
    assert_close(&out, &want, 1e-5);
}

#[test]
fn a_virtual_ragged_tensor_is_sized_from_its_real_aux() {
    let x = inputs();
    let tensors = sdpa_tensors();
    let map = tensors.iter().map(|t| (t.uid, t)).collect();
    let pack = bind(&x);
    let o =
        create_tensor_from_attribute_in(&tensors[5], &pack, &map).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.element_count(), x.off_q[B] as usize);
    assert_eq!(o.host_data().len(), x.off_q[B] as usize);
    // A dense attribute falls through to the single-dispatch overload.
    let dense = TensorDesc::dense(40, DataType::BF16, vec![2, 5]);
    let t = create_tensor_from_attribute_in(&dense, &pack, &map).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((t.element_count(), t.data_type()), (10, DataType::BF16));
}

#[test]
fn a_virtual_aux_is_rejected_naming_the_uid() {
    let x = inputs();
    let mut tensors = sdpa_tensors();
    tensors.push(aux(12).virtual_());
    tensors[5] = ragged(O, SQ_MAX, HQ, 12).virtual_();
    let graph = ExecGraph {
        tensors,
        nodes: vec![
            sdpa_node(O, 1.0),
            pointwise("add", PointwiseOp::Add, O, Some(R), Y),
        ],
    };
    let mut y = vec![0.0f32; x.q.len()];
    let err = execute(&graph, bind(&x).bind_output(Y, HostDataMut::F32(&mut y)))
        .err()
        .unwrap_or_else(|| panic!("accepted a virtual aux"));
    assert!(
        matches!(
            err,
            ExecutorError::AuxUnavailable {
                uid: O,
                aux_uid: 12,
                problem: "virtual"
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tensor uid 4"), "{err}");
    assert!(y.iter().all(|&v| v == 0.0), "an output was written");
}

#[test]
fn reading_an_intermediate_before_its_writer_is_rejected() {
    let x = inputs();
    let graph = ExecGraph {
        tensors: sdpa_tensors(),
        nodes: vec![
            pointwise("add", PointwiseOp::Add, O, Some(R), Y),
            sdpa_node(O, 1.0),
        ],
    };
    let mut y = vec![0.0f32; x.q.len()];
    let err = execute(&graph, bind(&x).bind_output(Y, HostDataMut::F32(&mut y)))
        .err()
        .unwrap_or_else(|| panic!("accepted an out-of-order graph"));
    assert!(
        matches!(
            err,
            ExecutorError::NotYetWritten {
                uid: O,
                node_index: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tensor uid 4"), "{err}");
}

#[test]
fn modes_outside_the_ragged_set_are_declined_by_name() {
    for (name, op) in [
        ("ADD", PointwiseOp::Add),
        ("MAX_OP", PointwiseOp::Max),
        ("IDENTITY", PointwiseOp::Identity),
    ] {
        assert_eq!(PointwiseOp::from_mode_name(name), Ok(op));
    }
    for name in ["TANH_FWD", "GEN_INDEX", "CMP_GT"] {
        let err = PointwiseOp::from_mode_name(name).err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains(name), "{name}: {text:?}");
    }
}

#[test]
fn bf16_sdpa_then_residual_add_matches_the_oracle_within_bf16_rounding() {
    use half::bf16;
    let x = inputs();
    // The oracle sees exactly the bf16 values the executor reads.
    let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&a| bf16::from_f32(a).to_f32()).collect() };
    let xr = Inputs {
        q: round(&x.q),
        k: round(&x.k),
        v: round(&x.v),
        r: round(&x.r),
        off_q: x.off_q.clone(),
        off_kv: x.off_kv.clone(),
    };
    let to_bf16 = |v: &[f32]| -> Vec<bf16> { v.iter().map(|&a| bf16::from_f32(a)).collect() };
    let (q, k, v, r) = (
        to_bf16(&xr.q),
        to_bf16(&xr.k),
        to_bf16(&xr.v),
        to_bf16(&xr.r),
    );
    let mut tensors = sdpa_tensors();
    for t in &mut tensors {
        if t.data_type == DataType::F32 {
            t.data_type = DataType::BF16;
        }
    }
    let graph = ExecGraph {
        tensors,
        nodes: vec![
            sdpa_node(O, 0.35),
            pointwise("residual", PointwiseOp::Add, O, Some(R), Y),
        ],
    };
    let mut y = vec![bf16::NAN; q.len()];
    let pack = VariantPack::new()
        .bind_input(AUX_Q, HostData::I32(&xr.off_q))
        .bind_input(AUX_KV, HostData::I32(&xr.off_kv))
        .bind_input(Q, HostData::BF16(&q))
        .bind_input(K, HostData::BF16(&k))
        .bind_input(V, HostData::BF16(&v))
        .bind_input(R, HostData::BF16(&r))
        .bind_output(Y, HostDataMut::BF16(&mut y));
    execute(&graph, pack).unwrap_or_else(|e| panic!("{e}"));
    let o = oracle_sdpa(&xr, 0.35);
    let want: Vec<f64> = o
        .iter()
        .zip(&xr.r)
        .map(|(a, &b)| a + f64::from(b))
        .collect();
    let got: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
    // O is rounded to bf16 once (the virtual intermediate), Y once more: |y| <= 2, so two
    // roundings of at most 2^-8 relative each stay below 2e-2.
    assert_close(&got, &want, 2e-2);
}
