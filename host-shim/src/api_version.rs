//! A plugin's declared API version as the host keeps it after load.
//!
//! Parsing and the major rule are the schema crate's (`ragged_schema::version`); this type only
//! carries the parsed numbers so that load results can be stored, ordered and printed without this
//! crate depending on `semver` directly.

use std::fmt;

use ragged_schema::version as schema_version;

/// (major, minor, patch), compared numerically as upstream's `Version` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

/// Builds an [`ApiVersion`] from any value with `major`/`minor`/`patch` fields (the schema
/// crate's `semver::Version` constants and parse results).
macro_rules! from_fields {
    ($v:expr) => {{
        let v = $v;
        ApiVersion {
            major: v.major,
            minor: v.minor,
            patch: v.patch,
        }
    }};
}

impl ApiVersion {
    /// What a plugin without `hipdnnPluginGetApiVersion` is taken to implement.
    pub fn baseline() -> ApiVersion {
        from_fields!(schema_version::API_1_0_0)
    }

    /// The highest graph stamp that deserializes (`ragged_schema::version::GRAPH_STAMP_CEILING`).
    pub fn graph_stamp_ceiling() -> ApiVersion {
        from_fields!(schema_version::GRAPH_STAMP_CEILING)
    }

    /// The engine API version this host implements (reported in ABI-validation messages).
    pub fn host() -> ApiVersion {
        from_fields!(schema_version::PROJECT_PLUGIN_API_VERSION)
    }

    /// `sscanf("%d.%d.%d")` semantics; `None` when unparseable.
    pub fn parse(text: &str) -> Option<ApiVersion> {
        schema_version::parse_plugin_api_version(text).map(|v| from_fields!(v))
    }

    /// The graph's feature-derived requirement (project rule, versioning.md §6).
    pub fn required_by(graph: &ragged_schema::model::Graph) -> (ApiVersion, Vec<String>) {
        let minimum = schema_version::compute_minimum_plugin_api_version(graph);
        let reasons = minimum.reasons.iter().map(ToString::to_string).collect();
        (from_fields!(minimum.version), reasons)
    }

    /// The graph's stamp (absent ⇒ 1.0.0).
    pub fn stamp_of(graph: &ragged_schema::model::Graph) -> ApiVersion {
        from_fields!(schema_version::graph_stamp(graph))
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_delegates_to_sscanf_semantics_and_orders_numerically() {
        let v = |s| ApiVersion::parse(s);
        assert_eq!(
            v("1.3.0-rc1").map(|v| v.to_string()).as_deref(),
            Some("1.3.0")
        );
        assert_eq!(v("v1.3.0"), None);
        assert!(v("1.10.0") > v("1.4.0"));
        assert!(v("0.0.1") < Some(ApiVersion::baseline()));
    }
}
