//! `Graph` and `Node` (graph.fbs), the root of what a plugin receives.

use std::fmt;

use super::{PointwiseAttributes, SdpaAttributes, SdpaBackwardAttributes, TensorAttributes};

/// The wire struct `EngineApiVersion {major, minor, patch: uint32}` stamped on a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineApiVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl EngineApiVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        EngineApiVersion {
            major,
            minor,
            patch,
        }
    }

    pub fn to_semver(self) -> semver::Version {
        semver::Version::new(
            u64::from(self.major),
            u64::from(self.minor),
            u64::from(self.patch),
        )
    }

    /// `None` when a component does not fit the wire's uint32.
    pub fn from_semver(v: &semver::Version) -> Option<Self> {
        Some(EngineApiVersion {
            major: u32::try_from(v.major).ok()?,
            minor: u32::try_from(v.minor).ok()?,
            patch: u32::try_from(v.patch).ok()?,
        })
    }
}

impl fmt::Display for EngineApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `Graph.id`: a stable logical identity. Any 128-bit value is preserved, not only UUID v4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphId(pub [u8; 16]);

impl GraphId {
    /// Parses the canonical 8-4-4-4-12 hex form the JSON writer uses.
    pub fn parse(s: &str) -> Option<GraphId> {
        let groups: Vec<&str> = s.split('-').collect();
        let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        if lens != [8, 4, 4, 4, 12] {
            return None;
        }
        let hex: String = groups.concat();
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2)?;
            if !pair.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(GraphId(bytes))
    }
}

impl fmt::Display for GraphId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// What a node computes. SDPA forward and backward and pointwise nodes are read; other upstream
/// members are kept by tag so the plugin can decline them (schema.md §11: unknown ⇒ not
/// applicable, never an error).
// Graphs hold a handful of nodes; an unboxed SDPA variant keeps construction and matching
// plain for the plugin, at a few hundred bytes per node.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Default)]
pub enum NodeAttributes {
    #[default]
    None,
    Sdpa(SdpaAttributes),
    Pointwise(PointwiseAttributes),
    SdpaBackward(SdpaBackwardAttributes),
    /// Any member other than those above, including tags newer than this schema.
    /// `name` is the upstream member name, or `"<unknown tag N>"` beyond tag 23.
    Unsupported {
        tag: u8,
        name: String,
    },
}

/// Names of the `NodeAttributes` union members, indexed by tag (upstream order, schema.md §3).
pub const NODE_ATTRIBUTE_NAMES: [&str; 24] = [
    "NONE",
    "BatchnormInferenceAttributes",
    "PointwiseAttributes",
    "BatchnormBackwardAttributes",
    "BatchnormAttributes",
    "ConvolutionFwdAttributes",
    "ConvolutionBwdAttributes",
    "ConvolutionWrwAttributes",
    "BatchnormInferenceAttributesVarianceExt",
    "MatmulAttributes",
    "RMSNormAttributes",
    "LayernormAttributes",
    "SdpaAttributes",
    "BlockScaleDequantizeAttributes",
    "BlockScaleQuantizeAttributes",
    "SdpaBackwardAttributes",
    "CustomOpAttributes",
    "RMSNormBackwardAttributes",
    "ReductionAttributes",
    "ResampleFwdAttributes",
    "LayernormBackwardAttributes",
    "ResampleBwdAttributes",
    "MoeGroupedMatmulAttributes",
    "MoeGroupedMatmulBwdAttributes",
];

/// Union tag of `SdpaAttributes`.
pub const SDPA_ATTRIBUTES_TAG: u8 = 12;

/// Union tag of `PointwiseAttributes`.
pub const POINTWISE_ATTRIBUTES_TAG: u8 = 2;

/// Union tag of `SdpaBackwardAttributes`.
pub const SDPA_BACKWARD_ATTRIBUTES_TAG: u8 = 15;

impl NodeAttributes {
    /// The member for a tag that is not SDPA or NONE, named as upstream names it.
    pub fn unsupported(tag: u8) -> NodeAttributes {
        let name = NODE_ATTRIBUTE_NAMES
            .get(usize::from(tag))
            .map_or_else(|| format!("<unknown tag {tag}>"), |n| (*n).to_string());
        NodeAttributes::Unsupported { tag, name }
    }

    pub fn tag(&self) -> u8 {
        match self {
            NodeAttributes::None => 0,
            NodeAttributes::Sdpa(_) => SDPA_ATTRIBUTES_TAG,
            NodeAttributes::Pointwise(_) => POINTWISE_ATTRIBUTES_TAG,
            NodeAttributes::SdpaBackward(_) => SDPA_BACKWARD_ATTRIBUTES_TAG,
            NodeAttributes::Unsupported { tag, .. } => *tag,
        }
    }

    pub fn as_sdpa(&self) -> Option<&SdpaAttributes> {
        match self {
            NodeAttributes::Sdpa(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_pointwise(&self) -> Option<&PointwiseAttributes> {
        match self {
            NodeAttributes::Pointwise(p) => Some(p),
            _ => None,
        }
    }

    /// The tensors the node reads, as (field, uid); `None` for members whose fields the
    /// project does not read (their connectivity is unknown).
    pub fn inputs(&self) -> Option<Vec<(&'static str, i64)>> {
        match self {
            NodeAttributes::Sdpa(s) => Some(s.inputs()),
            NodeAttributes::Pointwise(p) => Some(p.inputs()),
            NodeAttributes::SdpaBackward(s) => Some(s.inputs()),
            NodeAttributes::None | NodeAttributes::Unsupported { .. } => None,
        }
    }

    /// The tensors the node writes, as (field, uid); `None` as for [`NodeAttributes::inputs`].
    pub fn outputs(&self) -> Option<Vec<(&'static str, i64)>> {
        match self {
            NodeAttributes::Sdpa(s) => Some(s.outputs()),
            NodeAttributes::Pointwise(p) => Some(vec![("out_0_tensor_uid", p.out_0_tensor_uid)]),
            NodeAttributes::SdpaBackward(s) => Some(s.outputs()),
            NodeAttributes::None | NodeAttributes::Unsupported { .. } => None,
        }
    }

    pub fn as_sdpa_backward(&self) -> Option<&SdpaBackwardAttributes> {
        match self {
            NodeAttributes::SdpaBackward(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    pub name: String,
    pub compute_data_type: super::DataType,
    pub attributes: NodeAttributes,
}

impl Node {
    pub fn sdpa(name: impl Into<String>, attributes: SdpaAttributes) -> Node {
        Node {
            name: name.into(),
            compute_data_type: super::DataType::Float,
            attributes: NodeAttributes::Sdpa(attributes),
        }
    }

    pub fn pointwise(name: impl Into<String>, attributes: PointwiseAttributes) -> Node {
        Node {
            name: name.into(),
            compute_data_type: super::DataType::Float,
            attributes: NodeAttributes::Pointwise(attributes),
        }
    }

    pub fn sdpa_backward(name: impl Into<String>, attributes: SdpaBackwardAttributes) -> Node {
        Node {
            name: name.into(),
            compute_data_type: super::DataType::Float,
            attributes: NodeAttributes::SdpaBackward(attributes),
        }
    }

    pub fn set_compute_data_type(mut self, data_type: super::DataType) -> Node {
        self.compute_data_type = data_type;
        self
    }
}

/// An operation graph: tensors plus nodes in topological order (upstream's contract; this
/// crate does not re-sort).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    pub name: String,
    /// Graph-level types are defaults only; nodes and tensors carry their own.
    pub compute_data_type: super::DataType,
    pub intermediate_data_type: super::DataType,
    pub io_data_type: super::DataType,
    pub tensors: Vec<TensorAttributes>,
    pub nodes: Vec<Node>,
    pub preferred_engine_id: Option<i64>,
    pub is_override_shape_enabled: bool,
    /// The producer's stamp; absent reads as 1.0.0 (see `version::graph_stamp`).
    pub min_required_engine_api_version: Option<EngineApiVersion>,
    pub id: Option<GraphId>,
    /// Project addition at index 10. Upstream buffers lack it; see [`Graph::is_ragged`].
    pub is_ragged_tensor_enabled: bool,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    pub fn add_tensor(mut self, tensor: TensorAttributes) -> Graph {
        self.tensors.push(tensor);
        self
    }

    pub fn add_node(mut self, node: Node) -> Graph {
        self.nodes.push(node);
        self
    }

    pub fn set_data_types(
        mut self,
        io: super::DataType,
        intermediate: super::DataType,
        compute: super::DataType,
    ) -> Graph {
        self.io_data_type = io;
        self.intermediate_data_type = intermediate;
        self.compute_data_type = compute;
        self
    }

    /// The tensor with this uid (the first one, should uids repeat in an invalid graph).
    pub fn tensor(&self, uid: i64) -> Option<&TensorAttributes> {
        self.tensors.iter().find(|t| t.uid == uid)
    }

    /// The offset aux a ragged tensor points at, if the tensor is ragged and the aux exists.
    pub fn ragged_offset_tensor(&self, tensor: &TensorAttributes) -> Option<&TensorAttributes> {
        tensor
            .ragged_offset_tensor_uid
            .and_then(|aux_uid| self.tensor(aux_uid))
    }

    /// Project rule (versioning.md §6): the flag OR any tensor with a ragged offset. The second
    /// clause covers graphs written by upstream hipDNN, which has no flag.
    pub fn is_ragged(&self) -> bool {
        self.is_ragged_tensor_enabled || self.tensors.iter().any(TensorAttributes::is_ragged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_id_round_trips_canonical_text() {
        let text = "0123abcd-4567-89ef-0a1b-2c3d4e5f6071";
        let id = GraphId::parse(text);
        assert_eq!(id.map(|i| i.to_string()), Some(text.to_string()));
        assert_eq!(id.map(|i| i.0[0]), Some(0x01));
    }

    #[test]
    fn graph_id_rejects_malformed_text() {
        assert_eq!(GraphId::parse("0123abcd456789ef0a1b2c3d4e5f6071"), None);
        assert_eq!(GraphId::parse("0123abcg-4567-89ef-0a1b-2c3d4e5f6071"), None);
        assert_eq!(GraphId::parse("+123abcd-4567-89ef-0a1b-2c3d4e5f6071"), None);
        assert_eq!(GraphId::parse(""), None);
    }

    #[test]
    fn unsupported_nodes_keep_upstream_names() {
        assert_eq!(
            NodeAttributes::unsupported(9),
            NodeAttributes::Unsupported {
                tag: 9,
                name: "MatmulAttributes".into()
            }
        );
        assert_eq!(
            NodeAttributes::unsupported(200),
            NodeAttributes::Unsupported {
                tag: 200,
                name: "<unknown tag 200>".into()
            }
        );
        assert_eq!(
            NODE_ATTRIBUTE_NAMES[usize::from(SDPA_ATTRIBUTES_TAG)],
            "SdpaAttributes"
        );
    }

    #[test]
    fn raggedness_is_flag_or_tensor() {
        let dense = Graph::new("g").add_tensor(TensorAttributes::new().set_uid(1));
        assert!(!dense.is_ragged());
        let flagged = Graph {
            is_ragged_tensor_enabled: true,
            ..dense.clone()
        };
        assert!(flagged.is_ragged());
        let tensor_ragged =
            dense.add_tensor(TensorAttributes::new().set_uid(2).set_ragged_offset_uid(1));
        assert!(tensor_ragged.is_ragged());
    }

    #[test]
    fn ragged_offset_tensor_follows_the_uid() {
        let aux = TensorAttributes::new().set_uid(7).set_name("aux");
        let q = TensorAttributes::new().set_uid(1).set_ragged_offset(&aux);
        let dangling = TensorAttributes::new().set_uid(2).set_ragged_offset_uid(99);
        let g = Graph::new("g")
            .add_tensor(aux)
            .add_tensor(q.clone())
            .add_tensor(dangling.clone());
        assert_eq!(
            g.ragged_offset_tensor(&q).map(|t| t.name.as_str()),
            Some("aux")
        );
        assert_eq!(g.ragged_offset_tensor(&dangling), None);
        assert_eq!(g.ragged_offset_tensor(&g.tensors[0]), None);
    }
}
