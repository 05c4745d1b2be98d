//! `Graph` and `Node` ↔ the wire tables.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use super::{fb, pointwise, sdpa, sdpa_backward, tensor, verification};
use crate::error::SchemaError;
use crate::model::{
    DataType, EngineApiVersion, Graph, GraphId, Node, NodeAttributes, POINTWISE_ATTRIBUTES_TAG,
    SDPA_ATTRIBUTES_TAG, SDPA_BACKWARD_ATTRIBUTES_TAG,
};
use crate::version::compute_minimum_plugin_api_version;

pub(super) fn decode(bytes: &[u8]) -> Result<Graph, SchemaError> {
    let g = flatbuffers::root::<fb::Graph>(bytes).map_err(verification("Graph"))?;
    // One allocation of the final size: collecting through `Result` loses the length and
    // grew the vector several times per decode (issue 14 item 5).
    let mut tensors = Vec::with_capacity(g.tensors().map_or(0, |ts| ts.len()));
    for t in g.tensors().iter().flat_map(|ts| ts.iter()) {
        tensors.push(tensor::decode(&t)?);
    }
    let nodes = g
        .nodes()
        .map(|ns| ns.iter().map(|n| decode_node(&n)).collect())
        .unwrap_or_default();
    Ok(Graph {
        name: g.name().unwrap_or_default().to_string(),
        compute_data_type: DataType::from_wire(g.compute_data_type().0),
        intermediate_data_type: DataType::from_wire(g.intermediate_data_type().0),
        io_data_type: DataType::from_wire(g.io_data_type().0),
        tensors,
        nodes,
        preferred_engine_id: g.preferred_engine_id(),
        is_override_shape_enabled: g.is_override_shape_enabled(),
        min_required_engine_api_version: g
            .min_required_engine_api_version()
            .map(|v| EngineApiVersion::new(v.major(), v.minor(), v.patch())),
        id: g.id().map(|id| {
            let mut bytes = [0u8; 16];
            for (dst, src) in bytes.iter_mut().zip(id.bytes().iter()) {
                *dst = src;
            }
            GraphId(bytes)
        }),
        is_ragged_tensor_enabled: g.is_ragged_tensor_enabled(),
    })
}

/// Unknown and unread members become `Unsupported`, never an error: the plugin declines them.
fn decode_node(n: &fb::Node<'_>) -> Node {
    let tag = n.attributes_type().0;
    let attributes = match tag {
        0 => NodeAttributes::None,
        SDPA_ATTRIBUTES_TAG => match n.attributes_as_sdpa_attributes() {
            Some(s) => NodeAttributes::Sdpa(sdpa::decode(&s)),
            // Tag without a member table: nothing to read, same as an unreadable member.
            None => NodeAttributes::unsupported(tag),
        },
        POINTWISE_ATTRIBUTES_TAG => match n.attributes_as_pointwise_attributes() {
            Some(p) => NodeAttributes::Pointwise(pointwise::decode(&p)),
            None => NodeAttributes::unsupported(tag),
        },
        SDPA_BACKWARD_ATTRIBUTES_TAG => match n.attributes_as_sdpa_backward_attributes() {
            Some(s) => NodeAttributes::SdpaBackward(sdpa_backward::decode(&s)),
            None => NodeAttributes::unsupported(tag),
        },
        _ => NodeAttributes::unsupported(tag),
    };
    Node {
        name: n.name().unwrap_or_default().to_string(),
        compute_data_type: DataType::from_wire(n.compute_data_type().0),
        attributes,
    }
}

/// How the writer treats the two fields it derives from the graph's content.
#[derive(Clone, Copy)]
pub(super) enum Provenance {
    /// The project writer rule: stamp the computed minimum version, set the flag when ragged.
    Stamp,
    /// Write the stamp and the flag exactly as the model holds them (upstream-like buffers,
    /// edge cases for conformance tests).
    Exact,
}

pub(super) fn encode(graph: &Graph, provenance: Provenance) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let tensors: Vec<_> = graph
        .tensors
        .iter()
        .map(|t| tensor::encode(&mut fbb, t))
        .collect();
    let tensors = fbb.create_vector(&tensors);
    let nodes: Vec<_> = graph
        .nodes
        .iter()
        .map(|n| encode_node(&mut fbb, n))
        .collect();
    let nodes = fbb.create_vector(&nodes);
    let name = fbb.create_string(&graph.name);
    let (stamp, ragged_flag) = match provenance {
        Provenance::Stamp => {
            let minimum = compute_minimum_plugin_api_version(graph).version;
            // The computed minimum is at most 1.3.0, so it always fits the wire's uint32s.
            let stamp =
                EngineApiVersion::from_semver(&minimum).unwrap_or(EngineApiVersion::new(1, 0, 0));
            (Some(stamp), graph.is_ragged())
        }
        Provenance::Exact => (
            graph.min_required_engine_api_version,
            graph.is_ragged_tensor_enabled,
        ),
    };
    let stamp = stamp.map(|v| fb::EngineApiVersion::new(v.major, v.minor, v.patch));
    let id = graph.id.map(|id| fb::Uuid::new(&id.0));
    let args = fb::GraphArgs {
        name: Some(name),
        compute_data_type: fb::DataType(graph.compute_data_type.to_wire()),
        intermediate_data_type: fb::DataType(graph.intermediate_data_type.to_wire()),
        io_data_type: fb::DataType(graph.io_data_type.to_wire()),
        tensors: Some(tensors),
        nodes: Some(nodes),
        preferred_engine_id: graph.preferred_engine_id,
        is_override_shape_enabled: graph.is_override_shape_enabled,
        min_required_engine_api_version: stamp.as_ref(),
        id: id.as_ref(),
        is_ragged_tensor_enabled: ragged_flag,
    };
    let root = fb::Graph::create(&mut fbb, &args);
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}

fn encode_node<'a>(fbb: &mut FlatBufferBuilder<'a>, node: &Node) -> WIPOffset<fb::Node<'a>> {
    let attributes: Option<WIPOffset<UnionWIPOffset>> = match &node.attributes {
        NodeAttributes::None => None,
        NodeAttributes::Sdpa(s) => Some(sdpa::encode(fbb, s).as_union_value()),
        NodeAttributes::Pointwise(p) => Some(pointwise::encode(fbb, p).as_union_value()),
        NodeAttributes::SdpaBackward(s) => Some(sdpa_backward::encode(fbb, s).as_union_value()),
        // The project cannot rebuild these members' fields; an empty table keeps the tag.
        NodeAttributes::Unsupported { .. } => {
            let start = fbb.start_table();
            Some(WIPOffset::new(fbb.end_table(start).value()))
        }
    };
    let name = fbb.create_string(&node.name);
    fb::Node::create(
        fbb,
        &fb::NodeArgs {
            name: Some(name),
            compute_data_type: fb::DataType(node.compute_data_type.to_wire()),
            attributes_type: fb::NodeAttributes(node.attributes.tag()),
            attributes,
        },
    )
}

#[cfg(test)]
mod tests {
    use flatbuffers::{FlatBufferBuilder, WIPOffset};

    use super::*;
    use crate::model::{DEFAULT_ALIGNMENT, DEFAULT_RAGGED_OFFSET_MULTIPLIER};

    /// A graph whose only node carries `tag` and a member table with two fields, as a newer
    /// producer (or an upstream op the project does not read) would write it.
    fn graph_with_foreign_member(tag: u8) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let start = fbb.start_table();
        fbb.push_slot::<i64>(4, 77, 0);
        fbb.push_slot::<f32>(6, 1.5, 0.0);
        let member: WIPOffset<UnionWIPOffset> = WIPOffset::new(fbb.end_table(start).value());
        let name = fbb.create_string("foreign");
        let node = fb::Node::create(
            &mut fbb,
            &fb::NodeArgs {
                name: Some(name),
                compute_data_type: fb::DataType::FLOAT,
                attributes_type: fb::NodeAttributes(tag),
                attributes: Some(member),
            },
        );
        let nodes = fbb.create_vector(&[node]);
        let root = fb::Graph::create(
            &mut fbb,
            &fb::GraphArgs {
                nodes: Some(nodes),
                ..fb::GraphArgs::default()
            },
        );
        fbb.finish(root, None);
        fbb.finished_data().to_vec()
    }

    #[test]
    fn unread_upstream_member_is_unsupported_with_its_name() {
        let g = decode(&graph_with_foreign_member(9)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            g.nodes[0].attributes,
            NodeAttributes::Unsupported {
                tag: 9,
                name: "MatmulAttributes".into()
            }
        );
        assert_eq!(g.nodes[0].name, "foreign");
    }

    #[test]
    fn member_newer_than_the_schema_is_unsupported_not_an_error() {
        let g = decode(&graph_with_foreign_member(31)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            g.nodes[0].attributes,
            NodeAttributes::Unsupported {
                tag: 31,
                name: "<unknown tag 31>".into()
            }
        );
    }

    #[test]
    fn absent_fields_take_schema_defaults() {
        let mut fbb = FlatBufferBuilder::new();
        let start = fbb.start_table();
        fbb.push_slot::<i64>(fb::TensorAttributes::VT_UID, 3, 0);
        let tensor: WIPOffset<fb::TensorAttributes> = WIPOffset::new(fbb.end_table(start).value());
        let tensors = fbb.create_vector(&[tensor]);
        let root = fb::Graph::create(
            &mut fbb,
            &fb::GraphArgs {
                tensors: Some(tensors),
                ..fb::GraphArgs::default()
            },
        );
        fbb.finish(root, None);
        let g = decode(fbb.finished_data()).unwrap_or_else(|e| panic!("{e}"));
        let t = &g.tensors[0];
        assert_eq!(t.uid, 3);
        assert_eq!(t.name, "");
        assert_eq!(t.data_type, DataType::Unset);
        assert!(t.dims.is_empty() && t.strides.is_empty());
        assert_eq!(t.value, None);
        assert_eq!(t.ragged_offset_tensor_uid, None);
        assert_eq!(t.alignment, DEFAULT_ALIGNMENT);
        assert_eq!(t.ragged_offset_multiplier, DEFAULT_RAGGED_OFFSET_MULTIPLIER);
        assert!(!g.is_ragged_tensor_enabled);
        assert!(!g.is_override_shape_enabled);
        assert_eq!(g.min_required_engine_api_version, None);
        assert_eq!(g.preferred_engine_id, None);
        assert!(g.nodes.is_empty());
    }

    #[test]
    fn exact_encoding_of_an_unflagged_graph_omits_the_flag_field() {
        let g = Graph::new("g");
        let bytes = encode(&g, Provenance::Exact);
        let root = flatbuffers::root::<fb::Graph>(&bytes).unwrap_or_else(|e| panic!("{e}"));
        // Absent in the vtable, exactly like a buffer from upstream's schema.
        assert_eq!(
            root._tab
                .vtable()
                .get(fb::Graph::VT_IS_RAGGED_TENSOR_ENABLED),
            0
        );
        assert_eq!(
            root._tab
                .vtable()
                .get(fb::Graph::VT_MIN_REQUIRED_ENGINE_API_VERSION),
            0
        );
    }
}
