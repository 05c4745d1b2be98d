//! The optional entry points, checked on any plugin that exports them (plugin-abi.md §4):
//! `ExecuteOpGraphWithOverrides` (RFC 0008) serves a new B and S_max from one compiled context
//! and refuses a bad override with a message, writing nothing; the serialization trio (RFC 0009)
//! recreates a context that runs bit-identically, and refuses foreign, damaged and truncated
//! bytes with BAD_PARAM and a message. A plugin exporting neither passes with a line saying so;
//! one exporting only part of the trio fails (the backend uses it only whole).

use ragged_schema::model::{EngineConfig, Graph};

use hipdnn_shim::HostError;
use hipdnn_shim::abi::{Status, symbols};
use hipdnn_shim::engine_id::hex_id;
use hipdnn_shim::graphs::RaggedSdpaSpec;
use hipdnn_shim::harness::{Harness, ValidationMode};
use hipdnn_shim::manager::LoadedPlugin;
use hipdnn_shim::plugin::{ExecutionContext, PluginHandle};

use super::Check;

/// The probe's compiled shapes (B = 2) and the shapes an override turns them into (B = 3, larger
/// S_max on both sides).
fn compiled_spec() -> RaggedSdpaSpec {
    RaggedSdpaSpec::packed("abi_overrides_compiled", &[2, 3], &[4, 1])
}

fn target_spec() -> RaggedSdpaSpec {
    RaggedSdpaSpec::packed("abi_overrides_target", &[5, 1, 4], &[2, 6, 3])
}

fn override_enabled(mut graph: Graph) -> Graph {
    graph.is_override_shape_enabled = true;
    graph
}

/// A context of a host-runnable engine for `graph`, or a SKIP naming why there is none.
fn host_context<'h, 'p>(
    p: &LoadedPlugin,
    handle: &'h PluginHandle<'p>,
    graph: &Graph,
    host_engines: &[String],
) -> Result<(i64, ExecutionContext<'h, 'p>), String> {
    let bytes = ragged_schema::wire::encode_graph(graph);
    let (_, ids) = handle
        .applicable_engine_ids(&bytes, p.engines.len() as u32)
        .map_err(|e| e.to_string())?;
    let Some(id) = ids.iter().copied().find(|id| {
        p.engines
            .iter()
            .any(|e| e.id == *id && host_engines.contains(&e.name))
    }) else {
        return Err(format!(
            "SKIP: no engine runnable on host buffers accepts the probe graph; applicable: [{}]",
            ids.iter()
                .map(|id| hex_id(*id))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(id));
    let context = handle
        .create_execution_context(&config, &bytes)
        .map_err(|e| e.to_string())?;
    Ok((id, context))
}

fn matches_reference(harness: &mut Harness, what: &str) -> Result<(), String> {
    harness.run_reference().map_err(|e| e.to_string())?;
    let comparisons = harness
        .validate(ValidationMode::Coverage)
        .map_err(|e| e.to_string())?;
    match comparisons.iter().find(|c| !c.passed()) {
        Some(bad) => Err(format!("{what} disagrees with the CPU reference: {bad}")),
        None => Ok(()),
    }
}

fn harness(spec: &RaggedSdpaSpec, graph: Graph, seed: u64) -> Result<Harness, String> {
    let pre = hipdnn_shim::case_inputs::pre_supplied(spec).map_err(|e| e.to_string())?;
    Harness::new(graph, &pre, seed).map_err(|e| e.to_string())
}

/// G1/G7 directly: an override-enabled ragged graph is applicable, runs its compiled shapes
/// through `ExecuteOpGraph`, and a new B and S_max through the override entry point, both matching
/// the CPU reference; a bad override (offsets left at the compiled `[B+1]`) is refused with a
/// message and leaves the outputs unwritten.
pub(super) fn overrides(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    if !p.plugin.engine().has_execute_with_overrides {
        return Ok(vec![format!(
            "{} not exported: override-enabled graphs are skipped by the backend (nothing to check)",
            symbols::EXECUTE_OP_GRAPH_WITH_OVERRIDES
        )]);
    }
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let compiled = override_enabled(compiled_spec().graph());
    let (id, context) = host_context(p, &handle, &compiled, host_engines)?;

    let mut plain = harness(&compiled_spec(), compiled.clone(), 21)?;
    plain
        .execute_in(&context, 1, &mut |_, _| {})
        .map_err(|e| format!("ExecuteOpGraph on the override-enabled context: {e}"))?;
    matches_reference(&mut plain, "the compiled shapes")?;

    let mut target = harness(&target_spec(), target_spec().graph(), 22)?;
    let overrides = target
        .execute_overridden(p, &compiled, &context)
        .map_err(|e| format!("ExecuteOpGraphWithOverrides to B = 3: {e}"))?;
    matches_reference(&mut target, "the overridden execute")?;

    // Only the primaries and LSE get the new shapes: the offsets stay at the compiled [B+1].
    let mut stale = harness(&target_spec(), target_spec().graph(), 23)?;
    let ragged_aux: Vec<i64> = compiled
        .tensors
        .iter()
        .filter_map(|t| t.ragged_offset_tensor_uid)
        .collect();
    let mut stale_graph = target_spec().graph();
    for t in &mut stale_graph.tensors {
        if ragged_aux.contains(&t.uid)
            && let Some(c) = compiled.tensor(t.uid)
        {
            t.dims.clone_from(&c.dims);
            t.strides.clone_from(&c.strides);
        }
    }
    std::mem::swap(&mut stale.graph, &mut stale_graph);
    let refused = stale.execute_overridden(p, &compiled, &context);
    std::mem::swap(&mut stale.graph, &mut stale_graph);
    match refused {
        Err(HostError::PluginCall {
            status, last_error, ..
        }) if status != Status::SUCCESS && !last_error.trim().is_empty() => {
            // A harness never executed holds the same seeded inputs and sentinel outputs.
            let fresh = harness(&target_spec(), target_spec().graph(), 23)?;
            let untouched = stale.engine_output_bytes().map_err(|e| e.to_string())?
                == fresh.engine_output_bytes().map_err(|e| e.to_string())?;
            if !untouched {
                return Err("a refused override still wrote outputs".into());
            }
            Ok(vec![
                format!(
                    "engine {}: compiled shapes and an override to B = 3 ({} tensors overridden) match the CPU reference",
                    hex_id(id),
                    overrides.len()
                ),
                format!("offsets left at [B+1] of the compiled graph: {status} ({last_error})"),
            ])
        }
        Err(e) => Err(format!(
            "an override with stale offsets must be refused with a plugin status and a message, got {e}"
        )),
        Ok(_) => Err("an override with offsets left at the compiled [B+1] was accepted".into()),
    }
}

/// Serialize → recreate → execute gives bit-identical outputs and the same workspace size;
/// foreign, damaged and truncated bytes are BAD_PARAM with a message.
pub(super) fn serialization(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    let trio = [
        symbols::SERIALIZE_EXECUTION_CONTEXT,
        symbols::DESTROY_SERIALIZED_EXECUTION_CONTEXT,
        symbols::CREATE_EXECUTION_CONTEXT_FROM_SERIALIZED,
    ];
    let exported: Vec<&str> = trio
        .iter()
        .copied()
        .filter(|s| p.plugin.exports(s))
        .collect();
    match exported.len() {
        0 => {
            return Ok(vec![
                "serialization trio not exported: the backend answers NOT_SUPPORTED (nothing to check)"
                    .into(),
            ]);
        }
        3 => {}
        _ => {
            return Err(format!(
                "exports only {} of the serialization trio; the backend uses none of them",
                exported.join(", ")
            ));
        }
    }
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let spec = compiled_spec();
    let (id, original) = host_context(p, &handle, &spec.graph(), host_engines)?;
    let bytes = original.serialize().map_err(|e| e.to_string())?;
    let recreated = handle
        .create_execution_context_from_serialized(&bytes)
        .map_err(|e| e.to_string())?;
    let (a, b) = (
        original.workspace_size().map_err(|e| e.to_string())?,
        recreated.workspace_size().map_err(|e| e.to_string())?,
    );
    if a != b {
        return Err(format!(
            "workspace {a} bytes before serialization, {b} after"
        ));
    }
    let mut first = harness(&spec, spec.graph(), 31)?;
    let mut second = harness(&spec, spec.graph(), 31)?;
    first
        .execute_in(&original, 1, &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    drop(original);
    second
        .execute_in(&recreated, 1, &mut |_, _| {})
        .map_err(|e| {
            format!("executing the recreated context after the original was destroyed: {e}")
        })?;
    let (x, y) = (
        first.engine_output_bytes().map_err(|e| e.to_string())?,
        second.engine_output_bytes().map_err(|e| e.to_string())?,
    );
    if x != y {
        return Err("the recreated context's outputs differ from the original's".into());
    }
    matches_reference(&mut second, "the recreated context")?;

    let mut details = vec![format!(
        "engine {}: {} bytes; recreated context has the same workspace ({a}) and bit-identical outputs",
        hex_id(id),
        bytes.len()
    )];
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x20;
    let graph_bytes = ragged_schema::wire::encode_graph(&spec.graph());
    let cases: [(&str, &[u8]); 3] = [
        ("foreign bytes (a serialized graph)", &graph_bytes),
        ("one flipped byte", &damaged),
        ("truncated to half", &bytes[..bytes.len() / 2]),
    ];
    let mut failures = Vec::new();
    for (what, input) in cases {
        match handle.create_execution_context_from_serialized(input) {
            Err(HostError::PluginCall {
                status, last_error, ..
            }) if status == Status::BAD_PARAM && !last_error.trim().is_empty() => {
                details.push(format!("{what}: BAD_PARAM ({last_error})"));
            }
            Err(e) => failures.push(format!(
                "{what}: expected BAD_PARAM with a message, got {e}"
            )),
            Ok(_) => failures.push(format!("{what}: accepted")),
        }
    }
    if failures.is_empty() {
        Ok(details)
    } else {
        Err(failures.join("\n"))
    }
}
