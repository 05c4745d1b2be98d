//! Tests of the version rules, against versioning.md's tables.

use super::*;
use crate::model::TensorAttributes;

fn v(s: &str) -> Option<Version> {
    parse_plugin_api_version(s)
}

#[test]
fn parse_follows_sscanf() {
    assert_eq!(v("1.3.0"), Some(Version::new(1, 3, 0)));
    assert_eq!(v("1.3.0-rc1"), Some(Version::new(1, 3, 0)));
    assert_eq!(v("1.10.0"), Some(Version::new(1, 10, 0)));
    assert_eq!(v(" 1.4.0"), Some(Version::new(1, 4, 0)));
    assert_eq!(v("0.0.1"), Some(Version::new(0, 0, 1)));
    assert_eq!(v("1.3"), None);
    assert_eq!(v("v1.3.0"), None);
    assert_eq!(v(""), None);
    assert_eq!(v("1..3"), None);
    assert_eq!(v("-1.3.0"), None);
    assert_eq!(v("99999999999.0.0"), None);
}

#[test]
fn numeric_compare_is_not_lexicographic_on_text() {
    assert!(cmp_numeric(&Version::new(1, 10, 0), &API_1_4_0));
    assert!(!cmp_numeric(&Version::new(0, 0, 1), &API_1_0_0));
    let rc = Version::parse("1.3.0-rc1").unwrap_or_else(|e| panic!("{e}"));
    assert!(cmp_numeric(&rc, &API_1_3_0));
}

#[test]
fn major_rule() {
    assert_eq!(check_plugin_major(&API_1_3_0), MajorCheck::Accepted);
    assert_eq!(
        check_plugin_major(&Version::new(0, 0, 1)),
        MajorCheck::ToleratedMajorZero
    );
    assert_eq!(
        check_plugin_major(&Version::new(2, 0, 0)),
        MajorCheck::Rejected
    );
}

#[test]
fn feature_table_highest_first() {
    assert_eq!(
        minimum_version_for_features(false, false, false, false),
        API_1_0_0
    );
    assert_eq!(
        minimum_version_for_features(true, false, false, false),
        API_1_1_0
    );
    assert_eq!(
        minimum_version_for_features(true, true, false, false),
        API_1_2_0
    );
    assert_eq!(
        minimum_version_for_features(true, true, false, true),
        API_1_3_0
    );
    assert_eq!(
        minimum_version_for_features(false, false, true, false),
        API_1_3_0
    );
}

fn dense() -> Graph {
    Graph::new("g")
        .add_tensor(
            TensorAttributes::new()
                .set_uid(1)
                .set_dims(vec![1, 1, 1, 1]),
        )
        .add_tensor(
            TensorAttributes::new()
                .set_uid(2)
                .set_dims(vec![2, 1, 1, 1]),
        )
}

#[test]
fn decision_table_graphs() {
    let g0 = dense();
    assert_eq!(compute_minimum_plugin_api_version(&g0).version, API_1_0_0);
    assert!(compute_minimum_plugin_api_version(&g0).reasons.is_empty());

    let g1 = Graph {
        is_override_shape_enabled: true,
        ..dense()
    };
    assert_eq!(compute_minimum_plugin_api_version(&g1).version, API_1_1_0);

    let mut g2 = dense();
    g2.tensors[0].is_runtime_pass_by_value = true;
    assert_eq!(compute_minimum_plugin_api_version(&g2).version, API_1_2_0);

    let mut g3 = dense();
    g3.tensors[1].alignment = 32;
    assert_eq!(compute_minimum_plugin_api_version(&g3).version, API_1_3_0);

    let mut g4 = dense();
    g4.tensors[0].ragged_offset_tensor_uid = Some(2);
    assert_eq!(compute_minimum_plugin_api_version(&g4).version, API_1_3_0);
    assert_eq!(
        compute_minimum_plugin_api_version_upstream(&g4).version,
        API_1_3_0
    );

    let g5 = Graph {
        is_ragged_tensor_enabled: true,
        ..dense()
    };
    assert_eq!(compute_minimum_plugin_api_version(&g5).version, API_1_3_0);
    assert_eq!(
        compute_minimum_plugin_api_version_upstream(&g5).version,
        API_1_0_0
    );
}

#[test]
fn reasons_are_highest_first_and_name_tensors() {
    let mut g = Graph {
        is_override_shape_enabled: true,
        is_ragged_tensor_enabled: true,
        ..dense()
    };
    g.tensors[0].is_runtime_pass_by_value = true;
    g.tensors[1].alignment = 8;
    g.tensors[1].ragged_offset_tensor_uid = Some(1);
    let m = compute_minimum_plugin_api_version(&g);
    assert_eq!(m.version, API_1_3_0);
    let text: Vec<String> = m.reasons.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "graph field is_ragged_tensor_enabled is true (ragged tensors need 1.3.0)",
            "tensor uid 2 is ragged (ragged_offset_tensor_uid = 1; ragged tensors need 1.3.0)",
            "tensor uid 2 has alignment 8, not the default 16 (needs 1.3.0)",
            "tensor uid 1 has is_runtime_pass_by_value = true (needs 1.2.0)",
            "graph field is_override_shape_enabled is true (override shapes need 1.1.0)",
        ]
    );
}

#[test]
fn stamp_and_ceiling() {
    let mut g = dense();
    assert_eq!(graph_stamp(&g), API_1_0_0);
    assert!(!stamp_exceeds_ceiling(&g));
    g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 3, 0));
    assert!(!stamp_exceeds_ceiling(&g));
    g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 5, 0));
    assert!(stamp_exceeds_ceiling(&g));
}

#[test]
fn plugin_requirement_uses_features_not_stamp() {
    let mut g = dense();
    g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 3, 0));
    assert!(plugin_meets_requirement(&API_1_0_0, &g));
    g.tensors[0].ragged_offset_tensor_uid = Some(2);
    assert!(!plugin_meets_requirement(&API_1_2_0, &g));
    assert!(plugin_meets_requirement(&PROJECT_PLUGIN_API_VERSION, &g));
}

/// The graphs G0-G7 of versioning.md §7.
fn decision_graphs() -> Vec<Graph> {
    let ragged = || {
        let mut g = dense();
        g.tensors[0].ragged_offset_tensor_uid = Some(2);
        g
    };
    let g0 = dense();
    let g1 = Graph {
        is_override_shape_enabled: true,
        ..dense()
    };
    let mut g2 = dense();
    g2.tensors[0].is_runtime_pass_by_value = true;
    let mut g3 = dense();
    g3.tensors[0].alignment = 32;
    let g4 = ragged();
    let g5 = Graph {
        is_ragged_tensor_enabled: true,
        ..dense()
    };
    let mut g6 = Graph {
        is_ragged_tensor_enabled: true,
        ..ragged()
    };
    g6.tensors[1].is_runtime_pass_by_value = true;
    let g7 = Graph {
        is_override_shape_enabled: true,
        ..ragged()
    };
    vec![g0, g1, g2, g3, g4, g5, g6, g7]
}

/// One cell of the table: O offered, S skipped by version, X no override symbol, R rejected.
fn cell(declared: Option<&str>, override_symbol: bool, g: &Graph) -> char {
    match load_decision(declared) {
        LoadDecision::RejectUnparseable(_) | LoadDecision::RejectMajor(_) => 'R',
        LoadDecision::Accept(v) | LoadDecision::AcceptMajorZero(v) => {
            match graph_offer(&v, override_symbol, g) {
                GraphOffer::Offer => 'O',
                GraphOffer::SkipVersion { .. } => 'S',
                GraphOffer::SkipNoOverrideSymbol => 'X',
            }
        }
    }
}

#[test]
fn versioning_md_decision_table() {
    let rows: [(Option<&str>, bool, &str); 16] = [
        (None, false, "OSSSSSSS"),
        (Some("1.0.0"), false, "OSSSSSSS"),
        (Some("0.0.1"), false, "SSSSSSSS"),
        (Some("1.1.0"), false, "OXSSSSSS"),
        (Some("1.1.0"), true, "OOSSSSSS"),
        (Some("1.2.0"), false, "OXOSSSSS"),
        (Some("1.3.0"), false, "OXOOOOOX"),
        (Some("1.3.0"), true, "OOOOOOOO"),
        (Some("1.3.0-rc1"), false, "OXOOOOOX"),
        (Some("1.4.0"), false, "OXOOOOOX"),
        (Some("1.10.0"), false, "OXOOOOOX"),
        (Some("2.0.0"), false, "RRRRRRRR"),
        (Some("2.0.0"), true, "RRRRRRRR"),
        (Some("1.3"), false, "RRRRRRRR"),
        (Some("v1.3.0"), true, "RRRRRRRR"),
        (Some(""), false, "RRRRRRRR"),
    ];
    let graphs = decision_graphs();
    for (declared, symbol, expected) in rows {
        let got: String = graphs.iter().map(|g| cell(declared, symbol, g)).collect();
        assert_eq!(got, expected, "row {declared:?} override symbol {symbol}");
    }
}

#[test]
fn decisions_explain_themselves() {
    assert_eq!(
        load_decision(Some("2.0.0")).to_string(),
        "rejected: plugin API version 2.0.0 has major 2, the host requires 1"
    );
    assert_eq!(
        load_decision(Some("v1.3.0")).to_string(),
        "rejected: plugin API version \"v1.3.0\" is not MAJOR.MINOR.PATCH"
    );
    let g4 = &decision_graphs()[4];
    assert_eq!(
        graph_offer(&API_1_2_0, false, g4).to_string(),
        "skipped: plugin apiVersion=1.2.0, graph requires at least 1.3.0"
    );
}
