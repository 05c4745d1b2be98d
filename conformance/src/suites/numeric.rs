//! Suite (c): numeric agreement of every engine of a plugin with the CPU reference over a fixed
//! list of ragged cases (ragged-sdpa.md §9 item 5 names the shapes that break kernels).

use ragged_schema::model::DataType;

use super::engine_cases::{run_cases, verdict};
use crate::report::{Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::case_inputs::pre_supplied;
use hipdnn_shim::graphs::{Mask, RaggedSdpaSpec};
use hipdnn_shim::harness::{DeviceRun, Harness, ValidationMode};
use hipdnn_shim::manager::LoadedPlugin;

/// The fixed case list.
pub fn cases() -> Vec<RaggedSdpaSpec> {
    let base = RaggedSdpaSpec::packed;
    let with = |mut s: RaggedSdpaSpec, f: &dyn Fn(&mut RaggedSdpaSpec)| {
        f(&mut s);
        s
    };
    vec![
        base("packed", &[3, 5, 2], &[4, 6, 1]),
        with(base("padded_seq_lens", &[4, 6, 3], &[5, 5, 2]), &|s| {
            s.seq_len_q = Some(vec![2, 6, 1]);
            s.seq_len_kv = Some(vec![5, 3, 2]);
        }),
        // First and last batch empty, a batch with queries but no keys, total tokens < B.
        base("zero_length_batches", &[0, 2, 3, 0, 1], &[0, 3, 0, 2, 1]),
        with(base("causal_top_left", &[3, 5, 4], &[5, 3, 4]), &|s| {
            s.mask = Mask::CausalTopLeft
        }),
        with(base("causal_bottom_right", &[3, 5, 4], &[5, 3, 4]), &|s| {
            s.mask = Mask::CausalBottomRight
        }),
        with(base("gqa_4q_2kv", &[3, 1, 4], &[2, 5, 3]), &|s| {
            s.heads_q = 4;
            s.heads_kv = 2;
        }),
        with(base("int64_aux", &[2, 4], &[3, 2]), &|s| {
            s.index_type = DataType::Int64;
            s.seq_len_kv = Some(vec![2, 2]);
        }),
        with(base("unshared_aux", &[2, 3], &[4, 1]), &|s| {
            s.shared_aux = false
        }),
        with(base("packed_f32", &[3, 5], &[4, 2]), &|s| {
            s.io_type = DataType::Float
        }),
        with(base("packed_f16", &[3, 5], &[4, 2]), &|s| {
            s.io_type = DataType::Half
        }),
        // cuDNN's [B, H, S, D] dims over the same memory, S_q != S_kv != H (ragged-sdpa.md §1).
        with(base("gqa_4q_2kv_bhsd_dims", &[3, 1, 4], &[2, 5, 3]), &|s| {
            s.heads_q = 4;
            s.heads_kv = 2;
            s.bhsd_dims = true;
        }),
        with(
            base(
                "padded_causal_bottom_right_bhsd_dims",
                &[4, 6, 3],
                &[5, 5, 2],
            ),
            &|s| {
                s.seq_len_q = Some(vec![2, 6, 1]);
                s.seq_len_kv = Some(vec![5, 3, 2]);
                s.mask = Mask::CausalBottomRight;
                s.bhsd_dims = true;
            },
        ),
    ]
}

/// Options of a numeric run.
#[derive(Debug, Clone)]
pub struct NumericOptions {
    pub mode: ValidationMode,
    pub seed: u64,
    /// Engines whose buffers may be host memory; others need device buffers.
    pub host_engines: Vec<String>,
    /// Where other engines run; without it they are skipped.
    pub device: Option<&'static ragged_gpu_runtime::cuda::runtime::CudaRuntime>,
}

impl Default for NumericOptions {
    fn default() -> Self {
        NumericOptions {
            mode: ValidationMode::Coverage,
            seed: 0x5eed,
            host_engines: vec!["RAGGED_SDPA_HOST_REFERENCE".to_owned()],
            device: None,
        }
    }
}

/// Runs every case on every admitted engine of `plugin`.
pub fn run(plugin: &LoadedPlugin, options: &NumericOptions) -> Report {
    let cases = cases();
    run_cases(
        plugin,
        "numeric",
        &cases,
        |s| s.name.as_str(),
        |handle, engine, spec| {
            let on_host = options.host_engines.contains(&engine.name);
            if !on_host && options.device.is_none() {
                return (
                    Outcome::Skip(format!(
                        "engine {} is not a --host-engine and no --device was given",
                        engine.name
                    )),
                    vec![],
                );
            }
            let device = if on_host { None } else { options.device };
            run_case(handle, engine.id, spec, options, device)
                .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

fn run_case(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine_id: i64,
    spec: &RaggedSdpaSpec,
    options: &NumericOptions,
    device: Option<&ragged_gpu_runtime::cuda::runtime::CudaRuntime>,
) -> Result<(Outcome, Vec<String>), HostError> {
    let graph = spec.graph();
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let max = 64;
    let (_, applicable) = handle.applicable_engine_ids(&bytes, max)?;
    if !applicable.contains(&engine_id) {
        let declined = format!(
            "engine {} declined case '{}'",
            hipdnn_shim::engine_id::hex_id(engine_id),
            spec.name
        );
        // GPU engines legitimately decline shapes or types outside their kernels' limits
        // (ragged-sdpa.md §4, §6); the host reference must accept every case.
        let outcome = if device.is_some() {
            Outcome::Skip(declined)
        } else {
            Outcome::Fail(format!("{declined} (applicable: {applicable:?})"))
        };
        return Ok((outcome, vec![]));
    }
    let harness = Harness::new(graph, &pre_supplied(spec)?, options.seed)?;
    against_reference(harness, handle, engine_id, device, options.mode)
}

/// A case of a feature an engine may legitimately not implement (paged K/V, sinks, FP8), on one
/// engine: whether the engine takes the graph is asked first, on any machine (a decline needs no
/// device, and is DECLINED with the plugin's logged reason, never a failure); an engine that takes
/// it runs it against the CPU reference, on the host or on `options.device`, else SKIP.
pub(super) fn optional_feature_case(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine: &hipdnn_shim::manager::Engine,
    (name, feature): (&str, &str),
    graph: ragged_schema::model::Graph,
    pre_supplied: &hipdnn_shim::harness::PreSuppliedInputs,
    options: &NumericOptions,
) -> Result<(Outcome, Vec<String>), HostError> {
    let bytes = ragged_schema::wire::encode_graph(&graph);
    let (_, applicable) = handle.applicable_engine_ids(&bytes, 64)?;
    if !applicable.contains(&engine.id) {
        return Ok((
            Outcome::Declined(format!(
                "engine {} declines '{name}' ({feature}; the plugin's INFO log says why)",
                hipdnn_shim::engine_id::hex_id(engine.id),
            )),
            vec![],
        ));
    }
    let on_host = options.host_engines.contains(&engine.name);
    if !on_host && options.device.is_none() {
        return Ok((
            Outcome::Skip(format!(
                "engine {} accepts the case; it is not a --host-engine and no --device was given",
                engine.name
            )),
            vec![],
        ));
    }
    let device = if on_host { None } else { options.device };
    let harness = Harness::new(graph, pre_supplied, options.seed)?;
    against_reference(harness, handle, engine.id, device, options.mode)
}

/// Runs a forward case's graph on the CPU reference and on the engine (on `device`, or on the
/// host), and compares every output.
pub(super) fn against_reference(
    mut harness: Harness,
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine_id: i64,
    device: Option<&ragged_gpu_runtime::cuda::runtime::CudaRuntime>,
    mode: ValidationMode,
) -> Result<(Outcome, Vec<String>), HostError> {
    harness.run_reference()?;
    match device {
        Some(device) => harness.run_engine_on_device(handle, engine_id, device)?,
        None => harness.run_engine(handle, engine_id)?,
    }
    let comparisons = harness.validate(mode)?;
    Ok(verdict(&comparisons, "output", "the CPU reference", mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_graph_validates_and_the_reference_runs_on_it() {
        for spec in cases() {
            let graph = spec.graph();
            if let Err(e) = graph.validate() {
                panic!("case {}: {e}", spec.name);
            }
            let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let mut h =
                Harness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
    }

    /// Plays "engine" with the CPU reference itself (the bundles swapped between two runs),
    /// which must pass coverage validation with every output compared.
    fn reference_against_itself(h: &mut Harness) {
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        std::mem::swap(&mut h.reference, &mut h.engine);
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        let ok = h
            .validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ok.iter().all(|c| c.passed() && c.compared > 0), "{ok:?}");
    }

    #[test]
    fn reference_against_itself_passes_and_a_corrupted_copy_fails() {
        let spec = cases().remove(1); // padded_seq_lens: has padding rows
        let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut h = Harness::new(spec.graph(), &pre, 3).unwrap_or_else(|e| panic!("{e}"));
        reference_against_itself(&mut h);
        // Batch 0 has 4 physical rows but seq_len_q = 2: rows 2..4 are padding and must stay
        // sentinel. Writing one of them must fail coverage validation.
        if let Some(hipdnn_shim::harness::Entry::Owned(o)) =
            h.engine.entries.get_mut(&hipdnn_shim::graphs::uid::O)
        {
            use ragged_core::tensor::TensorMutExt;
            o.set(&[0, 3, 0, 0], half::bf16::from_f32(0.0))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let bad = h
            .validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            bad.iter().map(|c| c.failure_count).sum::<usize>(),
            1,
            "{bad:?}"
        );
    }

    /// ragged-sdpa.md §8: O rows that admit no key must be exactly 0; bf16's 1e-2 tolerance
    /// would otherwise let an engine write small garbage there.
    #[test]
    fn rows_without_keys_must_be_exactly_zero() {
        let spec = cases().remove(2); // zero_length_batches: batch 2 has 3 queries, no keys
        assert_eq!(spec.name, "zero_length_batches");
        let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut h = Harness::new(spec.graph(), &pre, 5).unwrap_or_else(|e| panic!("{e}"));
        let exact = h
            .roles
            .exact_zero_positions(&h.reference)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(exact.len(), (3 * spec.heads_q * spec.head_dim) as usize);
        reference_against_itself(&mut h);
        if let Some(hipdnn_shim::harness::Entry::Owned(o)) =
            h.engine.entries.get_mut(&hipdnn_shim::graphs::uid::O)
        {
            use ragged_core::tensor::TensorMutExt;
            o.set(&[2, 1, 0, 0], half::bf16::from_f32(1e-3))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for mode in [ValidationMode::Coverage, ValidationMode::SentinelSkip] {
            let bad = h.validate(mode).unwrap_or_else(|e| panic!("{e}"));
            let failures: Vec<&String> = bad.iter().flat_map(|c| &c.failures).collect();
            assert_eq!(failures.len(), 1, "{mode}: {bad:?}");
            assert!(failures[0].contains("admits no key"), "{failures:?}");
        }
    }

    #[test]
    fn bottom_right_rows_above_the_diagonal_are_exact_zero_positions() {
        let spec = cases().remove(4);
        assert_eq!(spec.name, "causal_bottom_right");
        let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
        let h = Harness::new(spec.graph(), &pre, 5).unwrap_or_else(|e| panic!("{e}"));
        let exact = h
            .roles
            .exact_zero_positions(&h.reference)
            .unwrap_or_else(|e| panic!("{e}"));
        // Batch 1: 5 queries, 3 keys, diagonal offset -2: rows 0 and 1 see no key.
        assert_eq!(exact.len(), (2 * spec.heads_q * spec.head_dim) as usize);
    }
}
