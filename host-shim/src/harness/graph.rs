//! The RFC §4.11 harness for multi-node graphs (SDPA and pointwise nodes joined by virtual
//! intermediates, RFC §4.9): the same two bundles, strict aux check and init as the single-node
//! [`super::Harness`], with kernels' CPU graph executor as the reference path.
//!
//! Virtual tensors live in each bundle's [`Bundle::virtuals`]: the reference path binds them to
//! the executor (which then writes into them instead of allocating its own, as RFC §4.10.1
//! allows for a virtual tensor already in the pack), so an intermediate can be inspected after
//! the run; the engine path never binds them — the engine allocates its intermediates, as a
//! backend's executor would.

use std::collections::BTreeSet;
use std::time::Instant;

use ragged_core::tensor::TensorMut;
use ragged_reference::executor::{self, ExecutionReport, VariantPack};
use ragged_schema::model::{EngineConfig, Graph, NodeAttributes};

use super::bundle::{Bundle, Entry, PreSuppliedInputs};
use super::coverage::{Coverage, graph_coverage};
use super::validate::{self, Comparison, Expectation, Tolerance, ValidationMode};
use super::{HostWorkspace, check_alignment, exec_graph};
use crate::host_error::HostError;
use crate::plugin::PluginHandle;

/// Whether `graph` needs this harness: more than one node, or a pointwise node.
pub fn is_multi_node(graph: &Graph) -> bool {
    graph.nodes.len() > 1
        || graph
            .nodes
            .iter()
            .any(|n| matches!(n.attributes, NodeAttributes::Pointwise(_)))
}

/// The real tensors some node of `graph` writes: the graph's outputs.
pub fn outputs_of(graph: &Graph) -> Result<BTreeSet<i64>, HostError> {
    let mut written = BTreeSet::new();
    for node in &graph.nodes {
        let outs = node.attributes.outputs().ok_or_else(|| {
            HostError::Harness(format!(
                "node '{}' has union tag {}, whose outputs the harness cannot know",
                node.name,
                node.attributes.tag()
            ))
        })?;
        written.extend(outs.into_iter().map(|(_, uid)| uid));
    }
    Ok(written
        .into_iter()
        .filter(|&uid| graph.tensor(uid).is_some_and(|t| !t.is_virtual))
        .collect())
}

pub struct GraphHarness {
    pub graph: Graph,
    /// Real tensors some node writes: what the caller binds as outputs and validation checks.
    pub outputs: BTreeSet<i64>,
    pub reference: Bundle,
    pub engine: Bundle,
}

impl GraphHarness {
    /// Strict aux check (virtual ragged tensors included), allocation and init of both bundles.
    pub fn new(
        graph: Graph,
        pre_supplied: &PreSuppliedInputs,
        seed: u64,
    ) -> Result<GraphHarness, HostError> {
        let outputs = outputs_of(&graph)?;
        let mut reference = Bundle::allocate(&graph, pre_supplied)?;
        let mut engine = Bundle::allocate(&graph, pre_supplied)?;
        reference.initialise(&outputs, seed);
        engine.initialise(&outputs, seed);
        Ok(GraphHarness {
            graph,
            outputs,
            reference,
            engine,
        })
    }

    /// Every tensor a node writes (outputs, then intermediates), for validation and display.
    pub fn written_tensors(&self) -> Vec<i64> {
        self.outputs
            .iter()
            .copied()
            .chain(self.reference.virtuals.keys().copied())
            .collect()
    }

    /// Kernels' CPU graph executor on the reference bundle.
    pub fn run_reference(&mut self) -> Result<ExecutionReport, HostError> {
        let graph = exec_graph::exec_graph(&self.graph, &self.reference)?;
        let mut pack = VariantPack::new();
        for (&uid, entry) in self.reference.entries.iter_mut() {
            pack = match entry {
                Entry::Owned(t) => {
                    let t: &mut dyn TensorMut = t.as_mut();
                    if self.outputs.contains(&uid) {
                        pack.bind_output(uid, t.host_data_mut())
                    } else {
                        let t: &dyn TensorMut = t;
                        pack.bind_input(uid, t.host_data())
                    }
                }
                Entry::Shared(t) => pack.bind_input(uid, t.host_data()),
            };
        }
        for (&uid, t) in self.reference.virtuals.iter_mut() {
            pack = pack.bind_output(uid, t.host_data_mut());
        }
        executor::execute(&graph, pack)
            .map_err(|e| HostError::Harness(format!("CPU graph executor failed: {e}")))
    }

    /// Runs `engine_id` of the plugin behind `handle` once on the engine bundle's host buffers;
    /// returns the execute call's time.
    pub fn run_engine(
        &mut self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
    ) -> Result<std::time::Duration, HostError> {
        let graph_bytes = ragged_schema::wire::encode_graph(&self.graph);
        let config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(engine_id));
        let context = handle.create_execution_context(&config, &graph_bytes)?;
        let mut workspace = HostWorkspace::for_context(&context)?;
        let pack = self.engine.host_pack();
        check_alignment(&self.graph, &pack)?;
        let start = Instant::now();
        // SAFETY: every pointer in `pack` addresses a host buffer of this harness's engine
        // bundle, allocated from the graph's own attributes (ragged ones sized
        // `ragged_offset[B]`), alive and unborrowed during the call; virtual tensors are not
        // bound; the workspace has the size the context reported.
        unsafe { context.execute(workspace.ptr(), &pack) }?;
        Ok(start.elapsed())
    }

    /// The positions each written tensor's correct run defines (from the reference bundle,
    /// whose auxes and seq_lens both bundles share).
    pub fn coverage(&self) -> Result<std::collections::HashMap<i64, Coverage>, HostError> {
        graph_coverage(&self.graph, &self.reference)
    }

    /// Compares every output of the engine bundle with the reference bundle; an SDPA node's
    /// LSE gets LSE tolerances, every other output its element type's.
    pub fn validate(&self, mode: ValidationMode) -> Result<Vec<Comparison>, HostError> {
        let coverage = self.coverage()?;
        let mut out = Vec::new();
        for &uid in &self.outputs {
            let c = coverage.get(&uid);
            let expect = Expectation {
                written: c.map(|c| &c.written),
                exact_zero: None,
                undefined: c.map(|c| &c.undefined),
            };
            let (reference, engine) = (&self.reference, &self.engine);
            out.push(validate::compare_bundles(
                uid,
                reference,
                engine,
                expect,
                mode,
                self.tolerance(uid)?,
            )?);
        }
        Ok(out)
    }

    fn tolerance(&self, uid: i64) -> Result<Tolerance, HostError> {
        for node in &self.graph.nodes {
            if let NodeAttributes::Sdpa(a) = &node.attributes
                && a.stats_tensor_uid == Some(uid)
            {
                let input = self.reference.get(a.q_tensor_uid)?.data_type();
                return Ok(Tolerance::for_lse(input));
            }
        }
        Ok(Tolerance::for_output(self.reference.get(uid)?.data_type()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::uid as sdpa_uid;
    use crate::multi_node_graphs::{cases, uid};
    use ragged_core::HostDataMut;

    fn harness(index: usize) -> GraphHarness {
        let case = cases().remove(index);
        let graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        let pre = case.pre_supplied().unwrap_or_else(|e| panic!("{e}"));
        GraphHarness::new(graph, &pre, 9).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The executor plays the engine too (both bundles), then coverage validation.
    fn executor_as_engine(h: &mut GraphHarness) -> Vec<Comparison> {
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        std::mem::swap(&mut h.reference, &mut h.engine);
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        h.validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn message<T>(r: Result<T, HostError>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn the_strict_check_covers_virtual_ragged_tensors() {
        let case = cases().remove(0);
        let pre = case.pre_supplied().unwrap_or_else(|e| panic!("{e}"));
        let mut graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        let aux = sdpa_uid::OFFSET_Q;
        for t in graph.tensors.iter_mut().filter(|t| t.uid == aux) {
            t.is_virtual = true;
        }
        let m = message(GraphHarness::new(graph, &pre, 1));
        assert!(m.starts_with("ragged_offset uid 5 (referenced by "), "{m}");
        assert!(
            m.contains("is virtual; an aux must be a real tensor"),
            "{m}"
        );

        let mut graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        for t in graph.tensors.iter_mut().filter(|t| t.uid == sdpa_uid::O) {
            t.ragged_offset_tensor_uid = Some(77);
        }
        let m = message(GraphHarness::new(graph, &pre, 1));
        assert_eq!(
            m,
            "ragged_offset uid 77 (referenced by virtual tensor uid 4 'o') is not a tensor of the graph"
        );

        let graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        let mut without = pre.clone();
        without.remove(&aux);
        let m = message(GraphHarness::new(graph, &without, 1));
        assert!(m.contains("is not in the pre-supplied inputs"), "{m}");
    }

    #[test]
    fn virtual_intermediates_are_sized_by_their_aux_and_stay_out_of_the_pack() {
        let mut h = harness(1); // sdpa_scale_add: O and the product are virtual
        assert_eq!(
            h.reference.virtuals.keys().copied().collect::<Vec<_>>(),
            vec![sdpa_uid::O, uid::SCALED]
        );
        // Q/O rows 3 + 0 + 5, 4 heads, D 16.
        let len = h.reference.get(uid::SCALED).map(|t| t.host_data().len());
        assert_eq!(len.ok(), Some(8 * 4 * 16));
        let packed: Vec<i64> = h.engine.host_pack().iter().map(|b| b.uid).collect();
        assert!(!packed.contains(&sdpa_uid::O) && packed.contains(&uid::Y));
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        let coverage = h.coverage().unwrap_or_else(|e| panic!("{e}"));
        for u in [sdpa_uid::O, uid::SCALED, uid::Y] {
            assert_eq!(coverage[&u].written.len(), 8 * 4 * 16, "uid {u}");
        }
    }

    #[test]
    fn reference_against_itself_passes_and_a_corrupted_output_fails() {
        for index in [0, 2, 4] {
            let mut h = harness(index);
            let ok = executor_as_engine(&mut h);
            assert!(ok.iter().all(|c| c.passed() && c.compared > 0), "{ok:?}");
            if let Ok(t) = h.engine.writable(uid::Y) {
                match t.host_data_mut() {
                    HostDataMut::BF16(s) => s[5] = half::bf16::from_f32(s[5].to_f32() + 1.0),
                    other => panic!("Y is bf16, not {}", other.data_type()),
                }
            }
            let bad = h
                .validate(ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{e}"));
            let failures: usize = bad.iter().map(|c| c.failure_count).sum();
            assert_eq!(failures, 1, "case {index}: {bad:?}");
        }
    }

    #[test]
    fn elements_downstream_of_unwritten_rows_are_undefined_not_compared() {
        let index = cases()
            .iter()
            .position(|c| c.name == "sdpa_residual_add_padded_seq_lens")
            .unwrap_or_else(|| panic!("the padded case"));
        let mut h = harness(index);
        let coverage = h.coverage().unwrap_or_else(|e| panic!("{e}"));
        // Q extents 3, 0, 5 with seq_len_q 2, 0, 5: one padding row (batch 0, row 2), 4 heads x 16.
        assert_eq!(coverage[&uid::Y].undefined.len(), 4 * 16);
        assert_eq!(coverage[&uid::Y].written.len(), (2 + 5) * 4 * 16);
        let ok = executor_as_engine(&mut h);
        assert!(ok.iter().all(|c| c.passed()), "{ok:?}");
    }
}
