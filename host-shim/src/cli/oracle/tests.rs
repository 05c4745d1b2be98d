//! The SDPA oracle against hand-computed values, both dims orders and the external golden oracle.

use std::sync::Arc;

use hipdnn_shim::case_inputs::pre_supplied;
use hipdnn_shim::graphs::{Mask, RaggedSdpaSpec};
use hipdnn_shim::harness::{Harness, PreSuppliedInputs};
use ragged_core::DenseTensor;
use ragged_core::tensor::Tensor;

use super::*;

fn dense(values: Vec<f32>, dims: Vec<i64>) -> Arc<dyn Tensor> {
    let strides = ragged_core::tensor::packed_strides(&dims);
    Arc::new(DenseTensor::from_vec(values, dims, strides).unwrap_or_else(|e| panic!("{e}")))
}

/// One query against two keys with scale ln 3: the scores 0 and ln 3 give p = (1/4, 3/4).
#[test]
fn hand_computed_single_row() {
    let text = r#"{"name": "tiny", "compute_data_type": "float", "io_data_type": "float",
      "intermediate_data_type": "float",
      "tensors": [
       {"uid": 1, "name": "q", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]},
       {"uid": 2, "name": "k", "data_type": "float", "dims": [1,1,2,1], "strides": [2,2,1,1]},
       {"uid": 3, "name": "v", "data_type": "float", "dims": [1,1,2,1], "strides": [2,2,1,1]},
       {"uid": 4, "name": "o", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]},
       {"uid": 5, "name": "lse", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]}],
      "nodes": [{"type": "SdpaAttributes", "attributes": {"q_tensor_uid": 1, "k_tensor_uid": 2,
        "v_tensor_uid": 3, "o_tensor_uid": 4, "stats_tensor_uid": 5,
        "attn_scale_value": 1.0986122886681098}}]}"#;
    let graph = Graph::from_json(text).unwrap_or_else(|e| panic!("{e}"));
    let mut pre = PreSuppliedInputs::new();
    pre.insert(1, dense(vec![1.0], vec![1, 1, 1, 1]));
    pre.insert(2, dense(vec![0.0, 1.0], vec![1, 1, 2, 1]));
    pre.insert(3, dense(vec![10.0, 20.0], vec![1, 1, 2, 1]));
    let h = Harness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{e}"));
    let writes = evaluate(&h.graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
    let scale = f64::from(1.098_612_3_f32); // the wire's f32 scale
    let p1 = scale.exp() / (1.0 + scale.exp());
    let o = 10.0 * (1.0 - p1) + 20.0 * p1;
    let lse = (1.0 + scale.exp()).ln();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0].uid, 4);
    assert_eq!(writes[1].uid, 5);
    assert!((writes[0].values[0].1 - o).abs() < 1e-12 && (o - 17.5).abs() < 1e-6);
    assert!((writes[1].values[0].1 - lse).abs() < 1e-12 && (lse - 4f64.ln()).abs() < 1e-6);
}

/// The same row with a sink of logit ln 2 (paged-kv-and-sinks.md §6.2): the weights become
/// 1 : 3 : 2 (keys, sink) so O = (10·1 + 20·3) / 6 and LSE = ln 6; then both keys read from a
/// page pool through a page table, with the sink, give the same values.
#[test]
fn hand_computed_sink_and_paged_rows() {
    let sink_graph = r#"{"name": "tiny_sink", "compute_data_type": "float", "io_data_type": "float",
      "intermediate_data_type": "float",
      "tensors": [
       {"uid": 1, "name": "q", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]},
       {"uid": 2, "name": "k", "data_type": "float", "dims": [1,1,2,1], "strides": [2,2,1,1]},
       {"uid": 3, "name": "v", "data_type": "float", "dims": [1,1,2,1], "strides": [2,2,1,1]},
       {"uid": 4, "name": "o", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]},
       {"uid": 5, "name": "lse", "data_type": "float", "dims": [1,1,1,1], "strides": [1,1,1,1]},
       {"uid": 6, "name": "sink", "data_type": "float", "dims": [1], "strides": [1]}],
      "nodes": [{"type": "SdpaAttributes", "attributes": {"q_tensor_uid": 1, "k_tensor_uid": 2,
        "v_tensor_uid": 3, "o_tensor_uid": 4, "stats_tensor_uid": 5, "sink_token_tensor_uid": 6,
        "attn_scale_value": 1.0986122886681098}}]}"#;
    let scale = f64::from(1.098_612_3_f32);
    let sink = f64::from(std::f32::consts::LN_2);
    let total = 1.0 + scale.exp() + sink.exp();
    let (o, lse) = ((10.0 + 20.0 * scale.exp()) / total, total.ln());
    assert!((o - 70.0 / 6.0).abs() < 1e-6 && (lse - 6f64.ln()).abs() < 1e-6);
    let check = |graph: Graph, pre: PreSuppliedInputs| {
        let h = Harness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{e}"));
        let writes = evaluate(&h.graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
        assert!((writes[0].values[0].1 - o).abs() < 1e-12, "{writes:?}");
        assert!((writes[1].values[0].1 - lse).abs() < 1e-12, "{writes:?}");
    };
    let mut pre = PreSuppliedInputs::new();
    pre.insert(1, dense(vec![1.0], vec![1, 1, 1, 1]));
    pre.insert(2, dense(vec![0.0, 1.0], vec![1, 1, 2, 1]));
    pre.insert(3, dense(vec![10.0, 20.0], vec![1, 1, 2, 1]));
    pre.insert(6, dense(vec![std::f32::consts::LN_2], vec![1]));
    check(
        Graph::from_json(sink_graph).unwrap_or_else(|e| panic!("{e}")),
        pre.clone(),
    );

    // Pools of 3 pages of one token: key 0 in page 2, key 1 in page 0 (page 1 is never read and
    // holds NaN); V's table is its own.
    let paged_graph = sink_graph
        .replace(
            r#""dims": [1,1,2,1], "strides": [2,2,1,1]"#,
            r#""dims": [3,1,1,1], "strides": [1,1,1,1]"#,
        )
        .replace(
            r#"{"uid": 6,"#,
            r#"{"uid": 7, "name": "ptk", "data_type": "int32", "dims": [1,3], "strides": [3,1]},
       {"uid": 8, "name": "ptv", "data_type": "int32", "dims": [1,1,3,1], "strides": [3,3,1,1]},
       {"uid": 9, "name": "lq", "data_type": "int32", "dims": [1], "strides": [1]},
       {"uid": 10, "name": "lkv", "data_type": "int32", "dims": [1], "strides": [1]},
       {"uid": 6,"#,
        )
        .replace(
            r#""sink_token_tensor_uid": 6,"#,
            r#""sink_token_tensor_uid": 6, "page_table_k_tensor_uid": 7,
        "page_table_v_tensor_uid": 8, "seq_len_q_tensor_uid": 9, "seq_len_kv_tensor_uid": 10,"#,
        );
    assert_eq!(
        paged_graph.matches("[3,1,1,1]").count(),
        2,
        "K and V are pools"
    );
    let graph = Graph::from_json(&paged_graph).unwrap_or_else(|e| panic!("{e}"));
    let int = |values: Vec<i32>, dims: Vec<i64>| -> Arc<dyn Tensor> {
        let strides = ragged_core::tensor::packed_strides(&dims);
        Arc::new(DenseTensor::from_vec(values, dims, strides).unwrap_or_else(|e| panic!("{e}")))
    };
    pre.insert(2, dense(vec![1.0, f32::NAN, 0.0], vec![3, 1, 1, 1]));
    pre.insert(3, dense(vec![10.0, f32::NAN, 20.0], vec![3, 1, 1, 1]));
    pre.insert(7, int(vec![2, 0, -1], vec![1, 3]));
    pre.insert(8, int(vec![0, 2, 99], vec![1, 1, 3, 1]));
    pre.insert(9, int(vec![1], vec![1]));
    pre.insert(10, int(vec![2], vec![1]));
    check(graph, pre);
}

fn gqa_case(mask: Mask) -> (Graph, Harness) {
    let spec = RaggedSdpaSpec {
        heads_q: 4,
        heads_kv: 2,
        head_dim: 8,
        seq_len_kv: Some(vec![5, 1, 3]),
        mask,
        ..RaggedSdpaSpec::packed("forms", &[3, 4, 0], &[6, 2, 4])
    };
    let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
    let graph = spec.graph();
    let h = Harness::new(graph.clone(), &pre, 3).unwrap_or_else(|e| panic!("{e}"));
    (graph, h)
}

/// `[B, S, H, D]` and `[B, H, S, D]` dims over the same BSHD memory are the same tensor.
#[test]
fn both_ragged_dims_orders_over_one_memory_give_identical_values() {
    for mask in [Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight] {
        let (graph, h) = gqa_case(mask);
        let form_a = evaluate(&graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
        let mut form_b = graph.clone();
        for t in form_b.tensors.iter_mut().filter(|t| t.is_ragged()) {
            t.dims.swap(1, 2);
            t.strides.swap(1, 2);
        }
        assert_ne!(form_b, graph);
        let form_b = evaluate(&form_b, &h.reference).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(form_a, form_b, "{mask:?}");
        assert!(form_a[0].values.len() > 100);
    }
}

#[test]
fn rows_without_keys_are_zero_with_lse_minus_infinity() {
    let (graph, h) = gqa_case(Mask::CausalBottomRight);
    let writes = evaluate(&graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
    // Batch 1: 4 query rows, 1 key, bottom-right: only row 3 sees key 0.
    let lse = &writes[1].values;
    let minus_inf = lse.iter().filter(|(_, v)| *v == f64::NEG_INFINITY).count();
    assert_eq!(minus_inf, 3 * 4, "rows 0..3 of batch 1, four heads each");
    assert!(lse.iter().all(|(_, v)| !v.is_nan()));
    // Batch 0: 3 rows of 4 heads, batch 1: 4 rows, batch 2: none.
    assert_eq!(lse.len(), (3 + 4) * 4);
    assert_eq!(writes[0].values.len(), (3 + 4) * 4 * 8);
}

#[test]
fn a_window_excludes_keys_beyond_its_left_edge() {
    let (mut graph, h) = gqa_case(Mask::None);
    let full = evaluate(&graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
    if let Some(node) = graph.nodes.first_mut()
        && let ragged_schema::model::NodeAttributes::Sdpa(s) = &mut node.attributes
    {
        s.left_bound = Some(0);
        s.right_bound = Some(0);
    }
    let diagonal = evaluate(&graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
    // A one-key band: O equals that key's V row, so it differs from full attention.
    assert_eq!(full[0].values.len(), diagonal[0].values.len());
    assert_ne!(full, diagonal);
    let v = floats(tensor(&h.reference, 3).unwrap_or_else(|e| panic!("{e}")), 3)
        .unwrap_or_else(|e| panic!("{e}"));
    // Batch 0, row 0, head 0 (KV head 0) under TOP_LEFT sees key 0 only: O = V[0, 0, 0, :].
    let row: Vec<f64> = diagonal[0].values[..8].iter().map(|w| w.1).collect();
    assert_eq!(row, v[..8]);
}

fn expected(file: &str) -> Vec<f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/expected")
        .join(file);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(f)
        .and_then(|n| n.into_vec::<f64>())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The golden wire files carry a float64 oracle computed outside this repository: this one
/// must reproduce it, position for position, to rounding.
#[test]
fn reproduces_the_external_float64_oracle_of_the_golden_graph() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let graph =
        crate::graph_file::load(&golden.join("graph.json")).unwrap_or_else(|e| panic!("{e}"));
    let roles = hipdnn_shim::harness::SdpaRoles::of(&graph).unwrap_or_else(|e| panic!("{e}"));
    let mut pre = PreSuppliedInputs::new();
    crate::inputs::load_npy_dir(&graph, &golden.join("inputs"), &roles.outputs, &mut pre)
        .unwrap_or_else(|e| panic!("{e}"));
    let h = Harness::new(graph.clone(), &pre, 1).unwrap_or_else(|e| panic!("{e}"));
    let writes = evaluate(&graph, &h.reference).unwrap_or_else(|e| panic!("{e}"));
    for w in &writes {
        let want = expected(&format!("{}.npy", w.uid));
        let written = want.iter().filter(|v| !v.is_nan()).count();
        assert_eq!(w.values.len(), written, "uid {}: positions written", w.uid);
        for &(p, got) in &w.values {
            let e = want[p];
            if e.is_infinite() {
                assert_eq!(got, e, "uid {} position {p}", w.uid);
            } else {
                assert!(
                    (got - e).abs() <= 1e-9 * (1.0 + e.abs()),
                    "uid {} position {p}: {got} vs {e}",
                    w.uid
                );
            }
        }
    }
    assert_eq!(writes.len(), 2, "O and LSE");
}
