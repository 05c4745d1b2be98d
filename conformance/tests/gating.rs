//! Suite (b) against the fixture plugins: the whole decision matrix of versioning.md §7 as one
//! snapshot, and the same matrix compared cell by cell with a hand transcription of the spec's
//! table (so a snapshot accepted by mistake still cannot disagree with the spec).

mod common;

use ragged_conformance::suites::gating::{EXPECTED, FixtureArtifacts, run_matrix};

/// Each test stages its fixtures in its own directory: tests run in parallel threads.
fn matrix(scratch_name: &str) -> ragged_conformance::suites::gating::GatingMatrix {
    let fixtures =
        FixtureArtifacts::locate(&common::profile_dir()).unwrap_or_else(|e| panic!("{e}"));
    let scratch = common::scratch(scratch_name);
    let matrix = run_matrix(&fixtures, &scratch, &|g| {
        Ok(ragged_schema::wire::encode_graph(g))
    });
    // The staged fixture copies are about 90 MB a run: never leave them behind.
    let _ = std::fs::remove_dir_all(&scratch);
    matrix.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn decision_matrix_matches_versioning_md_table() {
    let m = matrix("gating-table");
    assert_eq!(m.rows.len(), EXPECTED.len());
    for (row, (label, cells)) in m.rows.iter().zip(EXPECTED) {
        assert_eq!(row.row.label, label);
        let got: String = row.cells.iter().collect();
        assert_eq!(got, cells, "row {label}; host log:\n{}", row.log.join("\n"));
    }
}

#[test]
fn decision_matrix_snapshot_with_host_log() {
    let m = matrix("gating-snapshot");
    let mut text = m.table();
    for row in &m.rows {
        text.push_str(&format!("\n## {}\n", row.row.label));
        for line in &row.log {
            text.push_str(line);
            text.push('\n');
        }
    }
    insta::assert_snapshot!("decision_table", text);
}
