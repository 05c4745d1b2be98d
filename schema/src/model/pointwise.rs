//! `PointwiseAttributes` (union tag 2): hipDNN's elementwise node, as the frontend's
//! `graph.pointwise(a, b, attributes)` writes it.

use super::TensorAttributes;

/// `PointwiseMode`, kept open: any byte a producer writes decodes, and the executor declines
/// the modes it does not run by the name upstream gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PointwiseMode(pub i8);

impl PointwiseMode {
    /// Every byte is a mode (the type is open), so the wire conversions cannot fail.
    pub fn from_wire(v: i8) -> Self {
        PointwiseMode(v)
    }
    pub fn to_wire(self) -> i8 {
        self.0
    }
}

/// Upstream names, indexed by wire value (`pointwise_attributes.fbs`).
const MODE_NAMES: [&str; 48] = [
    "UNSET",
    "ABS",
    "ADD",
    "ADD_SQUARE",
    "BINARY_SELECT",
    "CEIL",
    "CMP_EQ",
    "CMP_GE",
    "CMP_GT",
    "CMP_LE",
    "CMP_LT",
    "CMP_NEQ",
    "DIV",
    "ELU_BWD",
    "ELU_FWD",
    "ERF",
    "EXP",
    "FLOOR",
    "GELU_APPROX_TANH_BWD",
    "GELU_APPROX_TANH_FWD",
    "GELU_BWD",
    "GELU_FWD",
    "GEN_INDEX",
    "IDENTITY",
    "LOG",
    "LOGICAL_AND",
    "LOGICAL_NOT",
    "LOGICAL_OR",
    "MAX_OP",
    "MIN_OP",
    "MUL",
    "NEG",
    "RECIPROCAL",
    "RELU_BWD",
    "RELU_FWD",
    "RSQRT",
    "SIGMOID_BWD",
    "SIGMOID_FWD",
    "SIN",
    "SOFTPLUS_BWD",
    "SOFTPLUS_FWD",
    "SQRT",
    "SUB",
    "SWISH_BWD",
    "SWISH_FWD",
    "TAN",
    "TANH_BWD",
    "TANH_FWD",
];

impl PointwiseMode {
    pub const UNSET: Self = Self(0);
    pub const ADD: Self = Self(2);
    pub const DIV: Self = Self(12);
    pub const EXP: Self = Self(16);
    pub const IDENTITY: Self = Self(23);
    pub const MAX_OP: Self = Self(28);
    pub const MIN_OP: Self = Self(29);
    pub const MUL: Self = Self(30);
    pub const RELU_FWD: Self = Self(34);
    pub const SUB: Self = Self(42);

    /// Upstream's enumerator name (`"ADD"`, `"RELU_FWD"`), `None` beyond the known values.
    pub fn name(self) -> Option<&'static str> {
        usize::try_from(self.0)
            .ok()
            .and_then(|i| MODE_NAMES.get(i).copied())
    }

    /// The JSON spelling: upstream's name in lower case (`"add"`, `"relu_fwd"`).
    pub fn json_name(self) -> Option<String> {
        self.name().map(str::to_ascii_lowercase)
    }

    pub fn from_json_name(s: &str) -> Option<Self> {
        let upper = s.to_ascii_uppercase();
        MODE_NAMES
            .iter()
            .position(|n| *n == upper && s == n.to_ascii_lowercase())
            .and_then(|i| i8::try_from(i).ok())
            .map(Self)
    }
}

impl std::fmt::Display for PointwiseMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "<unknown PointwiseMode {}>", self.0),
        }
    }
}

/// All twelve fields of the wire table. `in_0` and `out_0` are required by upstream (no
/// optional marker); the rest are unset unless a mode needs them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PointwiseAttributes {
    pub operation: PointwiseMode,
    pub relu_lower_clip: Option<f32>,
    pub relu_upper_clip: Option<f32>,
    pub relu_lower_clip_slope: Option<f32>,
    pub axis_tensor_uid: Option<i64>,
    pub in_0_tensor_uid: i64,
    pub in_1_tensor_uid: Option<i64>,
    pub in_2_tensor_uid: Option<i64>,
    pub out_0_tensor_uid: i64,
    pub swish_beta: Option<f32>,
    pub elu_alpha: Option<f32>,
    pub softplus_beta: Option<f32>,
}

impl PointwiseAttributes {
    /// A unary node `out_0 = mode(in_0)`.
    pub fn unary(mode: PointwiseMode, in_0: &TensorAttributes, out_0: &TensorAttributes) -> Self {
        PointwiseAttributes {
            operation: mode,
            in_0_tensor_uid: in_0.uid,
            out_0_tensor_uid: out_0.uid,
            ..PointwiseAttributes::default()
        }
    }

    /// A binary node `out_0 = mode(in_0, in_1)`; in_1 may be a broadcast scalar (a scale).
    pub fn binary(
        mode: PointwiseMode,
        in_0: &TensorAttributes,
        in_1: &TensorAttributes,
        out_0: &TensorAttributes,
    ) -> Self {
        PointwiseAttributes {
            in_1_tensor_uid: Some(in_1.uid),
            ..PointwiseAttributes::unary(mode, in_0, out_0)
        }
    }

    pub fn set_relu_lower_clip(mut self, v: f32) -> Self {
        self.relu_lower_clip = Some(v);
        self
    }
    pub fn set_relu_upper_clip(mut self, v: f32) -> Self {
        self.relu_upper_clip = Some(v);
        self
    }
    pub fn set_relu_lower_clip_slope(mut self, v: f32) -> Self {
        self.relu_lower_clip_slope = Some(v);
        self
    }
    pub fn set_in_2(mut self, t: &TensorAttributes) -> Self {
        self.in_2_tensor_uid = Some(t.uid);
        self
    }

    /// The uids the node reads, with their field names: in_0, then the optional ones.
    pub fn inputs(&self) -> Vec<(&'static str, i64)> {
        let optional = [
            ("in_1_tensor_uid", self.in_1_tensor_uid),
            ("in_2_tensor_uid", self.in_2_tensor_uid),
            ("axis_tensor_uid", self.axis_tensor_uid),
        ];
        std::iter::once(("in_0_tensor_uid", self.in_0_tensor_uid))
            .chain(
                optional
                    .into_iter()
                    .filter_map(|(name, uid)| uid.map(|u| (name, u))),
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_keep_upstream_numbers_and_names() {
        assert_eq!(PointwiseMode::ADD.name(), Some("ADD"));
        assert_eq!(PointwiseMode::RELU_FWD.name(), Some("RELU_FWD"));
        assert_eq!(PointwiseMode(47).name(), Some("TANH_FWD"));
        assert_eq!(PointwiseMode(48).name(), None);
        assert_eq!(PointwiseMode(-1).name(), None);
        assert_eq!(PointwiseMode(48).to_string(), "<unknown PointwiseMode 48>");
        assert_eq!(PointwiseMode::SUB.json_name().as_deref(), Some("sub"));
    }

    #[test]
    fn json_names_are_lower_case_only() {
        assert_eq!(
            PointwiseMode::from_json_name("max_op"),
            Some(PointwiseMode::MAX_OP)
        );
        assert_eq!(PointwiseMode::from_json_name("MAX_OP"), None);
        assert_eq!(PointwiseMode::from_json_name("max"), None);
        for v in 0..48 {
            let mode = PointwiseMode(v);
            let name = mode.json_name().unwrap_or_default();
            assert_eq!(PointwiseMode::from_json_name(&name), Some(mode));
        }
    }

    #[test]
    fn builder_fills_the_uids() {
        let a = TensorAttributes::new().set_uid(1);
        let b = TensorAttributes::new().set_uid(2);
        let c = TensorAttributes::new().set_uid(3);
        let p = PointwiseAttributes::binary(PointwiseMode::ADD, &a, &b, &c);
        assert_eq!(
            p.inputs(),
            vec![("in_0_tensor_uid", 1), ("in_1_tensor_uid", 2)]
        );
        assert_eq!(p.out_0_tensor_uid, 3);
        assert_eq!(p.relu_upper_clip, None);
    }
}
