//! Graph fixtures and settings shared by the integration tests.

// Each suite compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use ragged_schema::{DataType, Graph, Node, SdpaAttributes, TensorAttributes};

/// A ragged GQA SDPA forward graph: q and o share aux uid 10, k and v share aux uid 11,
/// int32 offsets, B = 2, H_q = 4, H_kv = 2, D = 8, explicit scale, bottom-right causal band.
pub fn ragged_sdpa_graph() -> Graph {
    let aux_q = TensorAttributes::new()
        .set_uid(10)
        .set_name("ragged_offset_q")
        .set_data_type(DataType::Int32)
        .set_dims(vec![3, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1]);
    let aux_kv = TensorAttributes::new()
        .set_uid(11)
        .set_name("ragged_offset_kv")
        .set_data_type(DataType::Int64)
        .set_dims(vec![3, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1]);
    let primary = |uid: i64, name: &str, s: i64, h: i64, aux: &TensorAttributes| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Half)
            .set_dims(vec![2, s, h, 8])
            .set_strides(vec![s * h * 8, h * 8, 8, 1])
            .set_ragged_offset(aux)
    };
    let q = primary(1, "q", 5, 4, &aux_q);
    let k = primary(2, "k", 7, 2, &aux_kv);
    let v = primary(3, "v", 7, 2, &aux_kv);
    let o = primary(4, "o", 5, 4, &aux_q);
    let sdpa = SdpaAttributes {
        attn_scale_value: Some(0.125),
        right_bound: Some(0),
        diagonal_alignment: ragged_schema::DiagonalAlignment::BottomRight,
        ..SdpaAttributes::new(1, 2, 3, 4)
    };
    Graph::new("ragged_sdpa_gqa")
        .set_data_types(DataType::Half, DataType::Float, DataType::Float)
        .add_tensor(aux_q)
        .add_tensor(aux_kv)
        .add_tensor(q)
        .add_tensor(k)
        .add_tensor(v)
        .add_tensor(o)
        .add_node(Node::sdpa("sdpa_fwd", sdpa))
}

/// The proptest settings of these suites: a fixed case count and no regression files written
/// (CI runs on clean clones; found cases are pinned as named tests instead).
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
