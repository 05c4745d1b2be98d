//! Suite (d): SDPA backward numerics (issue 15 item 4). Every engine of a plugin is given the
//! backward of each case of [`backward_cases`] and its dQ, dK and dV are compared with the CPU
//! reference `ragged_reference::sdpa_backward` over identical inputs: tolerance where a value is
//! written, the sentinel where nothing may be (coverage validation), and exactly 0 for the rows
//! of zero-length batches and of rows or keys the band leaves without a partner.
//!
//! Host engines get host buffers; other engines run on CUDA device copies of the same bundle
//! (the forward numeric suite's device path) when a device was given, and are skipped with the
//! reason otherwise. The backward is optional for a plugin: an engine that declines a backward
//! graph is reported `declined` (a skip), not a failure.

use hipdnn_shim::HostError;
use hipdnn_shim::backward::BackwardHarness;
use hipdnn_shim::case_inputs::pre_supplied;
use hipdnn_shim::harness::DeviceRun;
use hipdnn_shim::manager::LoadedPlugin;
use hipdnn_shim::plugin::PluginHandle;
use ragged_gpu_runtime::cuda::runtime::CudaRuntime;

use super::backward_cases::BackwardCase;
use super::engine_cases::{CaseRun, run_cases, verdict};
use super::numeric::NumericOptions;
use crate::report::{Outcome, Report};

pub use super::backward_cases::cases;

const SUITE: &str = "backward";

/// Runs every case on every admitted engine of `plugin`: host engines on host buffers, the
/// others on `options.device`.
pub fn run(plugin: &LoadedPlugin, options: &NumericOptions) -> Report {
    run_cases(
        plugin,
        SUITE,
        &cases(),
        |c| c.name(),
        |handle, engine, case| {
            let on_host = options.host_engines.contains(&engine.name);
            let device = if on_host { None } else { options.device };
            run_case(
                handle,
                engine.id,
                &engine.name,
                case,
                options,
                on_host,
                device,
            )
            .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

fn run_case(
    handle: &PluginHandle<'_>,
    engine_id: i64,
    engine_name: &str,
    case: &BackwardCase,
    options: &NumericOptions,
    on_host: bool,
    device: Option<&CudaRuntime>,
) -> Result<CaseRun, HostError> {
    let Some(graph) = case.backward() else {
        return Err(HostError::Harness(format!(
            "case '{}' has no stats output, so it has no backward",
            case.name()
        )));
    };
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let (_, applicable) = handle.applicable_engine_ids(&bytes, 64)?;
    let id = hipdnn_shim::engine_id::hex_id(engine_id);
    if !applicable.contains(&engine_id) {
        return Ok((
            Outcome::Skip(format!(
                "declined: engine {id} does not apply to the backward of case '{}'",
                case.name()
            )),
            vec![],
        ));
    }
    if !on_host && device.is_none() {
        // Its buffers must be device memory: handing it the harness's host buffers could fault.
        return Ok((
            Outcome::Skip(format!(
                "engine {engine_name} ({id}) accepts this backward graph but is not a \
                 --host-engine and no --cuda device was given"
            )),
            vec![],
        ));
    }
    let mut harness = BackwardHarness::new(graph, &pre_supplied(&case.spec)?, options.seed)?;
    harness.run_reference()?;
    match device {
        Some(cuda) => harness.run_engine_on_device(handle, engine_id, cuda)?,
        None => harness.run_engine(handle, engine_id)?,
    }
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
        for case in cases() {
            let name = case.name();
            let graph = case.backward().unwrap_or_else(|| panic!("{name}"));
            if let Err(e) = graph.validate() {
                panic!("case {name}: {e}");
            }
            let pre = pre_supplied(&case.spec).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut h =
                BackwardHarness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
            h.run_reference().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// The zero-length case: a gradient row of a zero-length batch holding a tiny nonzero value
    /// fails although bf16's tolerance would accept it.
    #[test]
    fn zero_length_batches_must_give_exact_zeros() {
        let case = cases().remove(2);
        assert_eq!(case.name(), "zero_length_batches");
        let spec = &case.spec;
        let graph = case.backward().unwrap_or_else(|| panic!("no backward"));
        let pre = pre_supplied(spec).unwrap_or_else(|e| panic!("{e}"));
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
            && let ragged_core::HostDataMut::BF16(s) = t.host_data_mut()
        {
            s[at] = half::bf16::from_f32(1e-3);
        }
        let bad = h
            .validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bad.iter().map(|c| c.failure_count).sum::<usize>(), 1);
    }

    /// For every case, the positions the suite compares and requires to be exactly 0 are the
    /// independent float64 oracle's (windows included), and the reference backward agrees with
    /// the oracle's values there; every window case has exact zeros in each gradient.
    #[test]
    fn every_cases_positions_and_reference_agree_with_the_float64_oracle() {
        use hipdnn_shim::oracle_backward;
        for case in cases() {
            let name = case.name();
            let graph = case.backward().unwrap_or_else(|| panic!("{name}"));
            let pre = pre_supplied(&case.spec).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut h =
                BackwardHarness::new(graph, &pre, 9).unwrap_or_else(|e| panic!("{name}: {e}"));
            let expected = oracle_backward::evaluate(&h).unwrap_or_else(|e| panic!("{name}: {e}"));
            for e in &expected {
                let (written, exact) = h.positions(e.uid).unwrap_or_else(|x| panic!("{x}"));
                let oracle_written = e.values.iter().enumerate().filter(|(_, v)| !v.is_nan());
                assert!(
                    written.iter().copied().eq(oracle_written.map(|(i, _)| i)),
                    "{name}: uid {} written positions",
                    e.uid
                );
                assert_eq!(exact, e.exact_zero, "{name}: uid {} exact zeros", e.uid);
                if case.window.is_some() {
                    assert!(!exact.is_empty(), "{name}: uid {} has no exact zero", e.uid);
                }
            }
            h.run_reference().unwrap_or_else(|e| panic!("{name}: {e}"));
            std::mem::swap(&mut h.reference, &mut h.engine);
            let result = oracle_backward::compare(&h, &expected, ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for c in &result {
                assert!(c.passed() && c.compared > 0, "{name}: {c} {:?}", c.failures);
            }
        }
    }
}
