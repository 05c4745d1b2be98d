//! Suite (a): ABI conformance of any engine-plugin shared object (plugin-abi.md §11): load
//! sequence, two-call id protocol, name/hash rule, NULL handling, graceful decline of graphs it
//! cannot run, engine details ownership, context independence from the caller's buffers, and the
//! per-thread last-error contract.

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::ptr;
use std::time::Instant;

use ragged_schema::model::{EngineApiVersion, EngineConfig};

use hipdnn_shim::abi::{ConstData, ERROR_STRING_MAX_LENGTH, Status, symbols};
use hipdnn_shim::engine_id::{engine_name_to_id, hex_id};
use hipdnn_shim::HostError;
use hipdnn_shim::graphs::RaggedSdpaSpec;
use hipdnn_shim::manager::{LoadedPlugin, PluginManager};
use crate::report::{CaseResult, Outcome, Report};

type Check = Result<Vec<String>, String>;

fn record(report: &mut Report, plugin: &str, name: &str, check: impl FnOnce() -> Check) {
    let start = Instant::now();
    let (outcome, details) = match check() {
        Ok(details) => (Outcome::Pass, details),
        Err(why) if why.starts_with("SKIP: ") => (Outcome::Skip(why[6..].to_owned()), vec![]),
        Err(why) => (Outcome::Fail(why), vec![]),
    };
    report.push(CaseResult {
        suite: "abi".into(),
        name: format!("{plugin}::{name}"),
        outcome,
        details,
        duration: start.elapsed(),
    });
}

fn expect_status(what: &str, got: i32, want: Status) -> Result<(), String> {
    if Status(got) == want {
        Ok(())
    } else {
        Err(format!("{what}: expected {want}, got {}", Status(got)))
    }
}

/// Loads `path` in a fresh host and runs every ABI check on it. `host_engines` names the
/// engines that may be executed on host buffers.
pub fn run(path: &Path, host_engines: &[String]) -> Report {
    let mut report = Report::default();
    let mut manager = PluginManager::new();
    manager.load_file(path);
    let file = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let Some(loaded) = manager.plugins.first() else {
        let why = manager
            .rejected
            .first()
            .map_or_else(|| "not loaded".to_owned(), |r| r.reason.clone());
        record(&mut report, &file, "load_sequence", || Err(why));
        return report;
    };
    record(&mut report, &file, "load_sequence", || {
        Ok(vec![format!(
            "name={}, version={}, api={}, engines=[{}]",
            loaded.name,
            loaded.version,
            loaded
                .api_version_text
                .as_deref()
                .unwrap_or("(symbol absent => 1.0.0)"),
            loaded
                .engines
                .iter()
                .map(|e| format!("{} {}", e.name, hex_id(e.id)))
                .collect::<Vec<_>>()
                .join(", ")
        )])
    });
    record(&mut report, &file, "required_symbols", || {
        required_symbols(loaded)
    });
    record(&mut report, &file, "symbol_hygiene", || {
        symbol_hygiene(path)
    });
    record(&mut report, &file, "engine_ids_two_call_protocol", || {
        two_call(loaded)
    });
    record(&mut report, &file, "engine_names_hash_to_ids", || {
        names_hash(loaded)
    });
    record(&mut report, &file, "null_arguments_bad_param", || {
        null_arguments(loaded)
    });
    record(&mut report, &file, "declines_unusable_graphs", || {
        declines(loaded)
    });
    record(
        &mut report,
        &file,
        "engine_details_owned_and_zeroed",
        || details(loaded),
    );
    record(
        &mut report,
        &file,
        "context_outlives_caller_buffers",
        || context(loaded, host_engines),
    );
    record(&mut report, &file, "set_stream_on_a_live_handle", || {
        set_stream(loaded, host_engines)
    });
    record(
        &mut report,
        &file,
        "runtime_pass_by_value_scale_executes",
        || pass_by_value_scale(loaded, host_engines),
    );
    record(&mut report, &file, "last_error_contract", || {
        last_error(loaded)
    });
    record(&mut report, &file, "handles_are_distinct", || {
        handles(loaded)
    });
    report
}

fn required_symbols(p: &LoadedPlugin) -> Check {
    let required = [
        symbols::GET_NAME,
        symbols::GET_VERSION,
        symbols::GET_TYPE,
        symbols::GET_LAST_ERROR_STRING,
        symbols::GET_ALL_ENGINE_IDS,
        symbols::CREATE,
        symbols::DESTROY,
        symbols::SET_STREAM,
        symbols::GET_APPLICABLE_ENGINE_IDS,
        symbols::GET_ENGINE_DETAILS,
        symbols::DESTROY_ENGINE_DETAILS,
        symbols::GET_WORKSPACE_SIZE,
        symbols::CREATE_EXECUTION_CONTEXT,
        symbols::DESTROY_EXECUTION_CONTEXT,
        symbols::GET_WORKSPACE_SIZE_FROM_EXECUTION_CONTEXT,
        symbols::EXECUTE_OP_GRAPH,
    ];
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|s| !p.plugin.exports(s))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing required symbols: {}", missing.join(", ")));
    }
    let optional: Vec<String> = symbols::ALL
        .iter()
        .filter(|s| !required.contains(s))
        .map(|s| {
            format!(
                "{s}: {}",
                if p.plugin.exports(s) {
                    "exported"
                } else {
                    "absent"
                }
            )
        })
        .collect();
    Ok(optional)
}

/// plugin-abi.md §2: `nm -gD` lists only plugin-API functions.
fn symbol_hygiene(path: &Path) -> Check {
    let exported = hipdnn_shim::elf_symbols::exported_symbols(path).map_err(|e| e.to_string())?;
    let extra: Vec<&String> = exported
        .iter()
        .filter(|s| !symbols::ALL.contains(&s.as_str()))
        .collect();
    if !extra.is_empty() {
        return Err(format!(
            "exports {} symbol(s) outside the plugin API: {}",
            extra.len(),
            extra
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(vec![format!(
        "{} exported symbols, all plugin-API functions",
        exported.len()
    )])
}

fn two_call(p: &LoadedPlugin) -> Check {
    let n = p.plugin.engine_count().map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("count query returned 0 engines".into());
    }
    // A buffer larger than needed: the plugin must report the number written, not the capacity.
    let f = p.plugin.engine().get_all_engine_ids;
    let mut ids = vec![i64::MIN; n as usize + 2];
    let mut written = 0u32;
    // SAFETY: `ids` has n + 2 slots; `written` is a valid out-pointer.
    let status = unsafe { f(ids.as_mut_ptr(), n + 2, &mut written) };
    expect_status(
        "GetAllEngineIds with a larger buffer",
        status,
        Status::SUCCESS,
    )?;
    if written != n {
        return Err(format!(
            "count query said {n}, filling call wrote {written}"
        ));
    }
    if ids[n as usize..].iter().any(|v| *v != i64::MIN) {
        return Err("GetAllEngineIds wrote past the number of engines it reported".into());
    }
    Ok(vec![format!("{n} engine(s)")])
}

fn names_hash(p: &LoadedPlugin) -> Check {
    let Some(get) = p.plugin.engine().get_engine_name else {
        return Err(
            "SKIP: hipdnnEnginePluginGetEngineName not exported (optional before 1.4.0)".into(),
        );
    };
    let mut details = Vec::new();
    for e in &p.engines {
        let mut name: *const c_char = ptr::null();
        // SAFETY: valid out-pointer.
        let status = unsafe { get(e.id, &mut name) };
        expect_status(
            &format!("GetEngineName({})", hex_id(e.id)),
            status,
            Status::SUCCESS,
        )?;
        let text = p
            .plugin
            .engine_name(e.id)
            .and_then(|r| r.ok().flatten())
            .ok_or_else(|| format!("engine {} has no name", hex_id(e.id)))?;
        if engine_name_to_id(&text) != e.id {
            return Err(format!(
                "engine {} is named '{text}', whose FNV-1a-64 is {}",
                hex_id(e.id),
                hex_id(engine_name_to_id(&text))
            ));
        }
        details.push(format!("{text} = {}", hex_id(e.id)));
    }
    let unknown = (1..)
        .map(|k: i64| k.wrapping_mul(0x9e37_79b9))
        .find(|id| p.engines.iter().all(|e| e.id != *id))
        .unwrap_or(1);
    let mut name: *const c_char = ptr::null();
    // SAFETY: valid out-pointer.
    let status = unsafe { get(unknown, &mut name) };
    expect_status("GetEngineName(unknown id)", status, Status::NOT_APPLICABLE)?;
    Ok(details)
}

fn null_arguments(p: &LoadedPlugin) -> Check {
    let b = p.plugin.base();
    let e = p.plugin.engine();
    // SAFETY: NULL is a value every pointer argument may take; the contract requires BAD_PARAM
    // for each call below, never a dereference.
    unsafe {
        expect_status(
            "GetName(NULL)",
            (b.get_name)(ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        expect_status(
            "GetVersion(NULL)",
            (b.get_version)(ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        expect_status(
            "GetType(NULL)",
            (b.get_type)(ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        if let Some(f) = b.get_api_version {
            expect_status("GetApiVersion(NULL)", f(ptr::null_mut()), Status::BAD_PARAM)?;
        }
        expect_status(
            "GetAllEngineIds(num_engines = NULL)",
            (e.get_all_engine_ids)(ptr::null_mut(), 0, ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        expect_status(
            "Create(NULL)",
            (e.create)(ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        expect_status(
            "Destroy(NULL)",
            (e.destroy)(ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        expect_status(
            "SetStream(handle = NULL, NULL)",
            (e.set_stream)(ptr::null_mut(), ptr::null_mut()),
            Status::BAD_PARAM,
        )?;
        if let Some(f) = e.get_engine_name {
            let id = p.engines.first().map_or(0, |x| x.id);
            expect_status(
                "GetEngineName(id, NULL)",
                f(id, ptr::null_mut()),
                Status::BAD_PARAM,
            )?;
        }
        // Harmless by contract.
        (b.get_last_error_string)(ptr::null_mut());
    }
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let mut n = 0u32;
    // SAFETY: live handle; NULL graph must be rejected.
    let status = unsafe {
        (e.get_applicable_engine_ids)(handle.raw(), ptr::null(), ptr::null_mut(), 0, &mut n)
    };
    expect_status(
        "GetApplicableEngineIds(op_graph = NULL)",
        status,
        Status::BAD_PARAM,
    )?;
    let graph = ConstData::empty();
    // SAFETY: live handle; NULL out-pointer must be rejected.
    let status = unsafe {
        (e.get_applicable_engine_ids)(handle.raw(), &graph, ptr::null_mut(), 0, ptr::null_mut())
    };
    expect_status(
        "GetApplicableEngineIds(num_engines = NULL)",
        status,
        Status::BAD_PARAM,
    )?;
    let mut ctx: *mut c_void = ptr::null_mut();
    // SAFETY: live handle; NULL config and graph must be rejected.
    let status =
        unsafe { (e.create_execution_context)(handle.raw(), ptr::null(), ptr::null(), &mut ctx) };
    expect_status(
        "CreateExecutionContext(NULL, NULL)",
        status,
        Status::BAD_PARAM,
    )?;
    Ok(vec![])
}

/// Graphs a plugin must decline. Well-formed graphs it cannot run (an unknown union member, a
/// stamp above the 1.3.0 ceiling, override shapes without the override entry point) must be
/// answered with SUCCESS and 0 engines: an error would fail the graph for every plugin
/// (plugin-abi.md §5.4). For bytes that are not a graph at all (garbage, a truncated buffer)
/// plugin-abi.md §11 asks for the same, while this project's issue 4 decided BAD_PARAM with a
/// message (the bytes fail for every plugin anyway, and the caller learns why); both answers are
/// accepted there, provided no engine is offered and a BAD_PARAM carries a last-error message.
/// An empty buffer is left out: §3.1 allows BAD_PARAM for an unusable buffer. Every case is
/// tried; all failures are listed.
fn declines(p: &LoadedPlugin) -> Check {
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let ragged = || RaggedSdpaSpec::packed("d", &[2, 3], &[4, 1]).graph();
    let valid = ragged_schema::wire::encode_graph(&ragged());
    let mut stamped = ragged();
    stamped.min_required_engine_api_version = Some(EngineApiVersion::new(1, 5, 0));
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        ("garbage bytes", vec![0xa5; 64]),
        ("truncated graph", valid[..valid.len() / 2].to_vec()),
    ];
    let mut cases: Vec<(&str, Vec<u8>)> = vec![(
        "graph stamped 1.5.0 (above the ceiling)",
        // `encode_graph` would restamp the computed version; the stamp must reach the plugin.
        ragged_schema::wire::encode_graph_exact(&stamped),
    )];
    let mut unknown_member = ragged();
    for node in &mut unknown_member.nodes {
        // A union member newer than any schema the plugin was built with (RFC 0005).
        node.attributes = ragged_schema::model::NodeAttributes::unsupported(200);
    }
    cases.push((
        "node with an unknown NodeAttributes union tag (200)",
        ragged_schema::wire::encode_graph(&unknown_member),
    ));
    if !p.plugin.engine().has_execute_with_overrides {
        let mut g7 = ragged();
        g7.is_override_shape_enabled = true;
        cases.push((
            "override-enabled ragged graph (no override entry point exported)",
            ragged_schema::wire::encode_graph(&g7),
        ));
    }
    let max = p.engines.len() as u32;
    let mut details = Vec::new();
    let mut failures = Vec::new();
    for (what, bytes) in cases {
        match handle.applicable_engine_ids(&bytes, max) {
            Ok((0, _)) => details.push(format!("{what}: SUCCESS, 0 engines")),
            Ok((n, _)) => failures.push(format!(
                "{what}: must be declined, plugin offered {n} engine(s)"
            )),
            Err(e) => failures.push(format!("{what}: must be SUCCESS with 0 engines, got {e}")),
        }
    }
    for (what, bytes) in malformed {
        match handle.applicable_engine_ids(&bytes, max) {
            Ok((0, _)) => details.push(format!("{what}: SUCCESS, 0 engines")),
            Ok((n, _)) => failures.push(format!(
                "{what}: not a graph, yet the plugin offered {n} engine(s)"
            )),
            Err(HostError::PluginCall {
                status, last_error, ..
            }) if status == Status::BAD_PARAM && !last_error.trim().is_empty() => {
                details.push(format!("{what}: BAD_PARAM ({last_error})"));
            }
            Err(e) => failures.push(format!(
                "{what}: must be SUCCESS with 0 engines, or BAD_PARAM with a message; got {e}"
            )),
        }
    }
    if failures.is_empty() {
        Ok(details)
    } else {
        Err(failures.join("\n"))
    }
}

/// A graph and engine the plugin accepts, if any.
fn applicable(
    p: &LoadedPlugin,
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
) -> Option<(Vec<u8>, i64)> {
    let graph =
        ragged_schema::wire::encode_graph(&RaggedSdpaSpec::packed("abi", &[2, 3], &[4, 1]).graph());
    let (_, ids) = handle
        .applicable_engine_ids(&graph, p.engines.len() as u32)
        .ok()?;
    ids.first().map(|id| (graph, *id))
}

fn details(p: &LoadedPlugin) -> Check {
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let Some((graph, id)) = applicable(p, &handle) else {
        return Err("SKIP: no engine of the plugin accepts the probe ragged graph".into());
    };
    let (bytes, after) = handle
        .engine_details(id, &graph)
        .map_err(|e| e.to_string())?;
    if !after.ptr.is_null() || after.size != 0 {
        return Err(format!(
            "DestroyEngineDetails left ptr={:?} size={}; both must be zeroed",
            after.ptr, after.size
        ));
    }
    let decoded = ragged_schema::wire::decode_engine_details(&bytes)
        .map_err(|e| format!("EngineDetails does not decode: {e}"))?;
    if decoded.engine_id != id {
        return Err(format!(
            "EngineDetails.engine_id is {}, asked for {}",
            hex_id(decoded.engine_id),
            hex_id(id)
        ));
    }
    Ok(vec![format!(
        "{} bytes for engine {}",
        bytes.len(),
        hex_id(id)
    )])
}

fn context(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let spec = RaggedSdpaSpec::packed("abi_context", &[2, 3], &[4, 1]);
    let graph = ragged_schema::wire::encode_graph(&spec.graph());
    let (_, ids) = handle
        .applicable_engine_ids(&graph, p.engines.len() as u32)
        .map_err(|e| e.to_string())?;
    // Prefer an engine that can execute on host buffers, so the context is proven by a run.
    let host = |id: &i64| {
        p.engines
            .iter()
            .any(|e| e.id == *id && host_engines.contains(&e.name))
    };
    let Some(id) = ids
        .iter()
        .copied()
        .find(host)
        .or_else(|| ids.first().copied())
    else {
        return Err("SKIP: no engine of the plugin accepts the probe ragged graph".into());
    };
    let mut config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(id));
    let mut graph_copy = graph.clone();
    let size = handle
        .workspace_size(&config, &graph)
        .map_err(|e| e.to_string())?;
    let ctx = handle
        .create_execution_context(&config, &graph_copy)
        .map_err(|e| e.to_string())?;
    // "After calling this function, the engine configuration and the operation graph are no
    // longer needed": scribble over both, then free them, before using the context.
    config.iter_mut().for_each(|b| *b = 0xdd);
    graph_copy.iter_mut().for_each(|b| *b = 0xdd);
    drop(config);
    drop(graph_copy);
    let from_ctx = ctx.workspace_size().map_err(|e| e.to_string())?;
    if from_ctx != size {
        return Err(format!(
            "GetWorkspaceSize said {size} bytes, GetWorkspaceSizeFromExecutionContext {from_ctx}"
        ));
    }
    if !host(&id) {
        return Ok(vec![format!(
            "workspace {size} bytes (engine {} needs device buffers; not executed)",
            hex_id(id)
        )]);
    }
    let pre = crate::suites::numeric::pre_supplied(&spec).map_err(|e| e.to_string())?;
    let mut harness =
        hipdnn_shim::harness::Harness::new(spec.graph(), &pre, 7).map_err(|e| e.to_string())?;
    harness
        .execute_in(&ctx, 1, &mut |_, _| {})
        .map_err(|e| format!("executing the context after its inputs were freed: {e}"))?;
    harness.run_reference().map_err(|e| e.to_string())?;
    let comparisons = harness
        .validate(hipdnn_shim::harness::ValidationMode::Coverage)
        .map_err(|e| e.to_string())?;
    if let Some(bad) = comparisons.iter().find(|c| !c.passed()) {
        return Err(format!(
            "context executed after its inputs were freed disagrees with the reference: {bad}"
        ));
    }
    Ok(vec![format!(
        "workspace {size} bytes; executed after the config and graph buffers were overwritten and freed, output matches the reference"
    )])
}

/// The first applicable engine of `graph` that runs on host buffers, or a SKIP naming why.
fn host_engine_for(
    p: &LoadedPlugin,
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    graph: &[u8],
    host_engines: &[String],
) -> Result<i64, String> {
    let (_, ids) = handle
        .applicable_engine_ids(graph, p.engines.len() as u32)
        .map_err(|e| e.to_string())?;
    ids.iter()
        .copied()
        .find(|id| {
            p.engines
                .iter()
                .any(|e| e.id == *id && host_engines.contains(&e.name))
        })
        .ok_or_else(|| {
            format!(
                "SKIP: no engine runnable on host buffers (--host-engine) accepts the graph; applicable: [{}]",
                ids.iter().map(|id| hex_id(*id)).collect::<Vec<_>>().join(", ")
            )
        })
}

/// `SetStream` on a live handle with NULL, the default stream hipDNN passes until the user sets
/// one (plugin-abi.md §5.3), must succeed and leave the handle usable: a plugin that refuses
/// NULL, or breaks the handle's state while storing the stream, fails the execute that follows
/// (host engines) or the applicability query.
fn set_stream(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    for call in ["first", "repeated"] {
        // SAFETY: a live handle; NULL is the default stream, valid by definition.
        unsafe { handle.set_stream(ptr::null_mut()) }
            .map_err(|e| format!("SetStream(live handle, NULL), {call} call: {e}"))?;
    }
    let spec = RaggedSdpaSpec::packed("abi_stream", &[2, 3], &[4, 1]);
    let graph = ragged_schema::wire::encode_graph(&spec.graph());
    let id = match host_engine_for(p, &handle, &graph, host_engines) {
        Ok(id) => id,
        Err(why) if why.starts_with("SKIP: ") => {
            return Ok(vec![
                "SetStream(NULL) accepted twice; no host engine to execute on the stream".into(),
            ]);
        }
        Err(why) => return Err(why),
    };
    let pre = crate::suites::numeric::pre_supplied(&spec).map_err(|e| e.to_string())?;
    let detail = run_against_reference(&handle, id, spec.graph(), &pre)?;
    Ok(vec![format!(
        "SetStream(NULL) accepted twice; engine {} then executed on the handle: {detail}",
        hex_id(id)
    )])
}

/// A graph whose scale is a runtime pass-by-value scalar (RFC 0016), bound in the variant pack
/// as a host pointer (plugin-abi.md §5.7), executed on a host engine and compared with the CPU
/// reference run at the same scale. The scalar (0.3) is far from the 1.0 a plugin would fall
/// back to if it ignored the binding, so such a plugin fails here, as does one that reads it as
/// the wrong type or rejects the graph's pass-by-value tensor at execute.
fn pass_by_value_scale(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    const SCALE: f32 = 0.3;
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let spec = RaggedSdpaSpec::packed("abi_pass_by_value", &[2, 3], &[4, 1]);
    let graph = hipdnn_shim::graphs::with_pass_by_value_scale(spec.graph());
    let id = host_engine_for(
        p,
        &handle,
        &ragged_schema::wire::encode_graph(&graph),
        host_engines,
    )?;
    let mut pre = crate::suites::numeric::pre_supplied(&spec).map_err(|e| e.to_string())?;
    let dims = vec![1, 1, 1, 1];
    let scalar = ragged_kernels::DenseTensor::from_vec(vec![SCALE], dims.clone(), dims)
        .map_err(|e| e.to_string())?;
    pre.insert(hipdnn_shim::graphs::uid::SCALE, std::sync::Arc::new(scalar));
    let detail = run_against_reference(&handle, id, graph, &pre)?;
    Ok(vec![format!(
        "engine {} with scale {SCALE} bound as a host scalar (uid {}): {detail}",
        hex_id(id),
        hipdnn_shim::graphs::uid::SCALE
    )])
}

/// Executes `graph` once on `engine_id` over host buffers and validates every output against
/// the CPU reference (coverage mode); the error names the first disagreeing output.
fn run_against_reference(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine_id: i64,
    graph: ragged_schema::model::Graph,
    pre: &hipdnn_shim::harness::PreSuppliedInputs,
) -> Result<String, String> {
    let mut harness = hipdnn_shim::harness::Harness::new(graph, pre, 11).map_err(|e| e.to_string())?;
    harness
        .run_engine(handle, engine_id)
        .map_err(|e| format!("execute: {e}"))?;
    harness.run_reference().map_err(|e| e.to_string())?;
    let comparisons = harness
        .validate(hipdnn_shim::harness::ValidationMode::Coverage)
        .map_err(|e| e.to_string())?;
    if let Some(bad) = comparisons.iter().find(|c| !c.passed()) {
        return Err(format!("disagrees with the CPU reference: {bad}"));
    }
    Ok(format!(
        "{} outputs match the CPU reference",
        comparisons.len()
    ))
}

fn last_error(p: &LoadedPlugin) -> Check {
    let calls = p.plugin.base_calls();
    // SAFETY: NULL must be rejected with BAD_PARAM, which sets the last error.
    let status = unsafe { (p.plugin.base().get_name)(ptr::null_mut()) };
    expect_status("GetName(NULL)", status, Status::BAD_PARAM)?;
    let here = calls.last_error();
    if here == "(NULL)" {
        return Err("GetLastErrorString returned NULL".into());
    }
    if here.is_empty() {
        return Err("no last-error message after a failing call".into());
    }
    if here.len() >= ERROR_STRING_MAX_LENGTH {
        return Err(format!("last error is {} bytes; at most 2047", here.len()));
    }
    let base = *p.plugin.base();
    let other = std::thread::scope(|s| {
        s.spawn(|| hipdnn_shim::plugin::BaseCalls::from_api(&base).last_error())
            .join()
            .unwrap_or_else(|_| "(thread panicked)".to_owned())
    });
    if other == "(NULL)" {
        return Err("GetLastErrorString returned NULL on a fresh thread".into());
    }
    if other == here {
        return Err(format!(
            "a fresh thread sees this thread's last error '{here}'; it must be per-thread"
        ));
    }
    Ok(vec![format!("last error: '{here}'")])
}

fn handles(p: &LoadedPlugin) -> Check {
    let a = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let b = p.plugin.create_handle().map_err(|e| e.to_string())?;
    if a.raw() == b.raw() {
        return Err("two Create calls returned the same handle".into());
    }
    Ok(vec![])
}
