//! The shim as hipDNN's backend: plugins from `HIPDNN_PLUGIN_DIR` (or the default path beside the
//! executable), one handle per plugin, and per-graph dispatch with the backend's skip lines.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use hipdnn_shim::discovery::{PLUGIN_DIR_ENV, engine_plugin_search_path};
use hipdnn_shim::dispatch::{Gate, GraphRequirements, gate, offer};
use hipdnn_shim::engine_id::hex_id;
use hipdnn_shim::log::{Log, Severity};
use hipdnn_shim::manager::PluginManager;
use ragged_schema::model::Graph;

use crate::error::ShimError;

/// The search path in effect: `--plugin-dir` if given, else what hipDNN would use.
pub fn search_path(override_dir: Option<PathBuf>) -> PathBuf {
    let module_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    match override_dir {
        Some(dir) => engine_plugin_search_path(Some(dir.as_os_str()), &module_dir),
        None => engine_plugin_search_path(std::env::var_os(PLUGIN_DIR_ENV).as_deref(), &module_dir),
    }
}

pub fn load_plugins(override_dir: Option<PathBuf>) -> (PathBuf, PluginManager) {
    let path = search_path(override_dir);
    let mut manager = PluginManager::new();
    manager.load_search_path(&path);
    (path, manager)
}

/// hipDNN's log destination (plugin-abi.md §10): a file, appended to; unset or empty, stderr.
pub const LOG_FILE_ENV: &str = "HIPDNN_LOG_FILE";

/// Writes host log records at or above `HIPDNN_LOG_LEVEL` (default here: info, so the skip lines
/// hipDNN would print are visible) to `HIPDNN_LOG_FILE` or stderr, then forgets them. A log file
/// that cannot be opened must not cost the lines: they go to stderr after a note naming the file.
pub fn flush_log(log: &mut Log) {
    let threshold = match std::env::var("HIPDNN_LOG_LEVEL") {
        Ok(v) if v.eq_ignore_ascii_case("off") => None,
        Ok(v) => Severity::from_env_value(&v).or(Some(Severity::Info)),
        Err(_) => Some(Severity::Info),
    };
    if let Some(threshold) = threshold {
        let lines: Vec<String> = log.at_least(threshold).map(ToString::to_string).collect();
        let file = log_file(std::env::var_os(LOG_FILE_ENV));
        if let Err(note) = write_lines(&lines, file.as_deref()) {
            eprintln!("hipdnn-shim: {note}; logging to stderr");
            lines.iter().for_each(|line| eprintln!("{line}"));
        }
    }
    *log = Log::default();
}

/// The log file `HIPDNN_LOG_FILE` names, `None` for stderr.
fn log_file(value: Option<OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Appends `lines` to `file` (created if missing), or prints them on stderr without one.
fn write_lines(lines: &[String], file: Option<&Path>) -> Result<(), String> {
    let Some(path) = file else {
        lines.iter().for_each(|line| eprintln!("{line}"));
        return Ok(());
    };
    if lines.is_empty() {
        return Ok(());
    }
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{LOG_FILE_ENV}='{}': {e}", path.display()))
}

/// An engine that accepted the graph.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub plugin_index: usize,
    pub engine_id: i64,
    pub engine_name: String,
}

/// Dispatches the graph to every loaded plugin (gate, then `GetApplicableEngineIds`).
pub fn applicable_engines(
    manager: &mut PluginManager,
    graph: &Graph,
) -> Result<Vec<Candidate>, ShimError> {
    let requirements = GraphRequirements::of(graph);
    requirements.check_ceiling()?;
    let bytes = ragged_schema::wire::encode_graph(graph);
    let mut out = Vec::new();
    for (index, plugin) in manager.plugins.iter().enumerate() {
        if gate(plugin, &requirements, &mut manager.log) != Gate::Offer {
            continue;
        }
        let handle = plugin.plugin.create_handle()?;
        for id in offer(plugin, &handle, &bytes, &mut manager.log)? {
            let name = plugin
                .engines
                .iter()
                .find(|e| e.id == id)
                .map_or_else(|| hex_id(id), |e| e.name.clone());
            out.push(Candidate {
                plugin_index: index,
                engine_id: id,
                engine_name: name,
            });
        }
    }
    Ok(out)
}

/// `--engine` (a name or a `0x` hex id) among the candidates, or the first one that takes host
/// buffers. The shim binds host memory only, so an engine outside `host_engines` (one that would
/// dereference the pointers on a device) is never run.
///
/// With `device_available`, every engine qualifies: the others get device buffers.
pub fn choose(
    candidates: &[Candidate],
    wanted: Option<&str>,
    host_engines: &[String],
    device_available: bool,
    graph: &Graph,
) -> Result<Candidate, ShimError> {
    let runs_on_host = |c: &Candidate| device_available || host_engines.contains(&c.engine_name);
    match wanted {
        None => candidates
            .iter()
            .find(|c| runs_on_host(c))
            .cloned()
            .ok_or_else(|| ShimError::NoEngine {
                graph: graph.name.clone(),
                hint: format!(
                    " that takes host buffers ({}); applicable: [{}]; for the CPU host engine set HIPDNN_RAGGED_SDPA_HOST_ENGINE=1",
                    host_engines.join(", "),
                    candidates
                        .iter()
                        .map(|c| c.engine_name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        Some(w) => {
            let found = candidates
                .iter()
                .find(|c| c.engine_name == w || hex_id(c.engine_id).eq_ignore_ascii_case(w))
                .cloned()
                .ok_or_else(|| ShimError::UnknownEngine(w.to_owned()))?;
            if runs_on_host(&found) {
                Ok(found)
            } else {
                Err(ShimError::DeviceEngine(found.engine_name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_empty_value_names_a_log_file() {
        assert_eq!(log_file(None), None);
        assert_eq!(log_file(Some(OsString::new())), None);
        assert_eq!(
            log_file(Some(OsString::from("/tmp/hipdnn.log"))),
            Some(PathBuf::from("/tmp/hipdnn.log"))
        );
    }

    #[test]
    fn lines_are_appended_after_what_the_file_held() {
        let path =
            std::env::temp_dir().join(format!("hipdnn-shim-log-append-{}.log", std::process::id()));
        std::fs::write(&path, "earlier line\n").unwrap_or_else(|e| panic!("{e}"));
        let first = write_lines(&["[INFO] [host] one".to_owned()], Some(&path));
        let second = write_lines(&["[WARN] [host] two".to_owned()], Some(&path));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        assert_eq!((first, second), (Ok(()), Ok(())));
        assert_eq!(text, "earlier line\n[INFO] [host] one\n[WARN] [host] two\n");
    }

    #[test]
    fn an_unopenable_log_file_is_named_in_the_error() {
        let path = std::env::temp_dir().join("hipdnn-shim-no-such-dir/sub/x.log");
        let error = write_lines(&["[INFO] [host] x".to_owned()], Some(&path));
        assert!(
            error
                .as_ref()
                .is_err_and(|e| e.starts_with("HIPDNN_LOG_FILE='") && e.contains("x.log")),
            "{error:?}"
        );
    }
}
