//! Suite (b): version gating. Fixture plugins declaring every API version of versioning.md §7 are
//! loaded through the host's load sequence and offered the graphs G0–G7; each cell records what
//! the host did: **O** offered (`GetApplicableEngineIds` called), **S** skipped by version,
//! **X** skipped for the missing override entry point, **R** rejected at load.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::report::{CaseResult, Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::dispatch::{Gate, GraphRequirements, gate, offer};
use hipdnn_shim::graphs::{GatingGraph, decision_table_graphs};
use hipdnn_shim::manager::PluginManager;

/// The three fixture artefacts (see the fixture-plugin crate docs).
#[derive(Debug, Clone)]
pub struct FixtureArtifacts {
    /// `GetApiVersion` from the sidecar; no override entry point.
    pub main: PathBuf,
    /// No `GetApiVersion`.
    pub no_api_version: PathBuf,
    /// `GetApiVersion` from the sidecar plus `ExecuteOpGraphWithOverrides`.
    pub with_overrides: PathBuf,
}

pub const FIXTURE_MAIN_FILE: &str = "libhipdnn_fixture_plugin.so";
pub const FIXTURE_NO_API_VERSION_FILE: &str = "libhipdnn_fixture_no_api_version.so";
pub const FIXTURE_WITH_OVERRIDES_FILE: &str = "libhipdnn_fixture_with_overrides.so";

/// The command that builds all three fixture artefacts in the dev profile (`target/debug`).
pub const FIXTURE_BUILD_COMMAND: &str = "cargo build -p fixture-plugin --lib --examples";

/// The command that builds the fixture artefacts into `profile_dir`, a cargo profile directory
/// `<target>/<profile>`: `--release` for `release`, `--profile NAME` for a custom profile, nothing
/// for `debug` (the dev profile's directory). The directory's name is the profile's, so a tool
/// run from `target/release` names the command that fills `target/release`, not `target/debug`.
pub fn fixture_build_command(profile_dir: &Path) -> String {
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        None | Some("debug") => FIXTURE_BUILD_COMMAND.to_owned(),
        Some("release") => "cargo build --release -p fixture-plugin --lib --examples".to_owned(),
        Some(profile) => {
            format!("cargo build --profile {profile} -p fixture-plugin --lib --examples")
        }
    }
}

impl FixtureArtifacts {
    /// Finds the artefacts under a cargo profile directory (`<target>/debug`): the library in the
    /// profile directory or `deps/` (where `cargo test` leaves it), the variants in `examples/`.
    /// When any is missing the error names every path looked at for each missing one and the
    /// command that builds them into this directory.
    pub fn locate(profile_dir: &Path) -> Result<FixtureArtifacts, HostError> {
        let main = [
            profile_dir.join("deps").join(FIXTURE_MAIN_FILE),
            profile_dir.join(FIXTURE_MAIN_FILE),
        ];
        let no_api_version = [profile_dir
            .join("examples")
            .join(FIXTURE_NO_API_VERSION_FILE)];
        let with_overrides = [profile_dir
            .join("examples")
            .join(FIXTURE_WITH_OVERRIDES_FILE)];
        match (
            newest_existing(&main),
            newest_existing(&no_api_version),
            newest_existing(&with_overrides),
        ) {
            (Some(main), Some(no_api_version), Some(with_overrides)) => Ok(FixtureArtifacts {
                main,
                no_api_version,
                with_overrides,
            }),
            (main_found, no_api_found, with_found) => {
                let missing: Vec<String> = [
                    (main_found.is_none(), &main[..]),
                    (no_api_found.is_none(), &no_api_version[..]),
                    (with_found.is_none(), &with_overrides[..]),
                ]
                .into_iter()
                .filter(|(missing, _)| *missing)
                .map(|(_, candidates)| {
                    candidates
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                })
                .collect();
                Err(HostError::Harness(format!(
                    "the gating suite's fixture plugins are not built in {}: missing {}; build \
                     them with `{}`, or pass --fixture-dir with the cargo profile directory that \
                     holds them",
                    profile_dir.display(),
                    missing.join(", "),
                    fixture_build_command(profile_dir)
                )))
            }
        }
    }
}

/// Of several build outputs for the same artefact, the most recently written one (cargo leaves
/// an older uplifted copy behind when only `deps/` is refreshed).
pub fn newest_existing(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates
        .iter()
        .filter_map(|p| {
            let modified = std::fs::metadata(p).ok()?.modified().ok()?;
            Some((modified, p.clone()))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, p)| p)
}

/// Which artefact a row loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    NoApiVersionSymbol,
    Main,
    WithOverrides,
}

/// One row of the table: a declared version (sidecar text) and the override symbol.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub label: &'static str,
    pub variant: Variant,
    /// Sidecar contents; `None` for the variant without `GetApiVersion`.
    pub declared: Option<&'static str>,
}

/// The rows of versioning.md §7. "any" override rows are run with both variants.
pub fn decision_table_rows() -> Vec<Row> {
    use Variant::*;
    let row = |label, variant, declared| Row {
        label,
        variant,
        declared,
    };
    vec![
        row("symbol absent (=> 1.0.0)", NoApiVersionSymbol, None),
        row("\"1.0.0\"", Main, Some("1.0.0")),
        row("\"0.0.1\"", Main, Some("0.0.1")),
        row("\"1.1.0\"", Main, Some("1.1.0")),
        row("\"1.1.0\" + override", WithOverrides, Some("1.1.0")),
        row("\"1.2.0\"", Main, Some("1.2.0")),
        row("\"1.3.0\"", Main, Some("1.3.0")),
        row("\"1.3.0\" + override", WithOverrides, Some("1.3.0")),
        row("\"1.3.0-rc1\"", Main, Some("1.3.0-rc1")),
        row("\"1.4.0\"", Main, Some("1.4.0")),
        // The project plugin's own row (versioning.md §6, revised 2026-12-01): it exports the
        // override entry point, so G1 and G7 are offered too.
        row("\"1.4.0\" + override", WithOverrides, Some("1.4.0")),
        row("\"1.10.0\"", Main, Some("1.10.0")),
        row("\"2.0.0\"", Main, Some("2.0.0")),
        row("\"2.0.0\" + override", WithOverrides, Some("2.0.0")),
        row("\"1.3\"", Main, Some("1.3")),
        row("\"v1.3.0\"", Main, Some("v1.3.0")),
        row("\"\"", Main, Some("")),
        row("\"v1.3.0\" + override", WithOverrides, Some("v1.3.0")),
    ]
}

/// versioning.md §7 transcribed by hand, in the order of [`decision_table_rows`] ("any" rows once
/// per fixture variant). Not derived from any code: it is what the matrix is checked against.
pub const EXPECTED: [(&str, &str); 18] = [
    ("symbol absent (=> 1.0.0)", "OSSSSSSS"),
    ("\"1.0.0\"", "OSSSSSSS"),
    ("\"0.0.1\"", "SSSSSSSS"),
    ("\"1.1.0\"", "OXSSSSSS"),
    ("\"1.1.0\" + override", "OOSSSSSS"),
    ("\"1.2.0\"", "OXOSSSSS"),
    ("\"1.3.0\"", "OXOOOOOX"),
    ("\"1.3.0\" + override", "OOOOOOOO"),
    ("\"1.3.0-rc1\"", "OXOOOOOX"),
    ("\"1.4.0\"", "OXOOOOOX"),
    ("\"1.4.0\" + override", "OOOOOOOO"),
    ("\"1.10.0\"", "OXOOOOOX"),
    ("\"2.0.0\"", "RRRRRRRR"),
    ("\"2.0.0\" + override", "RRRRRRRR"),
    ("\"1.3\"", "RRRRRRRR"),
    ("\"v1.3.0\"", "RRRRRRRR"),
    ("\"\"", "RRRRRRRR"),
    ("\"v1.3.0\" + override", "RRRRRRRR"),
];

/// One case per row: the row's cells against [`EXPECTED`].
pub fn report(matrix: &GatingMatrix) -> Report {
    let mut report = Report::default();
    for (i, row) in matrix.rows.iter().enumerate() {
        let got: String = row.cells.iter().collect();
        let want = EXPECTED.get(i).filter(|(label, _)| *label == row.row.label);
        let outcome = match want {
            None => Outcome::Fail(format!("no expected row for '{}'", row.row.label)),
            Some((_, cells)) if *cells == got => Outcome::Pass,
            Some((_, cells)) => Outcome::Fail(format!(
                "cells {got}, versioning.md §7 says {cells}\n{}",
                row.log.join("\n")
            )),
        };
        report.push(CaseResult {
            suite: "gating".into(),
            name: format!("fixture {}", row.row.label),
            outcome,
            details: vec![format!("G0..G7: {got}")],
            duration: Duration::ZERO,
        });
    }
    report
}

/// The plugin under test against G0–G7: its cells must equal the §7 row for its declared version
/// (only declared versions that have a row are checked). Load failures are reported as R rows.
pub fn check_plugin(path: &Path) -> Report {
    let mut report = Report::default();
    let graphs = decision_table_graphs();
    let mut manager = PluginManager::new();
    manager.load_file(path);
    let file = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let (label, cells) = match manager.plugins.first() {
        None => ("(rejected)".to_owned(), "R".repeat(graphs.len())),
        Some(plugin) => {
            let overrides = plugin.plugin.engine().has_execute_with_overrides;
            let label = match &plugin.api_version_text {
                None => "symbol absent (=> 1.0.0)".to_owned(),
                Some(v) if overrides => format!("\"{v}\" + override"),
                Some(v) => format!("\"{v}\""),
            };
            let cells = match plugin.plugin.create_handle() {
                Err(e) => {
                    report.push(CaseResult {
                        suite: "gating".into(),
                        name: format!("{file}::create_handle"),
                        outcome: Outcome::Fail(e.to_string()),
                        details: vec![],
                        duration: Duration::ZERO,
                    });
                    return report;
                }
                Ok(handle) => graphs
                    .iter()
                    .map(|g| {
                        let req = GraphRequirements::of(&g.graph);
                        match gate(plugin, &req, &mut manager.log) {
                            Gate::Offer => {
                                let bytes = ragged_schema::wire::encode_graph(&g.graph);
                                match offer(plugin, &handle, &bytes, &mut manager.log) {
                                    Ok(_) => 'O',
                                    Err(_) => 'E',
                                }
                            }
                            Gate::SkipVersion => 'S',
                            Gate::SkipOverride => 'X',
                        }
                    })
                    .collect(),
            };
            (label, cells)
        }
    };
    let outcome = match EXPECTED.iter().find(|(l, _)| *l == label) {
        Some((_, want)) if *want == cells => Outcome::Pass,
        Some((_, want)) => Outcome::Fail(format!("cells {cells}, versioning.md §7 says {want}")),
        None => Outcome::Skip(format!(
            "declared version {label} has no row in versioning.md §7"
        )),
    };
    report.push(CaseResult {
        suite: "gating".into(),
        name: format!("{file} declared {label}"),
        outcome,
        details: vec![format!("G0..G7: {cells}")],
        duration: Duration::ZERO,
    });
    report
}

/// One row's outcome.
#[derive(Debug, Clone)]
pub struct RowResult {
    pub row: Row,
    /// One letter per graph (O/S/X/R), G0 first.
    pub cells: Vec<char>,
    /// The host's log lines for the row (load and skip lines), paths redacted.
    pub log: Vec<String>,
}

/// The whole matrix.
pub struct GatingMatrix {
    pub graphs: Vec<GatingGraph>,
    pub rows: Vec<RowResult>,
}

impl GatingMatrix {
    /// The table in versioning.md §7's shape, for snapshots and reports.
    pub fn table(&self) -> String {
        let mut out = String::from("| Declared API version |");
        for g in &self.graphs {
            let _ = write!(out, " {} |", g.id);
        }
        out.push('\n');
        for row in &self.rows {
            let _ = write!(out, "| {} |", row.row.label);
            for c in &row.cells {
                let _ = write!(out, " {c} |");
            }
            out.push('\n');
        }
        out
    }
}

/// Serialises a graph for `GetApplicableEngineIds`.
pub type GraphEncoder = dyn Fn(&ragged_schema::model::Graph) -> Result<Vec<u8>, HostError>;

/// Runs every row against every graph. Each row gets its own directory under `scratch` holding a
/// copy of the artefact and its sidecar, and its own host (manager), as a fresh process would.
pub fn run_matrix(
    fixtures: &FixtureArtifacts,
    scratch: &Path,
    encode: &GraphEncoder,
) -> Result<GatingMatrix, HostError> {
    let graphs = decision_table_graphs();
    let encoded = graphs
        .iter()
        .map(|g| encode(&g.graph))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    for (i, row) in decision_table_rows().into_iter().enumerate() {
        let dir = scratch.join(format!("row{i:02}"));
        let path = stage_fixture(fixtures, &row, &dir)?;
        rows.push(run_row(row, &path, &graphs, &encoded)?);
    }
    Ok(GatingMatrix { graphs, rows })
}

/// Copies the row's artefact into `dir` (a distinct path is a distinct `dlopen` instance) and
/// writes its sidecar.
fn stage_fixture(fixtures: &FixtureArtifacts, row: &Row, dir: &Path) -> Result<PathBuf, HostError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HostError::Io { path, source }
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let source = match row.variant {
        Variant::Main => &fixtures.main,
        Variant::NoApiVersionSymbol => &fixtures.no_api_version,
        Variant::WithOverrides => &fixtures.with_overrides,
    };
    let target = dir.join("libfixture.so");
    std::fs::copy(source, &target).map_err(io(source))?;
    if let Some(declared) = row.declared {
        let sidecar = dir.join("libfixture.so.api-version");
        std::fs::write(&sidecar, format!("{declared}\n")).map_err(io(&sidecar))?;
    }
    Ok(target)
}

fn run_row(
    row: Row,
    path: &Path,
    graphs: &[GatingGraph],
    encoded: &[Vec<u8>],
) -> Result<RowResult, HostError> {
    let mut manager = PluginManager::new();
    manager.load_file(path);
    let mut cells = Vec::new();
    match manager.plugins.first() {
        None => cells.extend(graphs.iter().map(|_| 'R')),
        Some(plugin) => {
            let handle = plugin.plugin.create_handle()?;
            for (graph, bytes) in graphs.iter().zip(encoded) {
                let requirements = GraphRequirements::of(&graph.graph);
                requirements.check_ceiling()?;
                let cell = match gate(plugin, &requirements, &mut manager.log) {
                    Gate::Offer => {
                        offer(plugin, &handle, bytes, &mut manager.log)?;
                        'O'
                    }
                    Gate::SkipVersion => 'S',
                    Gate::SkipOverride => 'X',
                };
                cells.push(cell);
            }
        }
    }
    let dir = path.parent().map(|d| d.display().to_string());
    let log = manager
        .log
        .records()
        .iter()
        .map(|r| {
            let line = r.to_string();
            match &dir {
                Some(d) => line.replace(d.as_str(), "[dir]"),
                None => line,
            }
        })
        .collect();
    Ok(RowResult { row, cells, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_build_command_fills_the_profile_directory_it_is_for() {
        assert_eq!(
            fixture_build_command(Path::new("/ws/target/debug")),
            "cargo build -p fixture-plugin --lib --examples"
        );
        assert_eq!(
            fixture_build_command(Path::new("/ws/target/release")),
            "cargo build --release -p fixture-plugin --lib --examples"
        );
        assert_eq!(
            fixture_build_command(Path::new("/ws/target/bench")),
            "cargo build --profile bench -p fixture-plugin --lib --examples"
        );
    }
}
