//! The graph-free description of a multi-node graph: what the plugin maps a hipDNN graph onto
//! and the CPU executor runs (this crate knows no wire format). Tensors carry what `TensorAttributes`
//! carries that execution needs; nodes carry resolved parameters.

use crate::dtype::DataType;
use crate::error::KernelError;
use crate::params::SdpaParams;
use crate::problem::Multiplier;

/// A tensor of the graph (RFC §4.9: the graph carries the aux uid; its values come at execute).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDesc {
    pub uid: i64,
    pub data_type: DataType,
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    /// An intermediate the caller does not bind; the executor allocates it.
    pub is_virtual: bool,
    /// Set ⇒ ragged: packed per batch, addressed through this aux.
    pub ragged: Option<RaggedDesc>,
    /// A constant baked into the graph (a scale, say); needs no binding.
    pub value: Option<f64>,
}

/// `ragged_offset_tensor_uid` and `ragged_offset_multiplier` of a ragged tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaggedDesc {
    pub aux_uid: i64,
    pub multiplier: Multiplier,
}

impl TensorDesc {
    /// A dense tensor with packed row-major strides.
    pub fn dense(uid: i64, data_type: DataType, dims: Vec<i64>) -> TensorDesc {
        TensorDesc {
            uid,
            data_type,
            strides: crate::tensor::packed_strides(&dims),
            dims,
            is_virtual: false,
            ragged: None,
            value: None,
        }
    }

    pub fn with_strides(mut self, strides: Vec<i64>) -> TensorDesc {
        self.strides = strides;
        self
    }

    pub fn virtual_(mut self) -> TensorDesc {
        self.is_virtual = true;
        self
    }

    pub fn ragged_on(mut self, aux_uid: i64) -> TensorDesc {
        self.ragged = Some(RaggedDesc {
            aux_uid,
            multiplier: Multiplier::ONE,
        });
        self
    }

    pub fn with_value(mut self, value: f64) -> TensorDesc {
        self.value = Some(value);
        self
    }

    /// The sequence axis of a ragged tensor: the largest-stride non-batch axis, which covers
    /// both upstream forms (`[B, S, H, D]` and `[B, H, S, D]` dims over BSHD memory).
    pub fn seq_axis(&self) -> usize {
        let mut best = 1;
        for axis in 2..self.strides.len() {
            if self.strides[axis] > self.strides[best] {
                best = axis;
            }
        }
        best
    }
}

/// Elementwise operations the executor runs: those meaningful on ragged tensors (every element
/// of a batch's extent maps to one output element, padding is never touched).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PointwiseOp {
    Identity,
    Exp,
    /// `clamp(x, lower, upper)` with slope `slope` below `lower` (upstream's RELU_FWD fields;
    /// plain ReLU is lower 0, no upper, slope 0).
    Relu {
        lower: f32,
        upper: Option<f32>,
        slope: f32,
    },
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

impl PointwiseOp {
    /// The op for an upstream `PointwiseMode` name (`"ADD"`, `"RELU_FWD"`, …); every other mode
    /// is declined by name. RELU_FWD comes back as plain ReLU; the caller applies the clips.
    pub fn from_mode_name(name: &str) -> Result<PointwiseOp, KernelError> {
        Ok(match name {
            "IDENTITY" => PointwiseOp::Identity,
            "EXP" => PointwiseOp::Exp,
            "RELU_FWD" => PointwiseOp::Relu {
                lower: 0.0,
                upper: None,
                slope: 0.0,
            },
            "ADD" => PointwiseOp::Add,
            "SUB" => PointwiseOp::Sub,
            "MUL" => PointwiseOp::Mul,
            "DIV" => PointwiseOp::Div,
            "MAX_OP" => PointwiseOp::Max,
            "MIN_OP" => PointwiseOp::Min,
            other => {
                return Err(KernelError::UnsupportedPointwiseMode {
                    mode: other.to_string(),
                });
            }
        })
    }

    pub fn is_binary(self) -> bool {
        matches!(
            self,
            PointwiseOp::Add
                | PointwiseOp::Sub
                | PointwiseOp::Mul
                | PointwiseOp::Div
                | PointwiseOp::Max
                | PointwiseOp::Min
        )
    }
}

/// `out_0 = op(in_0[, in_1])`.
#[derive(Debug, Clone, PartialEq)]
pub struct PointwiseNode {
    pub op: PointwiseOp,
    pub in_0: i64,
    pub in_1: Option<i64>,
    pub out_0: i64,
}

/// SDPA forward over tensors of the graph, scale and mask already resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpaNode {
    pub q: i64,
    pub k: i64,
    pub v: i64,
    pub o: i64,
    pub stats: Option<i64>,
    pub seq_len_q: Option<i64>,
    pub seq_len_kv: Option<i64>,
    pub params: SdpaParams,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeOp {
    Sdpa(SdpaNode),
    Pointwise(PointwiseNode),
}

impl NodeOp {
    pub fn inputs(&self) -> Vec<i64> {
        match self {
            NodeOp::Sdpa(s) => [Some(s.q), Some(s.k), Some(s.v), s.seq_len_q, s.seq_len_kv]
                .into_iter()
                .flatten()
                .collect(),
            NodeOp::Pointwise(p) => std::iter::once(p.in_0).chain(p.in_1).collect(),
        }
    }

    pub fn outputs(&self) -> Vec<i64> {
        match self {
            NodeOp::Sdpa(s) => std::iter::once(s.o).chain(s.stats).collect(),
            NodeOp::Pointwise(p) => vec![p.out_0],
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExecNode {
    pub name: String,
    pub op: NodeOp,
}

/// Tensors plus nodes in topological order (the graph layer validated the order; the executor
/// re-checks it as it walks).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecGraph {
    pub tensors: Vec<TensorDesc>,
    pub nodes: Vec<ExecNode>,
}

impl ExecGraph {
    pub fn tensor(&self, uid: i64) -> Option<&TensorDesc> {
        self.tensors.iter().find(|t| t.uid == uid)
    }
}
