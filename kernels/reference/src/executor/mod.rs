//! The CPU reference graph executor (RFC §3.5, §4.9, §4.10.1): walks a multi-node graph in
//! topological order, allocates the virtual intermediates the caller did not bind, runs each
//! node's plan on the CPU and frees each intermediate as soon as its last consumer has run.
//!
//! Flow of [`execute`]: check the walk (every uid known, every read preceded by its write or a
//! binding) → the virtual-tensor pass ([`create_tensor_from_attribute_in`], sentinel fill,
//! patch into the pack) → resolve the offset auxes once → per node: views over the pack,
//! the plan (SDPA: [`crate::sdpa_forward`]; pointwise: broadcasting / per-batch ragged), free.
//!
//! The graph is the executor's own description ([`ExecGraph`]); the plugin maps hipDNN's graph
//! onto it, so this crate stays free of wire formats.

mod error;
mod pointwise;
mod variant_pack;
mod views;

pub use error::ExecutorError;
pub use ragged_core::graph::{
    ExecGraph, ExecNode, NodeOp, PointwiseNode, PointwiseOp, RaggedDesc, SdpaNode, TensorDesc,
};
pub use variant_pack::{
    Binding, TensorMap, VariantPack, create_tensor_from_attribute, create_tensor_from_attribute_in,
};

use std::collections::{HashMap, HashSet};

use pointwise::{Operand, Site};
use variant_pack::Slot;
use views::{Auxes, In};

/// What a run did with its intermediates, for callers that account memory and for tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecutionReport {
    /// Virtual tensors the pass allocated, in graph order.
    pub allocated: Vec<i64>,
    /// `(node index, uid)`: each intermediate, freed right after that node ran.
    pub freed: Vec<(usize, i64)>,
}

/// Runs `graph` with the caller's bindings. Outputs are written in place; on an error found
/// before the walk (unknown uid, order, binding, aux) nothing is written.
pub fn execute(
    graph: &ExecGraph,
    mut pack: VariantPack<'_>,
) -> Result<ExecutionReport, ExecutorError> {
    let tensor_map: TensorMap<'_> = graph.tensors.iter().map(|t| (t.uid, t)).collect();
    let last_use = check_walk(graph, &pack, &tensor_map)?;
    let allocated =
        variant_pack::populate_missing_virtual_tensors(&mut pack, &graph.tensors, &tensor_map)?;
    let auxes = Auxes::resolve(&graph.tensors, &pack)?;
    let mut freed = Vec::new();
    for (index, node) in graph.nodes.iter().enumerate() {
        let site = Site {
            node_index: index,
            node: &node.name,
        };
        run_node(&site, &node.op, &mut pack, &tensor_map, &auxes)?;
        for (&uid, &last) in &last_use {
            if last == index && matches!(pack.slots.get(&uid), Some(Slot::Virtual(_))) {
                pack.slots.remove(&uid);
                freed.push((index, uid));
            }
        }
    }
    freed.sort_unstable();
    Ok(ExecutionReport { allocated, freed })
}

/// Checks the walk before anything runs; returns, per virtual uid, the index of the last node
/// that touches it (its last reader, or its writer if nothing reads it).
fn check_walk(
    graph: &ExecGraph,
    pack: &VariantPack<'_>,
    tensor_map: &TensorMap<'_>,
) -> Result<HashMap<i64, usize>, ExecutorError> {
    let mut written: HashSet<i64> = HashSet::new();
    let mut last_use = HashMap::new();
    for (index, node) in graph.nodes.iter().enumerate() {
        let unknown = |uid| ExecutorError::UnknownTensor {
            node_index: index,
            node: node.name.clone(),
            uid,
        };
        for uid in node.op.inputs() {
            let desc = tensor_map.get(&uid).ok_or_else(|| unknown(uid))?;
            let available = if desc.is_virtual {
                written.contains(&uid)
            } else {
                desc.value.is_some() || pack.contains(uid)
            };
            if !available {
                return Err(if desc.is_virtual {
                    ExecutorError::NotYetWritten {
                        node_index: index,
                        node: node.name.clone(),
                        uid,
                    }
                } else {
                    ExecutorError::Unbound { uid }
                });
            }
            if desc.is_virtual {
                last_use.insert(uid, index);
            }
        }
        for uid in node.op.outputs() {
            let desc = tensor_map.get(&uid).ok_or_else(|| unknown(uid))?;
            if !desc.is_virtual && !pack.contains(uid) {
                return Err(ExecutorError::Unbound { uid });
            }
            if desc.is_virtual {
                last_use.entry(uid).or_insert(index);
            }
            written.insert(uid);
        }
    }
    Ok(last_use)
}

fn run_node(
    site: &Site<'_>,
    op: &NodeOp,
    pack: &mut VariantPack<'_>,
    tensor_map: &TensorMap<'_>,
    auxes: &Auxes,
) -> Result<(), ExecutorError> {
    // Outputs leave the pack while the node runs, so inputs can be borrowed beside them.
    let mut taken = Vec::new();
    for uid in op.outputs() {
        let slot = pack
            .slots
            .remove(&uid)
            .ok_or(ExecutorError::Unbound { uid })?;
        taken.push((uid, slot));
    }
    let result = run_with_outputs(site, op, pack, tensor_map, auxes, &mut taken);
    pack.slots.extend(taken);
    result
}

fn desc<'g>(tensor_map: &TensorMap<'g>, uid: i64) -> Result<&'g TensorDesc, ExecutorError> {
    tensor_map
        .get(&uid)
        .copied()
        .ok_or(ExecutorError::Unbound { uid })
}

fn input<'s>(
    pack: &'s VariantPack<'_>,
    tensor_map: &TensorMap<'_>,
    auxes: &Auxes,
    uid: i64,
) -> Result<In<'s>, ExecutorError> {
    let slot = pack.slots.get(&uid).ok_or(ExecutorError::Unbound { uid })?;
    views::input(desc(tensor_map, uid)?, slot, auxes)
}

fn run_with_outputs(
    site: &Site<'_>,
    op: &NodeOp,
    pack: &VariantPack<'_>,
    tensor_map: &TensorMap<'_>,
    auxes: &Auxes,
    outputs: &mut [(i64, Slot<'_>)],
) -> Result<(), ExecutorError> {
    match op {
        NodeOp::Pointwise(p) => {
            let mut held = Vec::new();
            for uid in std::iter::once(p.in_0).chain(p.in_1) {
                let d = desc(tensor_map, uid)?;
                let view = match d.value {
                    Some(_) => None,
                    None => Some(input(pack, tensor_map, auxes, uid)?),
                };
                held.push((d, view));
            }
            let operands: Vec<Operand<'_>> = held
                .iter()
                .map(|(d, view)| match (view, d.value) {
                    (Some(v), _) => Operand::Tensor(v.tensor(), d),
                    (None, value) => Operand::Constant(value.unwrap_or(0.0) as f32),
                })
                .collect();
            let [(uid, slot)] = outputs else {
                return Err(ExecutorError::Unbound { uid: p.out_0 });
            };
            let mut out = views::output(desc(tensor_map, *uid)?, slot, auxes)?;
            pointwise::run(site, p.op, &operands, *uid, out.tensor())
        }
        NodeOp::Sdpa(s) => {
            let q = input(pack, tensor_map, auxes, s.q)?;
            let k = input(pack, tensor_map, auxes, s.k)?;
            let v = input(pack, tensor_map, auxes, s.v)?;
            let sq = s
                .seq_len_q
                .map(|uid| input(pack, tensor_map, auxes, uid))
                .transpose()?;
            let skv = s
                .seq_len_kv
                .map(|uid| input(pack, tensor_map, auxes, uid))
                .transpose()?;
            let (first, rest) = outputs.split_at_mut(1);
            let (o_uid, o_slot) = &mut first[0];
            let mut o = views::output(desc(tensor_map, *o_uid)?, o_slot, auxes)?;
            let mut lse = match rest.first_mut() {
                Some((uid, slot)) => Some(views::output(desc(tensor_map, *uid)?, slot, auxes)?),
                None => None,
            };
            crate::sdpa_forward(
                q.tensor(),
                k.tensor(),
                v.tensor(),
                o.tensor(),
                lse.as_mut().map(|l| l.tensor()),
                sq.as_ref().map(In::tensor),
                skv.as_ref().map(In::tensor),
                &s.params,
            )
            .map_err(|source| ExecutorError::Node {
                node_index: site.node_index,
                node: site.node.to_string(),
                source,
            })
        }
    }
}
