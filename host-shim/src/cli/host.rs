//! The shim as hipDNN's backend: plugins from `--plugin-dir`, `HIPDNN_PLUGIN_DIR` or the shim's
//! default places beside the executable, one handle per plugin, and per-graph dispatch with the
//! backend's skip lines.
//!
//! `--plugin-dir` and `HIPDNN_PLUGIN_DIR` follow hipDNN exactly (one path, replacing the default;
//! a relative one resolved against the executable's folder as hipDNN resolves it against its
//! backend library's). With neither, the shim looks further than hipDNN's one default, because a
//! checkout's plugin is never in `hipdnn_plugins/engines/` beside `target/<profile>/hipdnn-shim`:
//! it tries hipDNN's default, then the plugin cargo built beside the executable, then the layout
//! `cargo xtask dist` writes, and loads the first that holds a plugin (loading several would
//! load the same engines twice). Every place tried is reported, and all of them when none held
//! a plugin.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use hipdnn_shim::discovery::{
    PLUGIN_DIR_ENV, discover_plugin_files, engine_plugin_search_path, weakly_canonical,
};
use hipdnn_shim::dispatch::{Gate, GraphRequirements, gate, offer};
use hipdnn_shim::engine_id::hex_id;
use hipdnn_shim::log::{Log, Severity};
use hipdnn_shim::manager::PluginManager;
use ragged_schema::model::Graph;

use crate::error::ShimError;

/// The project plugin's file, as cargo builds it and `cargo xtask dist` installs it.
pub const PROJECT_PLUGIN_FILE: &str = "libhipdnn_provider_ragged_sdpa.so";

/// `cargo xtask dist`'s `lib/hipdnn_plugins/engines/` as seen from the checkout's
/// `target/<profile>/`, where cargo puts this executable.
const DIST_FROM_PROFILE_DIR: &str = "../../lib/hipdnn_plugins/engines";

/// The plugin asks for this to list its CPU host engine next to a usable GPU runtime; the shim
/// sets it to 1 when the environment leaves it unset (see `main`).
pub const HOST_ENGINE_ENV: &str = "HIPDNN_RAGGED_SDPA_HOST_ENGINE";

/// Why the shim looked at a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `--plugin-dir`, as given.
    Flag(OsString),
    /// `HIPDNN_PLUGIN_DIR`, as set.
    Env(OsString),
    /// hipDNN's default, `hipdnn_plugins/engines/` beside the backend library.
    HipdnnDefault,
    /// The project plugin cargo built into the executable's own profile directory.
    ProfileBuild,
    /// `cargo xtask dist`'s layout of the checkout whose `target/<profile>/` holds the executable.
    Dist,
}

impl Origin {
    fn describe(&self) -> String {
        let relative = |given: &OsStr| {
            if Path::new(given).is_absolute() {
                ""
            } else {
                ", relative: resolved against this executable's folder"
            }
        };
        match self {
            Origin::Flag(given) => {
                format!(
                    "--plugin-dir '{}'{}",
                    given.to_string_lossy(),
                    relative(given)
                )
            }
            Origin::Env(given) => format!(
                "{PLUGIN_DIR_ENV}='{}'{}",
                given.to_string_lossy(),
                relative(given)
            ),
            Origin::HipdnnDefault => "hipDNN's default".to_owned(),
            Origin::ProfileBuild => "the plugin cargo built beside this executable".to_owned(),
            Origin::Dist => "the layout `cargo xtask dist` writes".to_owned(),
        }
    }

    /// The path as the user typed it, for `--plugin-dir` and `HIPDNN_PLUGIN_DIR`.
    fn given(&self) -> Option<&OsStr> {
        match self {
            Origin::Flag(given) | Origin::Env(given) => Some(given),
            _ => None,
        }
    }
}

/// One place searched and the plugin files it held.
#[derive(Debug, Clone)]
pub struct Place {
    pub origin: Origin,
    pub path: PathBuf,
    pub files: Vec<PathBuf>,
}

/// Where the shim looked for plugins, in order, and which place it used.
#[derive(Debug, Clone)]
pub struct PluginSearch {
    /// The executable's folder, against which every relative path resolved.
    pub module_dir: PathBuf,
    pub places: Vec<Place>,
    /// The place used: the first that holds a plugin file; its files are the ones loaded.
    pub chosen: Option<usize>,
}

impl PluginSearch {
    /// The places in order, each with what it held and whether it was used.
    pub fn listing(&self) -> String {
        let mut out = format!(
            "plugin search, in order (relative paths resolve against {}, this executable's folder):",
            self.module_dir.display()
        );
        for (index, place) in self.places.iter().enumerate() {
            let state = match (place.files.len(), self.chosen) {
                (0, _) if !place.path.exists() => "nothing there".to_owned(),
                (0, _) => "no plugin file (*.so) in it".to_owned(),
                (n, Some(c)) if c == index => format!("{n} plugin file(s), used"),
                (n, _) => format!("{n} plugin file(s), not used: an earlier place comes first"),
            };
            let _ = write!(
                out,
                "\n  {}. {} ({}): {state}",
                index + 1,
                place.path.display(),
                place.origin.describe()
            );
        }
        out
    }

    /// The place used, in one line, for commands that run graphs.
    pub fn summary(&self) -> String {
        match self.chosen.map(|c| &self.places[c]) {
            Some(place) => format!(
                "plugins from {} ({})",
                place.path.display(),
                place.origin.describe()
            ),
            None => "no plugin found".to_owned(),
        }
    }

    /// Why nothing loaded: every place searched, the rejected files with their reasons, and what
    /// to do about it.
    pub fn failure_report(&self, manager: &PluginManager) -> String {
        let mut out = self.listing();
        for r in &manager.rejected {
            let _ = write!(
                out,
                "\nrejected {}: {}",
                r.path.display(),
                r.reason.replace('\n', "\n  ")
            );
        }
        out + &self.advice()
    }

    /// What to do when nothing loaded, each line starting with a newline: the current-directory
    /// reading of a relative path that exists there, and how to build or name a plugin.
    pub fn advice(&self) -> String {
        let mut out = String::new();
        let cwd = std::env::current_dir().ok();
        for place in &self.places {
            let Some(given) = place.origin.given() else {
                continue;
            };
            let from_cwd = cwd.as_ref().map(|d| d.join(given));
            if place.files.is_empty()
                && Path::new(given).is_relative()
                && from_cwd.as_ref().is_some_and(|p| p.exists())
            {
                let _ = write!(
                    out,
                    "\n'{}' exists relative to the current directory, but relative plugin paths \
                     resolve against this executable's folder (as hipDNN's against its backend \
                     library's): pass {}",
                    given.to_string_lossy(),
                    from_cwd.unwrap_or_default().display()
                );
            }
        }
        if self.places.iter().any(|p| p.origin.given().is_none()) {
            let release = if self.module_dir.file_name() == Some(OsStr::new("debug")) {
                ""
            } else {
                " --release"
            };
            let _ = write!(
                out,
                "\nbuild the project's plugin beside this executable with `cargo build{release} -p \
                 ragged-plugin` (`cargo xtask demo` does), lay it out with `cargo xtask dist{release}`, \
                 or name a plugin file or directory with --plugin-dir or {PLUGIN_DIR_ENV}"
            );
        }
        out
    }
}

/// The folder of this executable: hipDNN resolves plugin paths against its backend library's.
fn module_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The places to search: `--plugin-dir`, else `HIPDNN_PLUGIN_DIR` (non-empty), else the shim's
/// default order.
fn places_to_search(
    override_dir: Option<PathBuf>,
    env_value: Option<OsString>,
    module_dir: &Path,
) -> Vec<(Origin, PathBuf)> {
    match (override_dir, env_value.filter(|v| !v.is_empty())) {
        (Some(dir), _) => {
            let path = engine_plugin_search_path(Some(dir.as_os_str()), module_dir);
            vec![(Origin::Flag(dir.into_os_string()), path)]
        }
        (None, Some(value)) => {
            let path = engine_plugin_search_path(Some(&value), module_dir);
            vec![(Origin::Env(value), path)]
        }
        (None, None) => vec![
            (
                Origin::HipdnnDefault,
                engine_plugin_search_path(None, module_dir),
            ),
            // Not canonicalised: the file as cargo names it, even where it is a link.
            (Origin::ProfileBuild, module_dir.join(PROJECT_PLUGIN_FILE)),
            (
                Origin::Dist,
                weakly_canonical(&module_dir.join(DIST_FROM_PROFILE_DIR)),
            ),
        ],
    }
}

/// Searches every place (a missing one holds nothing: no file is opened that is not there) and
/// picks the first that holds a plugin file.
pub fn search(override_dir: Option<PathBuf>, log: &mut Log) -> PluginSearch {
    let module_dir = module_dir();
    let places: Vec<Place> =
        places_to_search(override_dir, std::env::var_os(PLUGIN_DIR_ENV), &module_dir)
            .into_iter()
            .map(|(origin, path)| {
                let files = if path.exists() {
                    discover_plugin_files(&path, log)
                } else {
                    Vec::new()
                };
                Place {
                    origin,
                    path,
                    files,
                }
            })
            .collect();
    let chosen = places.iter().position(|p| !p.files.is_empty());
    PluginSearch {
        module_dir,
        places,
        chosen,
    }
}

/// The search, and the chosen place's plugins loaded.
pub fn load_plugins(override_dir: Option<PathBuf>) -> (PluginSearch, PluginManager) {
    let mut manager = PluginManager::new();
    let search = search(override_dir, &mut manager.log);
    if let Some(place) = search.chosen.map(|c| &search.places[c]) {
        manager.load_files(place.files.iter().cloned());
    }
    (search, manager)
}

/// [`load_plugins`] for a command that runs graphs: where the plugins came from on stderr, and
/// an error listing every place searched when none loaded.
pub fn require_plugins(override_dir: Option<PathBuf>) -> Result<PluginManager, ShimError> {
    let (search, mut manager) = load_plugins(override_dir);
    if manager.plugins.is_empty() {
        flush_log(&mut manager.log);
        return Err(ShimError::NoPlugin {
            report: search.failure_report(&manager),
        });
    }
    eprintln!("{}", search.summary());
    Ok(manager)
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

/// The candidates that run on a device: those that are not `--host-engine`s. What `--cuda` may
/// choose from when no `--engine` names one, so that a host engine never runs in a device
/// engine's place (its result would be reported as a `--cuda` one).
pub fn device_engines(candidates: &[Candidate], host_engines: &[String]) -> Vec<Candidate> {
    candidates
        .iter()
        .filter(|c| !host_engines.contains(&c.engine_name))
        .cloned()
        .collect()
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
                hint: no_host_engine_hint(
                    candidates,
                    host_engines,
                    std::env::var_os(HOST_ENGINE_ENV).as_deref(),
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

/// Why no engine took host buffers, in the words that fit: no engine applied at all (the
/// plugins' reasons are logged above), or those that did are device engines, and what to do.
fn no_host_engine_hint(
    candidates: &[Candidate],
    host_engines: &[String],
    host_engine_env: Option<&OsStr>,
) -> String {
    if candidates.is_empty() {
        return " (each plugin's reason is in the log lines above)".to_owned();
    }
    let names: Vec<&str> = candidates.iter().map(|c| c.engine_name.as_str()).collect();
    let mut hint = format!(
        " that takes host buffers (--host-engine: {}); applicable: [{}], which need device \
         buffers: run them with --cuda",
        host_engines.join(", "),
        names.join(", ")
    );
    if let Some(value) = host_engine_env.filter(|v| *v != OsStr::new("1")) {
        let _ = write!(
            hint,
            "; {HOST_ENGINE_ENV}='{}' in the environment keeps the project plugin's CPU host \
             engine unlisted next to a GPU runtime (the shim sets it to 1 only when it is unset)",
            value.to_string_lossy()
        );
    }
    hint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_engines_leave_out_the_host_engines() {
        let candidate = |name: &str| Candidate {
            plugin_index: 0,
            engine_id: 1,
            engine_name: name.to_owned(),
        };
        let candidates = [candidate("HOST"), candidate("CUDA"), candidate("AITER")];
        let names: Vec<String> = device_engines(&candidates, &["HOST".to_owned()])
            .into_iter()
            .map(|c| c.engine_name)
            .collect();
        assert_eq!(names, ["CUDA", "AITER"]);
        assert!(device_engines(&candidates[..1], &["HOST".to_owned()]).is_empty());
    }

    #[test]
    fn without_flag_or_variable_the_default_places_come_in_order() {
        let module = Path::new("/opt/ws/target/release");
        // An empty HIPDNN_PLUGIN_DIR counts as unset, as in hipDNN.
        assert_eq!(
            places_to_search(None, Some(OsString::new()), module),
            vec![
                (
                    Origin::HipdnnDefault,
                    PathBuf::from("/opt/ws/target/release/hipdnn_plugins/engines")
                ),
                (
                    Origin::ProfileBuild,
                    PathBuf::from("/opt/ws/target/release/libhipdnn_provider_ragged_sdpa.so")
                ),
                (
                    Origin::Dist,
                    PathBuf::from("/opt/ws/lib/hipdnn_plugins/engines")
                ),
            ]
        );
    }

    #[test]
    fn the_flag_beats_the_variable_and_both_resolve_against_the_executables_folder() {
        let module = Path::new("/opt/ws/target/release");
        assert_eq!(
            places_to_search(
                Some(PathBuf::from("mine")),
                Some(OsString::from("/elsewhere")),
                module
            ),
            vec![(
                Origin::Flag(OsString::from("mine")),
                PathBuf::from("/opt/ws/target/release/mine")
            )]
        );
        assert_eq!(
            places_to_search(None, Some(OsString::from("../x.so")), module),
            vec![(
                Origin::Env(OsString::from("../x.so")),
                PathBuf::from("/opt/ws/target/x.so")
            )]
        );
    }

    #[test]
    fn the_no_engine_hint_gives_the_real_reason() {
        let host = ["RAGGED_SDPA_HOST_REFERENCE".to_owned()];
        assert_eq!(
            no_host_engine_hint(&[], &host, None),
            " (each plugin's reason is in the log lines above)"
        );
        let cuda = Candidate {
            plugin_index: 0,
            engine_id: 1,
            engine_name: "RAGGED_SDPA_CUDA_FMHA".to_owned(),
        };
        let hint = no_host_engine_hint(std::slice::from_ref(&cuda), &host, None);
        assert_eq!(
            hint,
            " that takes host buffers (--host-engine: RAGGED_SDPA_HOST_REFERENCE); applicable: \
             [RAGGED_SDPA_CUDA_FMHA], which need device buffers: run them with --cuda"
        );
        assert!(!hint.contains("HIPDNN_RAGGED_SDPA_HOST_ENGINE"), "{hint}");
        let hint = no_host_engine_hint(&[cuda], &host, Some(OsStr::new("0")));
        assert!(
            hint.ends_with(
                "; HIPDNN_RAGGED_SDPA_HOST_ENGINE='0' in the environment keeps the project \
                 plugin's CPU host engine unlisted next to a GPU runtime (the shim sets it to 1 \
                 only when it is unset)"
            ),
            "{hint}"
        );
    }

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
