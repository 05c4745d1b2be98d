//! Suite (a): ABI conformance of any engine-plugin shared object (plugin-abi.md §11): load
//! sequence, two-call id protocol, name/hash rule, NULL handling, graceful decline of graphs it
//! cannot run, engine details ownership, context independence from the caller's buffers, and the
//! per-thread last-error contract.

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::ptr;
use std::time::Instant;

use crate::report::{CaseResult, Outcome, Report};
use hipdnn_shim::abi::{ConstData, ERROR_STRING_MAX_LENGTH, Status, symbols};
use hipdnn_shim::engine_id::{engine_name_to_id, hex_id};
use hipdnn_shim::manager::{LoadedPlugin, PluginManager};

mod backward_calls;
mod graph_calls;
mod optional_calls;

use graph_calls::{context, declines, details, pass_by_value_scale, set_stream};

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
    record(&mut report, &file, "execute_with_overrides", || {
        optional_calls::overrides(loaded, host_engines)
    });
    record(&mut report, &file, "serialized_context_round_trip", || {
        optional_calls::serialization(loaded, host_engines)
    });
    record(&mut report, &file, "backward_graph", || {
        backward_calls::backward_graph(loaded, host_engines)
    });
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
