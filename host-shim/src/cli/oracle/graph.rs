//! A multi-node graph in float64: nodes in their (validated) topological order, each evaluated
//! on what the earlier ones stored. Every node's values are rounded into its output's element
//! type before the next node reads them — an intermediate's declared type is part of the
//! graph's meaning — and stored into the bundle's buffers (virtual intermediates included),
//! where [`hipdnn_shim::harness::GraphHarness::validate`] compares them with the engine's.

use std::collections::{HashMap, HashSet};

use hipdnn_shim::harness::Bundle;
use ragged_schema::model::{Graph, NodeAttributes};

use super::{Writes, evaluate_sdpa, pointwise, store};

/// Evaluates every node of `graph` on `bundle`'s inputs and stores each output; returns the
/// writes, node by node.
pub fn evaluate_graph(graph: &Graph, bundle: &mut Bundle) -> Result<Vec<Writes>, String> {
    let mut produced: HashMap<i64, HashSet<usize>> = HashMap::new();
    let mut all = Vec::new();
    for node in &graph.nodes {
        let writes = match &node.attributes {
            NodeAttributes::Sdpa(a) => evaluate_sdpa(graph, bundle, a)?,
            NodeAttributes::Pointwise(p) => {
                vec![pointwise::evaluate(graph, bundle, p, &produced)?]
            }
            _ => {
                return Err(format!(
                    "node '{}' (union tag {}) is not modelled by the oracle",
                    node.name,
                    node.attributes.tag()
                ));
            }
        };
        store(bundle, &writes).map_err(|e| format!("node '{}': {e}", node.name))?;
        for w in &writes {
            produced.insert(w.uid, w.values.iter().map(|&(p, _)| p).collect());
        }
        all.extend(writes);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::harness::GraphHarness;
    use hipdnn_shim::multi_node_graphs::{FACTOR, cases, uid};
    use ragged_core::HostData;

    use super::*;

    fn harness(name: &str) -> GraphHarness {
        let case = cases()
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        let graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        let pre = case.pre_supplied().unwrap_or_else(|e| panic!("{e}"));
        GraphHarness::new(graph, &pre, 11).unwrap_or_else(|e| panic!("{e}"))
    }

    fn f32s(h: &GraphHarness, uid: i64) -> Vec<f32> {
        match h.reference.get(uid).map(|t| t.host_data()) {
            Ok(HostData::F32(s)) => s.to_vec(),
            other => panic!("uid {uid}: {other:?}"),
        }
    }

    /// Y = O · 0.5 + R at every written position, with O the oracle's own SDPA values (f32
    /// case, so rounding is far below the check).
    #[test]
    fn the_scale_then_residual_chain_composes_the_nodes_values() {
        let mut h = harness("sdpa_scale_add_f32_causal");
        let writes = evaluate_graph(&h.graph, &mut h.reference).unwrap_or_else(|e| panic!("{e}"));
        let o: HashMap<usize, f64> = writes
            .iter()
            .find(|w| w.uid == hipdnn_shim::graphs::uid::O)
            .map(|w| w.values.iter().copied().collect())
            .unwrap_or_default();
        let y = writes
            .iter()
            .find(|w| w.uid == uid::Y)
            .unwrap_or_else(|| panic!("Y written"));
        let r = f32s(&h, uid::RESIDUAL);
        assert_eq!(y.values.len(), o.len());
        assert!(y.values.len() > 100);
        for &(p, v) in &y.values {
            let scaled = f64::from(o[&p] as f32 * FACTOR);
            let want = scaled + f64::from(r[p]);
            assert!((v - want).abs() < 1e-6, "position {p}: {v} vs {want}");
        }
    }

    /// The oracle and kernels' graph executor agree on every chain, both dims orders.
    #[test]
    fn agrees_with_the_cpu_graph_executor_on_every_case() {
        for case in cases() {
            let mut h = harness(&case.name);
            h.run_reference().unwrap_or_else(|e| panic!("{e}"));
            std::mem::swap(&mut h.reference, &mut h.engine);
            evaluate_graph(&h.graph, &mut h.reference).unwrap_or_else(|e| panic!("{e}"));
            let comparisons = h
                .validate(hipdnn_shim::harness::ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                comparisons.iter().all(|c| c.passed() && c.compared > 0),
                "{}: {comparisons:?}",
                case.name
            );
        }
    }
}
