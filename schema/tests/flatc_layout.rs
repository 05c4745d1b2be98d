//! The hand-written TensorValue code against flatc's own writer (see tests/flatc/README.md).

use ragged_schema::{DataType, TensorValue, wire};

const SCALARS: &[u8] = include_bytes!("flatc/scalar_graph.bin");

#[test]
fn every_tensor_value_member_written_by_flatc_reads_back() {
    let g = wire::decode_graph(SCALARS).unwrap_or_else(|e| panic!("flatc buffer must decode: {e}"));
    let values: Vec<(i64, Option<TensorValue>)> =
        g.tensors.iter().map(|t| (t.uid, t.value)).collect();
    assert_eq!(
        values,
        vec![
            (1, Some(TensorValue::Float32(0.125))),
            (2, Some(TensorValue::Int64(-1_234_567_890_123))),
            (3, Some(TensorValue::Float64(0.1))),
            (4, Some(TensorValue::Bool(true))),
            (5, Some(TensorValue::Float8(56))),
            (6, Some(TensorValue::Float16(-2.5))),
            (7, Some(TensorValue::BFloat16(3.0))),
            (8, Some(TensorValue::Int32(-7))),
            (9, None),
        ]
    );
    assert!(g.tensors[8].is_runtime_pass_by_value);
    assert_eq!(g.tensors[3].data_type, DataType::Boolean);
    assert!(!g.is_ragged_tensor_enabled);
}

#[test]
fn our_writer_reproduces_flatcs_values() {
    let g = wire::decode_graph(SCALARS).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wire::decode_graph(&wire::encode_graph_exact(&g)), Ok(g));
}
