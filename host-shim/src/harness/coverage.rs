//! Which positions of each node's outputs a correct run of a multi-node graph writes, for
//! coverage validation (RFC §4.11.4 and its §7.3 caveat) of every output, intermediate or not.
//!
//! Walked in node order: an SDPA node writes the rows below `Lq(b)` of O and LSE
//! ([`SdpaRoles::written_positions`]); a pointwise node writes every addressable element of its
//! output (a ragged one batch by batch over its extent, so padding rows stay unwritten), and an
//! element whose broadcast input position was never written by the node that produced it is
//! *undefined*: any value is right there, so validation skips it.

use std::collections::{BTreeSet, HashMap};

use ragged_core::tensor::{Tensor, TensorExt};
use ragged_schema::model::{Graph, NodeAttributes};

use super::bundle::Bundle;
use super::sdpa_op::SdpaRoles;
use crate::host_error::HostError;

/// One node output's positions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Coverage {
    pub written: BTreeSet<usize>,
    pub undefined: BTreeSet<usize>,
}

/// The coverage of every tensor some node of `graph` writes, by uid; `bundle` holds the
/// tensors (real and virtual) with their auxes.
pub fn graph_coverage(graph: &Graph, bundle: &Bundle) -> Result<HashMap<i64, Coverage>, HostError> {
    let mut out: HashMap<i64, Coverage> = HashMap::new();
    for node in &graph.nodes {
        match &node.attributes {
            NodeAttributes::Sdpa(a) => {
                let roles = SdpaRoles::of_node(a);
                for &uid in &roles.outputs {
                    let written = roles.written_positions(uid, bundle)?;
                    out.insert(
                        uid,
                        Coverage {
                            written,
                            undefined: BTreeSet::new(),
                        },
                    );
                }
            }
            NodeAttributes::Pointwise(p) => {
                let inputs: Vec<i64> = std::iter::once(p.in_0_tensor_uid)
                    .chain(p.in_1_tensor_uid)
                    .filter(|&uid| graph.tensor(uid).is_some_and(|t| t.value.is_none()))
                    .collect();
                let coverage = pointwise(bundle, &inputs, p.out_0_tensor_uid, &out)?;
                out.insert(p.out_0_tensor_uid, coverage);
            }
            _ => {
                return Err(HostError::Harness(format!(
                    "node '{}': coverage is known for SDPA forward and pointwise nodes only",
                    node.name
                )));
            }
        }
    }
    Ok(out)
}

/// The index of an input read for output index `index` (size-1 axes, or a one-element input,
/// broadcast), `None` when the dims do not broadcast.
fn broadcast_index(dims: &[i64], out_dims: &[i64], index: &[i64]) -> Option<Vec<i64>> {
    if dims == out_dims {
        return Some(index.to_vec());
    }
    if dims.iter().all(|&d| d == 1) {
        return Some(vec![0; dims.len()]);
    }
    if dims.len() != out_dims.len() || dims.iter().zip(out_dims).any(|(&d, &o)| d != o && d != 1) {
        return None;
    }
    Some(
        index
            .iter()
            .zip(dims)
            .map(|(&i, &d)| if d == 1 { 0 } else { i })
            .collect(),
    )
}

fn pointwise(
    bundle: &Bundle,
    inputs: &[i64],
    out_uid: i64,
    produced: &HashMap<i64, Coverage>,
) -> Result<Coverage, HostError> {
    let out = bundle.get(out_uid)?;
    let out_dims = out.dims().to_vec();
    let operands = inputs
        .iter()
        .map(|&uid| Ok((uid, bundle.get(uid)?, produced.get(&uid))))
        .collect::<Result<Vec<(i64, &dyn Tensor, Option<&Coverage>)>, HostError>>()?;
    let mut coverage = Coverage::default();
    for index in out.indices() {
        let position = out.get_index(&index).map_err(|e| {
            HostError::Harness(format!("output uid {out_uid} index {index:?}: {e}"))
        })?;
        let mut defined = true;
        for (uid, t, upstream) in &operands {
            let at = broadcast_index(t.dims(), &out_dims, &index).ok_or_else(|| {
                HostError::Harness(format!(
                    "tensor uid {uid} dims {:?} do not broadcast to output uid {out_uid} dims {out_dims:?}",
                    t.dims()
                ))
            })?;
            let read = t
                .get_index(&at)
                .map_err(|e| HostError::Harness(format!("tensor uid {uid} index {at:?}: {e}")))?;
            if upstream.is_some_and(|c| !c.written.contains(&read)) {
                defined = false;
            }
        }
        if defined {
            coverage.written.insert(position);
        } else {
            coverage.undefined.insert(position);
        }
    }
    Ok(coverage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_the_executors_three_forms() {
        let out = [2, 3, 4, 1];
        assert_eq!(
            broadcast_index(&[2, 3, 4, 1], &out, &[1, 2, 3, 0]),
            Some(vec![1, 2, 3, 0])
        );
        assert_eq!(
            broadcast_index(&[1, 1], &out, &[1, 2, 3, 0]),
            Some(vec![0, 0])
        );
        assert_eq!(
            broadcast_index(&[1, 3, 1, 1], &out, &[1, 2, 3, 0]),
            Some(vec![0, 2, 0, 0])
        );
        assert_eq!(broadcast_index(&[2, 2, 4, 1], &out, &[1, 1, 3, 0]), None);
    }
}
