//! `Graph::validate()`: the frontend rules of RFC §4.2, the SDPA node rules, and the graph-level
//! rules (topological order, connectivity, RFC §4.9's real offset aux).
//!
//! Validation stops at the first violation: a graph is either usable or declined, and one
//! precise message is more useful in a log than a cascade of consequences of the same mistake.

mod ragged_offset;
mod sdpa;
mod sdpa_backward;
mod topology;

use std::collections::HashMap;

use crate::error::{SchemaError, ValidationError};
use crate::model::{Graph, NodeAttributes};

impl Graph {
    /// Checks uids, ragged offsets, alignments, every node's tensor references and shapes, and
    /// the order and connectivity of the nodes.
    pub fn validate(&self) -> Result<(), SchemaError> {
        self.check_unique_uids()?;
        for tensor in &self.tensors {
            ragged_offset::check_tensor(self, tensor)?;
        }
        for (node_index, node) in self.nodes.iter().enumerate() {
            match &node.attributes {
                NodeAttributes::Sdpa(attrs) => {
                    sdpa::check_node(self, node_index, &node.name, attrs)?;
                }
                NodeAttributes::SdpaBackward(attrs) => {
                    sdpa_backward::check_node(self, node_index, &node.name, attrs)?;
                }
                _ => {}
            }
        }
        topology::check(self)?;
        Ok(())
    }

    fn check_unique_uids(&self) -> Result<(), ValidationError> {
        let mut seen: HashMap<i64, usize> = HashMap::with_capacity(self.tensors.len());
        for (index, tensor) in self.tensors.iter().enumerate() {
            if let Some(&first_index) = seen.get(&tensor.uid) {
                return Err(ValidationError::DuplicateUid {
                    uid: tensor.uid,
                    first_index,
                    second_index: index,
                });
            }
            seen.insert(tensor.uid, index);
        }
        Ok(())
    }
}
