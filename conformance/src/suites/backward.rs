//! Suite (d): SDPA backward numerics (issue 15 item 4). Every engine of a plugin is given the
//! backward of each numeric-suite case (the same shapes that break kernels: zero-length batches,
//! padded lengths, both causal alignments, GQA, both dims orders, every element type) and its dQ,
//! dK and dV are compared with the CPU reference `ragged_kernels::sdpa_backward` over identical
//! inputs: tolerance where a value is written, the sentinel where nothing may be (coverage
//! validation), and exactly 0 for the rows of zero-length batches and of rows or keys the band
//! leaves without a partner.
//!
//! The backward is optional for a plugin: an engine that declines a backward graph is reported
//! `declined` (a skip), not a failure.

use hipdnn_shim::HostError;
use hipdnn_shim::backward::{BackwardHarness, backward_of};
use hipdnn_shim::case_inputs::pre_supplied;
use hipdnn_shim::graphs::RaggedSdpaSpec;
use hipdnn_shim::manager::LoadedPlugin;
use hipdnn_shim::plugin::PluginHandle;

use super::engine_cases::{CaseRun, run_cases, verdict};
use super::numeric::{self, NumericOptions};
use crate::report::{Outcome, Report};

const SUITE: &str = "backward";

/// The numeric suite's cases plus an MQA one, each as the forward whose backward is tested. The
/// forward's `unshared_aux` case is left out: a backward's O, dO and dQ must name Q's offsets
/// (schema validation of `SdpaBackwardAttributes`), which separate aux tensors do not.
pub fn cases() -> Vec<RaggedSdpaSpec> {
    let mut cases: Vec<RaggedSdpaSpec> = numeric::cases()
        .into_iter()
        .filter(|s| s.shared_aux)
        .collect();
    let mut mqa = RaggedSdpaSpec::packed("mqa_4q_1kv", &[3, 0, 4], &[2, 5, 0]);
    mqa.heads_q = 4;
    mqa.heads_kv = 1;
    cases.push(mqa);
    cases
}

/// Runs every case on every admitted engine of `plugin`.
pub fn run(plugin: &LoadedPlugin, options: &NumericOptions) -> Report {
    run_cases(
        plugin,
        SUITE,
        &cases(),
        |s| s.name.as_str(),
        |handle, engine, spec| {
            let on_host = options.host_engines.contains(&engine.name);
            run_case(handle, engine.id, spec, options, on_host)
                .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

fn run_case(
    handle: &PluginHandle<'_>,
    engine_id: i64,
    spec: &RaggedSdpaSpec,
    options: &NumericOptions,
    on_host: bool,
) -> Result<CaseRun, HostError> {
    let Some(graph) = backward_of(&spec.graph()) else {
        return Err(HostError::Harness(format!(
            "case '{}' has no stats output, so it has no backward",
            spec.name
        )));
    };
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let (_, applicable) = handle.applicable_engine_ids(&bytes, 64)?;
    let id = hipdnn_shim::engine_id::hex_id(engine_id);
    if !applicable.contains(&engine_id) {
        return Ok((
            Outcome::Skip(format!(
                "declined: engine {id} does not apply to the backward of case '{}'",
                spec.name
            )),
            vec![],
        ));
    }
    if !on_host {
        // The harness binds host buffers; an engine that would dereference them on a device
        // must not be handed them.
        return Ok((
            Outcome::Skip(format!(
                "engine {id} accepts backward graphs but is not a --host-engine; the backward \
                 suite binds host buffers only"
            )),
            vec![],
        ));
    }
    let mut harness = BackwardHarness::new(graph, &pre_supplied(spec)?, options.seed)?;
    harness.run_reference()?;
    harness.run_engine(handle, engine_id)?;
    let comparisons = harness.validate(options.mode)?;
    Ok(verdict(
        &comparisons,
        "gradient",
        "the CPU reference backward",
        options.mode,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipdnn_shim::harness::{Entry, ValidationMode};

    #[test]
    fn every_case_has_a_valid_backward_the_reference_runs_on() {
        for spec in cases() {
            let graph = backward_of(&spec.graph()).unwrap_or_else(|| panic!("{}", spec.name));
            if let Err(e) = graph.validate() {
                panic!("case {}: {e}", spec.name);
            }
            let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let mut h = BackwardHarness::new(graph, &pre, 1)
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
    }

    /// The zero-length case: a gradient row of a zero-length batch holding a tiny nonzero value
    /// fails although bf16's tolerance would accept it.
    #[test]
    fn zero_length_batches_must_give_exact_zeros() {
        let spec = cases().remove(2);
        assert_eq!(spec.name, "zero_length_batches");
        let graph = backward_of(&spec.graph()).unwrap_or_else(|| panic!("no backward"));
        let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut h = BackwardHarness::new(graph, &pre, 5).unwrap_or_else(|e| panic!("{e}"));
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        std::mem::swap(&mut h.reference, &mut h.engine);
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        let ok = h
            .validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ok.iter().all(|c| c.passed() && c.compared > 0), "{ok:?}");
        let dq = h.node.dq_tensor_uid;
        let (_, exact) = h.positions(dq).unwrap_or_else(|e| panic!("{e}"));
        // Batch 2 has 3 queries and no keys: every element of its rows must be exactly 0.
        assert_eq!(exact.len(), (3 * spec.heads_q * spec.head_dim) as usize);
        let at = exact.iter().next().copied().unwrap_or_default();
        if let Some(Entry::Owned(t)) = h.engine.entries.get_mut(&dq)
            && let ragged_kernels::HostDataMut::BF16(s) = t.host_data_mut()
        {
            s[at] = half::bf16::from_f32(1e-3);
        }
        let bad = h
            .validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bad.iter().map(|c| c.failure_count).sum::<usize>(), 1);
    }
}
