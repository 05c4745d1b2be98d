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

/// The highest `min_required_engine_api_version` stamp a graph may carry and still deserialize
/// (versioning.md: it "must equal the highest feature-gated version constant"). A graph stamped
/// above it is rejected by the host and declined by the plugin.
///
/// It is 1.3.0 while the plugin declares [`PROJECT_PLUGIN_API_VERSION`] 1.4.0, and both are
/// right: 1.4.0 adds an entry point (`GetEngineName`) but no graph feature, so no graph needs a
/// stamp above 1.3.0. This is a ceiling on what graphs ask for, not on what plugins implement.
pub const GRAPH_STAMP_CEILING: Version = API_1_3_0;

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
    MinimumApiVersion {
        version: minimum_version(graph, honour_flag),
        reasons,
    }
}

/// [`compute`]'s version alone, without the list of reasons (which allocates): what the
/// per-graph skip rule compares.
fn minimum_version(graph: &Graph, honour_flag: bool) -> Version {
    minimum_version_for_features(
        graph.is_override_shape_enabled,
        graph.tensors.iter().any(|t| t.is_runtime_pass_by_value),
        (honour_flag && graph.is_ragged_tensor_enabled)
            || graph.tensors.iter().any(|t| t.is_ragged()),
        graph
            .tensors
            .iter()
            .any(|t| t.alignment != DEFAULT_ALIGNMENT),
    )
}

/// The graph's stamp, absent reading as 1.0.0 (upstream `fromEngineApiVersion(nullptr)`).
pub fn graph_stamp(graph: &Graph) -> Version {
    graph
        .min_required_engine_api_version
        .map_or(API_1_0_0, EngineApiVersion::to_semver)
}

/// True when the stamp is above [`GRAPH_STAMP_CEILING`]: the host rejects such a graph at
/// deserialize and the plugin declines it.
pub fn stamp_exceeds_ceiling(graph: &Graph) -> bool {
    graph_stamp(graph) > GRAPH_STAMP_CEILING
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
    cmp_numeric(plugin_version, &minimum_version(graph, true))
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
mod tests;
