//! Graph-level rules upstream states for every serialized graph (graph.fbs: "sorted in
//! topological order, has no cycles, and is fully connected (no orphan nodes)"), read through
//! the inputs and outputs of the nodes whose fields the project knows (SDPA, pointwise).
//!
//! Nodes of other members have unknown connectivity; they are skipped by the order checks, and
//! a graph holding one is not judged for orphans (the plugin declines it on its type anyway).

use crate::error::ValidationError;
use crate::model::{Graph, Node};

/// A node's known reads and writes: (field, uid) pairs.
struct Io<'a> {
    node: &'a Node,
    inputs: Vec<(&'static str, i64)>,
    outputs: Vec<(&'static str, i64)>,
}

pub(super) fn check(graph: &Graph) -> Result<(), ValidationError> {
    let io: Vec<Option<Io<'_>>> = graph
        .nodes
        .iter()
        .map(|node| {
            Some(Io {
                node,
                inputs: node.attributes.inputs()?,
                outputs: node.attributes.outputs()?,
            })
        })
        .collect();
    check_single_writer(&io)?;
    for (index, entry) in io.iter().enumerate() {
        let Some(entry) = entry else { continue };
        check_reads(graph, index, entry, &io)?;
    }
    check_connected(&io)
}

fn missing(index: usize, node: &Node, field: &'static str, uid: i64) -> ValidationError {
    ValidationError::NodeTensorMissing {
        node_index: index,
        node_name: node.name.clone(),
        field,
        uid,
    }
}

/// The index of the first node that writes `uid`. A scan rather than a map: graphs hold a
/// handful of nodes, and a map was a heap allocation on every GetApplicableEngineIds.
fn producer(io: &[Option<Io<'_>>], uid: i64) -> Option<usize> {
    io.iter().position(|entry| {
        entry
            .as_ref()
            .is_some_and(|e| e.outputs.iter().any(|&(_, u)| u == uid))
    })
}

/// A tensor written by two nodes has no single value.
fn check_single_writer(io: &[Option<Io<'_>>]) -> Result<(), ValidationError> {
    for (index, entry) in io.iter().enumerate() {
        let Some(entry) = entry else { continue };
        for &(field, uid) in &entry.outputs {
            if let Some(first) = producer(io, uid)
                && first != index
            {
                return Err(ValidationError::TensorWrittenTwice {
                    uid,
                    first_node: first,
                    node_index: index,
                    node_name: entry.node.name.clone(),
                    field,
                });
            }
        }
    }
    Ok(())
}

/// Every read is of a tensor in the graph; a tensor another node writes is written by an
/// earlier node (otherwise the list is out of order or cyclic); a virtual tensor is written by
/// a node.
fn check_reads(
    graph: &Graph,
    index: usize,
    entry: &Io<'_>,
    io: &[Option<Io<'_>>],
) -> Result<(), ValidationError> {
    for &(field, uid) in entry.outputs.iter() {
        if graph.tensor(uid).is_none() {
            return Err(missing(index, entry.node, field, uid));
        }
    }
    for &(field, uid) in &entry.inputs {
        let Some(tensor) = graph.tensor(uid) else {
            return Err(missing(index, entry.node, field, uid));
        };
        match producer(io, uid) {
            // A node reading what it writes itself is left to that node's own rules (the
            // plugin names the SDPA field); across nodes it is an order violation or a cycle.
            Some(producer) if producer > index => {
                return Err(ValidationError::NodeOrder {
                    node_index: index,
                    node_name: entry.node.name.clone(),
                    field,
                    uid,
                    producer,
                });
            }
            None if tensor.is_virtual => {
                return Err(ValidationError::VirtualTensorUnwritten {
                    node_index: index,
                    node_name: entry.node.name.clone(),
                    field,
                    uid,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// With more than one node, every node shares a tensor with the rest, transitively.
fn check_connected(io: &[Option<Io<'_>>]) -> Result<(), ValidationError> {
    if io.len() < 2 || io.iter().any(Option::is_none) {
        return Ok(());
    }
    let known: Vec<&Io<'_>> = io.iter().flatten().collect();
    let uids = |e: &Io<'_>| -> Vec<i64> {
        e.inputs
            .iter()
            .chain(e.outputs.iter())
            .map(|&(_, uid)| uid)
            .collect()
    };
    // Grow the component of node 0 until it stops changing (graphs hold a handful of nodes).
    let mut reached = vec![false; known.len()];
    reached[0] = true;
    let mut touched: Vec<i64> = uids(known[0]);
    let mut changed = true;
    while changed {
        changed = false;
        for (i, e) in known.iter().enumerate() {
            if !reached[i] && uids(e).iter().any(|u| touched.contains(u)) {
                reached[i] = true;
                touched.extend(uids(e));
                changed = true;
            }
        }
    }
    match reached.iter().position(|r| !r) {
        Some(i) => Err(ValidationError::OrphanNode {
            node_index: i,
            node_name: known[i].node.name.clone(),
            uids: uids(known[i]),
        }),
        None => Ok(()),
    }
}
