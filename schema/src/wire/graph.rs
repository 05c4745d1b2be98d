//! `Graph` and `Node` ↔ the wire tables.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

use super::{fb, sdpa, tensor, verification};
use crate::error::SchemaError;
use crate::model::{
    DataType, EngineApiVersion, Graph, GraphId, Node, NodeAttributes, SDPA_ATTRIBUTES_TAG,
};
use crate::version::compute_minimum_plugin_api_version;

pub(super) fn decode(bytes: &[u8]) -> Result<Graph, SchemaError> {
    let g = flatbuffers::root::<fb::Graph>(bytes).map_err(verification("Graph"))?;
    let tensors = g
        .tensors()
        .map(|ts| {
            ts.iter()
                .map(|t| tensor::decode(&t))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
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
