//! Multi-node graphs: SDPA whose virtual O feeds a pointwise residual add, their wire and JSON
//! round trips, and the graph-level rules (order, cycles, orphans, RFC §4.9's real aux), each
//! rejection naming the offending uid.

mod common;

use ragged_schema::{
    Graph, Node, NodeAttributes, PointwiseAttributes, PointwiseMode, SchemaError, TensorAttributes,
    ValidationError, wire,
};

/// `common::ragged_sdpa_graph` with O (uid 4) virtual, plus a ragged residual R (uid 5) and the
/// output Y (uid 6), both on Q's aux (uid 10), and the node `Y = O + R`.
fn sdpa_residual_graph() -> Graph {
    let mut g = common::ragged_sdpa_graph();
    let o = g.tensors.iter_mut().find(|t| t.uid == 4);
    let Some(o) = o else {
        panic!("fixture has no O")
    };
    o.is_virtual = true;
    let like_o = |uid: i64, name: &str| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(ragged_schema::DataType::Half)
            .set_dims(vec![2, 5, 4, 8])
            .set_strides(vec![160, 32, 8, 1])
            .set_ragged_offset_uid(10)
    };
    let r = like_o(5, "residual");
    let y = like_o(6, "y");
    let o = TensorAttributes::new().set_uid(4);
    let add = PointwiseAttributes::binary(PointwiseMode::ADD, &o, &r, &y);
    g.add_tensor(r)
        .add_tensor(y)
        .add_node(Node::pointwise("residual_add", add))
}

fn validation_error(g: &Graph) -> ValidationError {
    match g.validate() {
        Err(SchemaError::Validation(e)) => e,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

fn tensor_mut(g: &mut Graph, uid: i64) -> &mut TensorAttributes {
    match g.tensors.iter_mut().find(|t| t.uid == uid) {
        Some(t) => t,
        None => panic!("fixture has no tensor uid {uid}"),
    }
}

#[test]
fn sdpa_then_residual_add_is_valid() {
    assert_eq!(sdpa_residual_graph().validate(), Ok(()));
}

#[test]
fn pointwise_node_survives_the_wire() {
    let g = sdpa_residual_graph();
    let back = wire::decode_graph(&wire::encode_graph(&g)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.nodes, g.nodes);
    assert_eq!(back.tensors, g.tensors);
    let pw = back.nodes[1].attributes.as_pointwise();
    assert_eq!(pw.map(|p| p.operation), Some(PointwiseMode::ADD));
}

#[test]
fn pointwise_node_survives_json() {
    let g = sdpa_residual_graph();
    let text = g.to_json();
    assert!(text.contains("\"type\": \"PointwiseAttributes\""), "{text}");
    assert!(text.contains("\"operation\": \"add\""), "{text}");
    let back = Graph::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.nodes, g.nodes);
}

#[test]
fn json_pointwise_with_an_unknown_mode_name_is_rejected_by_path() {
    let text = sdpa_residual_graph()
        .to_json()
        .replace("\"operation\": \"add\"", "\"operation\": \"frobnicate\"");
    match Graph::from_json(&text) {
        Err(SchemaError::UnknownEnumString { path, value }) => {
            assert_eq!(path, "nodes[1].inputs.operation");
            assert_eq!(value, "frobnicate");
        }
        other => panic!("expected an enum error, got {other:?}"),
    }
}

#[test]
fn nodes_out_of_order_are_rejected_naming_the_uid() {
    let mut g = sdpa_residual_graph();
    g.nodes.swap(0, 1);
    let err = validation_error(&g);
    assert!(
        matches!(
            err,
            ValidationError::NodeOrder {
                uid: 4,
                node_index: 0,
                producer: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tensor uid 4"), "{err}");
}

#[test]
fn a_cycle_is_rejected_naming_the_uid() {
    let mut g = sdpa_residual_graph();
    // A third node writes Q from Y, so SDPA (node 0) reads what a later node writes.
    let mut cyclic = g.nodes[1].clone();
    if let NodeAttributes::Pointwise(p) = &mut cyclic.attributes {
        p.in_1_tensor_uid = Some(6);
        p.out_0_tensor_uid = 1;
    }
    cyclic.name = "feeds_q".into();
    g.nodes.push(cyclic);
    let err = validation_error(&g);
    assert!(
        matches!(
            err,
            ValidationError::NodeOrder {
                uid: 1,
                node_index: 0,
                producer: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tensor uid 1"), "{err}");
}

#[test]
fn an_orphan_node_is_rejected_naming_its_uids() {
    let a = TensorAttributes::new()
        .set_uid(20)
        .set_dims(vec![4])
        .set_strides(vec![1]);
    let b = TensorAttributes::new()
        .set_uid(21)
        .set_dims(vec![4])
        .set_strides(vec![1]);
    let relu = PointwiseAttributes::unary(PointwiseMode::RELU_FWD, &a, &b);
    let g = sdpa_residual_graph()
        .add_tensor(a)
        .add_tensor(b)
        .add_node(Node::pointwise("stray", relu));
    let err = validation_error(&g);
    assert!(
        matches!(err, ValidationError::OrphanNode { node_index: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("[20, 21]"), "{err}");
}

#[test]
fn a_virtual_ragged_tensor_whose_aux_is_virtual_is_rejected() {
    let mut g = sdpa_residual_graph();
    let aux = TensorAttributes::new()
        .set_uid(12)
        .set_data_type(ragged_schema::DataType::Int32)
        .set_dims(vec![3, 1, 1, 1])
        .set_strides(vec![1, 1, 1, 1])
        .set_is_virtual(true);
    g = g.add_tensor(aux);
    tensor_mut(&mut g, 4).ragged_offset_tensor_uid = Some(12);
    let err = validation_error(&g);
    assert_eq!(
        err,
        ValidationError::RaggedOffsetVirtual {
            uid: 4,
            aux_uid: 12
        }
    );
    assert!(err.to_string().starts_with("tensor uid 4:"), "{err}");
}

#[test]
fn a_virtual_ragged_tensor_whose_aux_is_absent_is_rejected() {
    let mut g = sdpa_residual_graph();
    tensor_mut(&mut g, 4).ragged_offset_tensor_uid = Some(99);
    let err = validation_error(&g);
    assert_eq!(
        err,
        ValidationError::RaggedOffsetMissing {
            uid: 4,
            aux_uid: 99
        }
    );
    assert!(err.to_string().contains("tensor uid 99"), "{err}");
}

#[test]
fn a_virtual_input_nobody_writes_is_rejected() {
    let mut g = sdpa_residual_graph();
    tensor_mut(&mut g, 5).is_virtual = true;
    let err = validation_error(&g);
    assert!(
        matches!(
            err,
            ValidationError::VirtualTensorUnwritten {
                uid: 5,
                node_index: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_tensor_written_twice_is_rejected() {
    let mut g = sdpa_residual_graph();
    if let NodeAttributes::Pointwise(p) = &mut g.nodes[1].attributes {
        p.out_0_tensor_uid = 4;
    }
    let err = validation_error(&g);
    assert!(
        matches!(
            err,
            ValidationError::TensorWrittenTwice {
                uid: 4,
                first_node: 0,
                node_index: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_pointwise_read_of_a_missing_tensor_names_field_and_uid() {
    let mut g = sdpa_residual_graph();
    if let NodeAttributes::Pointwise(p) = &mut g.nodes[1].attributes {
        p.in_1_tensor_uid = Some(77);
    }
    let err = validation_error(&g);
    assert!(
        matches!(
            err,
            ValidationError::NodeTensorMissing {
                field: "in_1_tensor_uid",
                uid: 77,
                ..
            }
        ),
        "{err:?}"
    );
}
