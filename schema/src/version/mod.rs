//! Engine-plugin API versions (versioning.md): the constants, the per-graph minimum version with
//! its reasons, upstream's version-string parsing and the load-time major rule.

use std::fmt;

use semver::Version;

use crate::model::{DEFAULT_ALIGNMENT, EngineApiVersion, Graph};

/// Baseline C ABI.
pub const API_1_0_0: Version = Version::new(1, 0, 0);
/// Override shapes at execute (RFC 0008).
pub const API_1_1_0: Version = Version::new(1, 1, 0);
/// Runtime pass-by-value scalars (RFC 0016).
pub const API_1_2_0: Version = Version::new(1, 2, 0);
/// Ragged tensors (RFC 0014) and non-default tensor alignment.
pub const API_1_3_0: Version = Version::new(1, 3, 0);
/// `hipdnnEnginePluginGetEngineName`; gates no graph feature.
pub const API_1_4_0: Version = Version::new(1, 4, 0);

/// Deserialize ceiling: "must equal the highest feature-gated version constant". A graph
/// stamped above it is rejected by the host and declined by the plugin.
pub const MAX_SUPPORTED_API_VERSION: Version = API_1_3_0;

/// The only major a host accepts without comment (`HIPDNN_ENGINE_API_VERSION_MAJOR`).
pub const ENGINE_API_VERSION_MAJOR: u64 = 1;

/// The version the project's plugin declares, and the host shim reports as its own.
pub const PROJECT_PLUGIN_API_VERSION: Version = API_1_4_0;

/// Why a graph needs a given API version. Each reason names the tensor that triggered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionReason {
    /// `Graph.is_ragged_tensor_enabled` is set (project flag).
    RaggedFlag,
    /// A tensor has `ragged_offset_tensor_uid` set.
    RaggedTensor { uid: i64, aux_uid: i64 },
    /// A tensor's alignment differs from the default 16.
    NonDefaultAlignment { uid: i64, alignment: i64 },
    /// A tensor is delivered by value at execute.
    RuntimePassByValue { uid: i64 },
    /// `Graph.is_override_shape_enabled` is set.
    OverrideShape,
}

impl VersionReason {
    pub fn required_version(&self) -> Version {
        match self {
            VersionReason::RaggedFlag
            | VersionReason::RaggedTensor { .. }
            | VersionReason::NonDefaultAlignment { .. } => API_1_3_0,
            VersionReason::RuntimePassByValue { .. } => API_1_2_0,
            VersionReason::OverrideShape => API_1_1_0,
        }
    }
}

impl fmt::Display for VersionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.required_version();
        match self {
            VersionReason::RaggedFlag => {
                write!(
                    f,
                    "graph field is_ragged_tensor_enabled is true (ragged tensors need {v})"
                )
            }
            VersionReason::RaggedTensor { uid, aux_uid } => write!(
                f,
                "tensor uid {uid} is ragged (ragged_offset_tensor_uid = {aux_uid}; ragged tensors need {v})"
            ),
            VersionReason::NonDefaultAlignment { uid, alignment } => write!(
                f,
                "tensor uid {uid} has alignment {alignment}, not the default {DEFAULT_ALIGNMENT} (needs {v})"
            ),
            VersionReason::RuntimePassByValue { uid } => write!(
                f,
                "tensor uid {uid} has is_runtime_pass_by_value = true (needs {v})"
            ),
            VersionReason::OverrideShape => write!(
                f,
                "graph field is_override_shape_enabled is true (override shapes need {v})"
            ),
        }
    }
}

/// The version a plugin must declare to be offered a graph, and every reason for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimumApiVersion {
    pub version: Version,
    /// Highest required version first; empty for a baseline (1.0.0) graph.
    pub reasons: Vec<VersionReason>,
}

/// The four inputs of upstream's `computeMinimumEnginePluginApiVersion`, in its order.
///
/// "MUST be ordered by highest version to lowest": the first true input decides.
pub fn minimum_version_for_features(
    override_shape: bool,
    pass_by_value: bool,
    ragged: bool,
    non_default_alignment: bool,
) -> Version {
    if ragged || non_default_alignment {
        API_1_3_0
    } else if pass_by_value {
        API_1_2_0
    } else if override_shape {
        API_1_1_0
    } else {
        API_1_0_0
    }
}

/// Project rule (versioning.md §6): ragged = flag OR any ragged tensor.
pub fn compute_minimum_plugin_api_version(graph: &Graph) -> MinimumApiVersion {
    compute(graph, true)
}

/// Upstream backend's rule, which does not know the project flag (conformance: G5 ⇒ 1.0.0).
pub fn compute_minimum_plugin_api_version_upstream(graph: &Graph) -> MinimumApiVersion {
    compute(graph, false)
}

fn compute(graph: &Graph, honour_flag: bool) -> MinimumApiVersion {
    let mut reasons = Vec::new();
    if honour_flag && graph.is_ragged_tensor_enabled {
        reasons.push(VersionReason::RaggedFlag);
    }
    reasons.extend(graph.tensors.iter().filter_map(|t| {
        t.ragged_offset_tensor_uid
            .map(|aux_uid| VersionReason::RaggedTensor {
                uid: t.uid,
                aux_uid,
            })
    }));
    reasons.extend(
        graph
            .tensors
            .iter()
            .filter(|t| t.alignment != DEFAULT_ALIGNMENT)
            .map(|t| VersionReason::NonDefaultAlignment {
                uid: t.uid,
                alignment: t.alignment,
            }),
    );
    reasons.extend(
        graph
            .tensors
            .iter()
            .filter(|t| t.is_runtime_pass_by_value)
            .map(|t| VersionReason::RuntimePassByValue { uid: t.uid }),
    );
    if graph.is_override_shape_enabled {
        reasons.push(VersionReason::OverrideShape);
    }
    let version = minimum_version_for_features(
        graph.is_override_shape_enabled,
        graph.tensors.iter().any(|t| t.is_runtime_pass_by_value),
        (honour_flag && graph.is_ragged_tensor_enabled)
            || graph.tensors.iter().any(|t| t.is_ragged()),
        graph
            .tensors
            .iter()
            .any(|t| t.alignment != DEFAULT_ALIGNMENT),
    );
    MinimumApiVersion { version, reasons }
}

/// The graph's stamp, absent reading as 1.0.0 (upstream `fromEngineApiVersion(nullptr)`).
pub fn graph_stamp(graph: &Graph) -> Version {
    graph
        .min_required_engine_api_version
        .map_or(API_1_0_0, EngineApiVersion::to_semver)
}

/// True when the stamp is above [`MAX_SUPPORTED_API_VERSION`]: the host rejects such a graph at
/// deserialize and the plugin declines it.
pub fn stamp_exceeds_ceiling(graph: &Graph) -> bool {
    graph_stamp(graph) > MAX_SUPPORTED_API_VERSION
}

/// Upstream `Version` parsing: `sscanf("%d.%d.%d")` must convert three integers; trailing text
/// is ignored. So `"1.3.0-rc1"` is 1.3.0 while `"1.3"`, `"v1.3.0"` and `""` are `None`.
///
/// Like `%d`, each number may be preceded by whitespace and a sign. A negative component (which
/// `semver` cannot hold) or one beyond `i32` (undefined behaviour in C) is `None`: both lead to
/// rejection at load either way, since no such major is 1 or 0.
pub fn parse_plugin_api_version(s: &str) -> Option<Version> {
    let mut rest = s;
    let mut parts = [0u64; 3];
    for (i, part) in parts.iter_mut().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix('.')?;
        }
        let (value, tail) = scan_decimal_int(rest)?;
        *part = u64::try_from(value).ok()?;
        rest = tail;
    }
    Some(Version::new(parts[0], parts[1], parts[2]))
}

/// One `%d` conversion: optional whitespace, optional sign, at least one digit.
fn scan_decimal_int(s: &str) -> Option<(i32, &str)> {
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let sign_len = usize::from(s.starts_with(['+', '-']));
    let digits_len = s[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
    if digits_len == 0 {
        return None;
    }
    let end = sign_len + digits_len;
    let value = s[..end].parse::<i32>().ok()?;
    Some((value, &s[end..]))
}

/// Outcome of the load-time major check (versioning.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MajorCheck {
    /// Major 1.
    Accepted,
    /// Major 0: admitted by the transitional shim (INFO log), but below 1.0.0, so the
    /// per-graph filter skips it for every graph.
    ToleratedMajorZero,
    /// Any other major: "ERROR: ENGINE PLUGIN ABI VALIDATION FAILED".
    Rejected,
}

pub fn check_plugin_major(version: &Version) -> MajorCheck {
    match version.major {
        ENGINE_API_VERSION_MAJOR => MajorCheck::Accepted,
        0 => MajorCheck::ToleratedMajorZero,
        _ => MajorCheck::Rejected,
    }
}

/// Rule 1 of the backend skip rule: offer the graph only if the plugin's declared version is at
/// least the version computed from the graph's features (never the stamp).
pub fn plugin_meets_requirement(plugin_version: &Version, graph: &Graph) -> bool {
    cmp_numeric(
        plugin_version,
        &compute_minimum_plugin_api_version(graph).version,
    )
}

/// Numeric (major, minor, patch) comparison, ignoring pre-release and build metadata, as
/// upstream's `Version` has neither.
pub fn cmp_numeric(have: &Version, need: &Version) -> bool {
    (have.major, have.minor, have.patch) >= (need.major, need.minor, need.patch)
}

/// What a host does with a plugin when loading it (versioning.md §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadDecision {
    /// Major 1: admitted.
    Accept(Version),
    /// Major 0: admitted with an INFO log, but skipped for every graph (below 1.0.0).
    AcceptMajorZero(Version),
    /// `sscanf("%d.%d.%d")` fails: rejected, `HIPDNN_STATUS_NOT_SUPPORTED`.
    RejectUnparseable(String),
    /// Any other major: "ERROR: ENGINE PLUGIN ABI VALIDATION FAILED".
    RejectMajor(Version),
}

impl fmt::Display for LoadDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadDecision::Accept(v) => write!(f, "accepted (plugin API version {v})"),
            LoadDecision::AcceptMajorZero(v) => write!(
                f,
                "accepted with major 0 (plugin API version {v}); below {API_1_0_0}, so no graph is offered"
            ),
            LoadDecision::RejectUnparseable(text) => write!(
                f,
                "rejected: plugin API version {text:?} is not MAJOR.MINOR.PATCH"
            ),
            LoadDecision::RejectMajor(v) => write!(
                f,
                "rejected: plugin API version {v} has major {}, the host requires {ENGINE_API_VERSION_MAJOR}",
                v.major
            ),
        }
    }
}

/// Load-time check of the string a plugin's `hipdnnPluginGetApiVersion` returned; `None` when
/// the symbol is absent, which upstream reads as "1.0.0".
pub fn load_decision(declared: Option<&str>) -> LoadDecision {
    let Some(text) = declared else {
        return LoadDecision::Accept(API_1_0_0);
    };
    match parse_plugin_api_version(text) {
        None => LoadDecision::RejectUnparseable(text.to_string()),
        Some(v) => match check_plugin_major(&v) {
            MajorCheck::Accepted => LoadDecision::Accept(v),
            MajorCheck::ToleratedMajorZero => LoadDecision::AcceptMajorZero(v),
            MajorCheck::Rejected => LoadDecision::RejectMajor(v),
        },
    }
}

/// Per-graph, per-plugin outcome of the backend skip rule (versioning.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphOffer {
    /// Call the plugin's `GetApplicableEngineIds` (it may still decline with 0 engines).
    Offer,
    /// Rule 1: the plugin's version is below what the graph's features require.
    SkipVersion { plugin: Version, required: Version },
    /// Rule 2: override-enabled graph, plugin lacks `hipdnnEnginePluginExecuteOpGraphWithOverrides`.
    SkipNoOverrideSymbol,
}

impl fmt::Display for GraphOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphOffer::Offer => f.write_str("offered"),
            GraphOffer::SkipVersion { plugin, required } => write!(
                f,
                "skipped: plugin apiVersion={plugin}, graph requires at least {required}"
            ),
            GraphOffer::SkipNoOverrideSymbol => f.write_str(
                "skipped: graph enables override shapes and the plugin does not export hipdnnEnginePluginExecuteOpGraphWithOverrides",
            ),
        }
    }
}

/// Applies the skip rule with the project's required version (flag OR ragged tensors). The stamp
/// plays no part here; see [`stamp_exceeds_ceiling`] for the deserialize-time check.
pub fn graph_offer(
    plugin: &Version,
    exports_execute_with_overrides: bool,
    graph: &Graph,
) -> GraphOffer {
    let required = compute_minimum_plugin_api_version(graph).version;
    if !cmp_numeric(plugin, &required) {
        GraphOffer::SkipVersion {
            plugin: plugin.clone(),
            required,
        }
    } else if graph.is_override_shape_enabled && !exports_execute_with_overrides {
        GraphOffer::SkipNoOverrideSymbol
    } else {
        GraphOffer::Offer
    }
}

#[cfg(test)]
mod tests {
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
}
