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

/// Up to this many tensors, uniqueness is checked pairwise instead of through a hash map.
const SMALL_GRAPH_TENSORS: usize = 32;

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
        // A single-node graph has a dozen tensors: comparing pairs beats hashing them into a
        // fresh map on every GetApplicableEngineIds (issue 14 item 5). Same first duplicate.
        if self.tensors.len() <= SMALL_GRAPH_TENSORS {
            for (index, tensor) in self.tensors.iter().enumerate() {
                let earlier = &self.tensors[..index];
                if let Some(first_index) = earlier.iter().position(|t| t.uid == tensor.uid) {
                    return Err(ValidationError::DuplicateUid {
                        uid: tensor.uid,
                        first_index,
                        second_index: index,
                    });
                }
            }
            return Ok(());
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TensorAttributes;

    fn graph_with_uids(uids: &[i64]) -> Graph {
        uids.iter().fold(Graph::new("uids"), |g, &uid| {
            g.add_tensor(TensorAttributes::new().set_uid(uid))
        })
    }

    /// Pairwise for small graphs, hashed for large ones: both name the same first repeat.
    #[test]
    fn the_first_repeated_uid_is_named_with_both_indices_at_any_size() {
        let small = graph_with_uids(&[1, 2, 3, 2, 1]).check_unique_uids();
        assert!(matches!(
            small,
            Err(ValidationError::DuplicateUid {
                uid: 2,
                first_index: 1,
                second_index: 3
            })
        ));
        let mut uids: Vec<i64> = (0..40).collect();
        uids[35] = 3;
        uids[38] = 1;
        let large = graph_with_uids(&uids).check_unique_uids();
        assert!(matches!(
            large,
            Err(ValidationError::DuplicateUid {
                uid: 3,
                first_index: 3,
                second_index: 35
            })
        ));
        assert!(graph_with_uids(&[4, 5, 6]).check_unique_uids().is_ok());
    }
}
