//! One case per validation rule: the exact variant, and a snapshot of its message (each names
//! the tensor uid or node, the field and the bad value).

mod common;

use ragged_schema::{
    DataType, Graph, NodeAttributes, SchemaError, SdpaAttributes, TensorAttributes, ValidationError,
};

fn base() -> Graph {
    common::ragged_sdpa_graph()
}

fn tensor_mut(g: &mut Graph, uid: i64) -> &mut TensorAttributes {
    match g.tensors.iter_mut().find(|t| t.uid == uid) {
        Some(t) => t,
        None => panic!("fixture has no tensor uid {uid}"),
    }
}

fn sdpa_mut(g: &mut Graph) -> &mut SdpaAttributes {
    match &mut g.nodes[0].attributes {
        NodeAttributes::Sdpa(s) => s,
        other => panic!("fixture node is not SDPA: {other:?}"),
    }
}

fn validation_error(g: &Graph) -> ValidationError {
    match g.validate() {
        Err(SchemaError::Validation(e)) => e,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

/// Asserts the variant with `matches` and snapshots the message under `name`.
macro_rules! case {
    ($name:literal, $graph:expr, $pattern:pat) => {{
        let err = validation_error(&$graph);
        assert!(matches!(err, $pattern), "unexpected variant: {err:?}");
        insta::assert_snapshot!($name, err.to_string());
    }};
}

#[test]
fn fixture_is_valid() {
    assert_eq!(base().validate(), Ok(()));
}

#[test]
fn dense_sdpa_uses_bhsd_heads() {
    let dense = |uid, h: i64| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_data_type(DataType::Float)
            .set_dims(vec![2, h, 5, 8])
            .set_strides(TensorAttributes::packed_strides(&[2, h, 5, 8]))
    };
    let g = Graph::new("dense")
        .add_tensor(dense(1, 4))
        .add_tensor(dense(2, 2))
        .add_tensor(dense(3, 2))
        .add_tensor(dense(4, 4))
        .add_node(ragged_schema::Node::sdpa(
            "sdpa",
            SdpaAttributes::new(1, 2, 3, 4),
        ));
    assert_eq!(g.validate(), Ok(()));
    let mut bad = g.clone();
    bad.tensors[1].dims[1] = 3;
    case!(
        "sdpa_heads_not_multiple_dense",
        bad,
        ValidationError::SdpaHeadsNotMultiple {
            h_q: 4,
            h_kv: 3,
            ..
        }
    );
}

#[test]
fn duplicate_uid() {
    let mut g = base();
    tensor_mut(&mut g, 4).uid = 2;
    case!(
        "duplicate_uid",
        g,
        ValidationError::DuplicateUid { uid: 2, .. }
    );
}

#[test]
fn alignment_below_one() {
    let mut g = base();
    tensor_mut(&mut g, 3).alignment = 0;
    case!(
        "alignment_too_small",
        g,
        ValidationError::AlignmentTooSmall {
            uid: 3,
            alignment: 0
        }
    );
}

#[test]
fn multiplier_below_one() {
    let mut g = base();
    tensor_mut(&mut g, 1).ragged_offset_multiplier = -2;
    case!(
        "ragged_offset_multiplier_too_small",
        g,
        ValidationError::RaggedOffsetMultiplierTooSmall {
            uid: 1,
            multiplier: -2
        }
    );
}

#[test]
fn aux_missing() {
    let mut g = base();
    tensor_mut(&mut g, 2).ragged_offset_tensor_uid = Some(99);
    case!(
        "ragged_offset_missing",
        g,
        ValidationError::RaggedOffsetMissing {
            uid: 2,
            aux_uid: 99
        }
    );
}

#[test]
fn aux_is_itself() {
    let mut g = base();
    tensor_mut(&mut g, 2).ragged_offset_tensor_uid = Some(2);
    case!(
        "ragged_offset_self",
        g,
        ValidationError::RaggedOffsetSelf { uid: 2 }
    );
}

#[test]
fn ragged_primary_without_dims() {
    let mut g = base();
    tensor_mut(&mut g, 4).dims.clear();
    case!(
        "ragged_primary_without_dims",
        g,
        ValidationError::RaggedPrimaryWithoutDims { uid: 4, .. }
    );
}

#[test]
fn aux_rank() {
    let mut g = base();
    tensor_mut(&mut g, 10).dims = vec![3];
    case!(
        "ragged_offset_rank",
        g,
        ValidationError::RaggedOffsetRank {
            uid: 1,
            aux_uid: 10,
            ..
        }
    );
}

#[test]
fn aux_batch() {
    let mut g = base();
    tensor_mut(&mut g, 11).dims[0] = 2;
    case!(
        "ragged_offset_batch",
        g,
        ValidationError::RaggedOffsetBatch {
            uid: 2,
            aux_uid: 11,
            expected: 3,
            actual: 2
        }
    );
}

#[test]
fn aux_data_type() {
    let mut g = base();
    tensor_mut(&mut g, 10).data_type = DataType::Float;
    case!(
        "ragged_offset_data_type",
        g,
        ValidationError::RaggedOffsetDataType {
            uid: 1,
            aux_uid: 10,
            data_type: DataType::Float
        }
    );
}

#[test]
fn node_refers_to_missing_tensor() {
    let mut g = base();
    sdpa_mut(&mut g).stats_tensor_uid = Some(42);
    case!(
        "node_tensor_missing",
        g,
        ValidationError::NodeTensorMissing {
            field: "stats_tensor_uid",
            uid: 42,
            ..
        }
    );
}

#[test]
fn sdpa_rank() {
    let mut g = base();
    let v = tensor_mut(&mut g, 3);
    v.dims = vec![2, 7, 16];
    v.strides = vec![112, 16, 1];
    case!(
        "sdpa_rank",
        g,
        ValidationError::SdpaRank {
            field: "v_tensor_uid",
            uid: 3,
            ..
        }
    );
}

#[test]
fn sdpa_heads_not_multiple() {
    let mut g = base();
    tensor_mut(&mut g, 2).dims[2] = 3;
    case!(
        "sdpa_heads_not_multiple",
        g,
        ValidationError::SdpaHeadsNotMultiple {
            field: "k_tensor_uid",
            h_q: 4,
            h_kv: 3,
            ..
        }
    );
}

fn with_seq_len(dims: Vec<i64>, data_type: DataType) -> Graph {
    let mut g = base().add_tensor(
        TensorAttributes::new()
            .set_uid(20)
            .set_name("seq_len_kv")
            .set_data_type(data_type)
            .set_dims(dims)
            .set_strides(vec![1, 1, 1, 1]),
    );
    sdpa_mut(&mut g).seq_len_kv_tensor_uid = Some(20);
    g
}

#[test]
fn seq_len_valid_when_b111_index_typed() {
    assert_eq!(
        with_seq_len(vec![2, 1, 1, 1], DataType::Int64).validate(),
        Ok(())
    );
}

#[test]
fn seq_len_shape() {
    case!(
        "seq_len_shape",
        with_seq_len(vec![3, 1, 1, 1], DataType::Int32),
        ValidationError::SeqLenShape {
            field: "seq_len_kv_tensor_uid",
            uid: 20,
            ..
        }
    );
}

/// A paged graph (page table rows = B = 3) whose Q is one packed row of tokens: the lengths are
/// per sequence, as upstream's paged bundles write them.
#[test]
fn a_paged_graphs_lengths_follow_its_page_table() {
    let mut g = with_seq_len(vec![3], DataType::Int32).add_tensor(
        TensorAttributes::new()
            .set_uid(21)
            .set_name("page_table_k")
            .set_data_type(DataType::Int32)
            .set_dims(vec![3, 32])
            .set_strides(vec![32, 1]),
    );
    sdpa_mut(&mut g).page_table_k_tensor_uid = Some(21);
    assert_eq!(g.validate(), Ok(()));
    tensor_mut(&mut g, 21).dims = vec![2, 32];
    assert!(matches!(
        validation_error(&g),
        ValidationError::SeqLenShape { uid: 20, .. }
    ));
}

#[test]
fn seq_len_data_type() {
    case!(
        "seq_len_data_type",
        with_seq_len(vec![2, 1, 1, 1], DataType::Half),
        ValidationError::SeqLenDataType {
            uid: 20,
            data_type: DataType::Half,
            ..
        }
    );
}

#[test]
fn both_deprecated_causal_flags() {
    let mut g = base();
    let s = sdpa_mut(&mut g);
    s.causal_mask = true;
    s.causal_mask_bottom_right = true;
    case!(
        "both_causal_flags",
        g,
        ValidationError::BothCausalFlags { node_index: 0, .. }
    );
}

#[test]
fn ambiguous_causal_mask_from_band_resolution() {
    let s = SdpaAttributes {
        causal_mask: true,
        causal_mask_bottom_right: true,
        ..SdpaAttributes::new(1, 2, 3, 4)
    };
    let err = match s.resolve_diagonal_band() {
        Err(e) => e,
        Ok(band) => panic!("expected an error, got {band:?}"),
    };
    assert_eq!(
        err,
        SchemaError::Validation(ValidationError::AmbiguousCausalMask)
    );
    insta::assert_snapshot!("ambiguous_causal_mask", err.to_string());
}

mod properties {
    use proptest::prelude::*;
    use ragged_schema::{DataType, Graph, NodeAttributes};

    /// The fixture with one to three tensors redrawn (dims, type, aux uid) from small ranges,
    /// so that random graphs are sometimes valid and otherwise break one rule or a few.
    fn perturbed() -> impl Strategy<Value = Graph> {
        let tensor_count = super::base().tensors.len();
        let dims = prop_oneof![
            4 => prop::collection::vec(1i64..5, 4),
            1 => prop::collection::vec(-1i64..6, 0..6),
        ];
        let data_type =
            prop::sample::select(vec![DataType::Int32, DataType::Int64, DataType::Half]);
        let aux = prop_oneof![
            1 => Just(None),
            2 => prop::sample::select(vec![1i64, 2, 10, 11, 99]).prop_map(Some),
        ];
        prop::collection::vec((0..tensor_count, dims, data_type, aux), 1..3).prop_map(|draws| {
            let mut g = super::base();
            for (index, dims, data_type, aux) in draws {
                let t = &mut g.tensors[index];
                t.dims = dims;
                t.data_type = data_type;
                t.ragged_offset_tensor_uid = aux;
            }
            g
        })
    }

    proptest! {
        #![proptest_config(super::common::proptest_config(512))]

        /// Whatever validate accepts satisfies the RFC rules, checked here independently.
        #[test]
        fn accepted_graphs_satisfy_the_ragged_and_sdpa_rules(g in perturbed()) {
            if g.validate().is_err() {
                return Ok(());
            }
            for t in &g.tensors {
                let Some(aux_uid) = t.ragged_offset_tensor_uid else { continue };
                let aux = g.tensors.iter().find(|a| a.uid == aux_uid);
                prop_assert!(aux.is_some());
                let aux = aux.map(|a| (a.dims.clone(), a.data_type));
                let (aux_dims, aux_type) = aux.unwrap_or_default();
                prop_assert_eq!(aux_dims.len(), 4);
                prop_assert_eq!(aux_dims[0], t.dims[0] + 1);
                prop_assert!(matches!(aux_type, DataType::Int32 | DataType::Int64));
            }
            let NodeAttributes::Sdpa(s) = &g.nodes[0].attributes else {
                return Err(TestCaseError::fail("fixture node is SDPA"));
            };
            let dims = |uid: i64| g.tensors.iter().find(|t| t.uid == uid).map(|t| (t.dims.clone(), t.is_ragged()));
            let heads = |uid: i64| dims(uid).map(|(d, ragged)| if ragged { d[2] } else { d[1] });
            for uid in [s.q_tensor_uid, s.k_tensor_uid, s.v_tensor_uid, s.o_tensor_uid] {
                prop_assert_eq!(dims(uid).map(|(d, _)| d.len()), Some(4));
            }
            let h_q = heads(s.q_tensor_uid).unwrap_or(0);
            for kv in [s.k_tensor_uid, s.v_tensor_uid] {
                let h_kv = heads(kv).unwrap_or(0);
                prop_assert!(h_kv > 0 && h_q % h_kv == 0, "H_q {} H_kv {}", h_q, h_kv);
            }
        }
    }
}
