//! The SDPA plan: everything an execution context needs from the graph, copied out of it
//! (RFC §4.10: "the plan's params struct caches each ragged tensor's UID and that of its
//! ragged_offset aux UID"). Owning copies is what lets the backend free the graph right after
//! `CreateExecutionContext`; nothing here points into the serialized buffer.

use ragged_kernels::{DataType as KernelType, DiagonalAlignment, MaskBand};
use ragged_schema::DataType;

/// One tensor of the node, as the kernels will see it at execute.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlan {
    pub uid: i64,
    /// Which SDPA field named it (`q_tensor_uid`, …), for error messages.
    pub role: &'static str,
    pub data_type: DataType,
    pub dims: [i64; 4],
    pub strides: [i64; 4],
    /// Declared pointer alignment in bytes (GPU engines require a multiple of 16).
    pub alignment: i64,
    pub ragged: Option<RaggedPlan>,
}

/// The `ragged_offset` aux of a ragged primary: read per execute, never cached, so each
/// execute may bring different offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaggedPlan {
    pub aux_uid: i64,
    pub aux_data_type: DataType,
    pub multiplier: i64,
}

/// An integer input read per execute (`seq_len_q` / `seq_len_kv`: dims `[B, 1, 1, 1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexPlan {
    pub uid: i64,
    pub role: &'static str,
    pub data_type: DataType,
}

/// Where the attention scale comes from (schema.md §6.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalePlan {
    /// Baked into the graph (tensor value, `attn_scale_value`, or the default 1.0).
    Fixed(f32),
    /// `is_runtime_pass_by_value`: the variant pack binds a host pointer to the value
    /// (plugin-abi.md §5.7), so every engine can read it at each execute.
    RuntimeHostScalar { uid: i64, data_type: DataType },
    /// A one-element tensor in the caller's memory, which may be device memory. GPU engines
    /// decline it (reading it would cost a device copy and a synchronization per execute); the
    /// host engine reads it, after staging when it lives on a device.
    DeviceTensor { uid: i64, data_type: DataType },
}

/// The resolved diagonal band (schema.md §6.1); `None` bounds are unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BandPlan {
    pub left: Option<i64>,
    pub right: Option<i64>,
    pub bottom_right: bool,
}

impl BandPlan {
    /// The kernels' band, the one value every engine (reference, CUDA, AITER) takes.
    pub fn mask_band(&self) -> MaskBand {
        let alignment = if self.bottom_right {
            DiagonalAlignment::BottomRight
        } else {
            DiagonalAlignment::TopLeft
        };
        MaskBand::window(self.left, self.right, alignment)
    }
}

/// The kernels' element type for a graph type, `None` for types no engine stores. The one place
/// the plugin translates data types, so all engines agree on them.
pub fn kernel_type(data_type: DataType) -> Option<KernelType> {
    match data_type {
        DataType::Float => Some(KernelType::F32),
        DataType::Half => Some(KernelType::F16),
        DataType::BFloat16 => Some(KernelType::BF16),
        DataType::Int32 => Some(KernelType::I32),
        DataType::Int64 => Some(KernelType::I64),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SdpaPlan {
    pub q: TensorPlan,
    pub k: TensorPlan,
    pub v: TensorPlan,
    pub o: TensorPlan,
    pub stats: Option<TensorPlan>,
    pub seq_len_q: Option<IndexPlan>,
    pub seq_len_kv: Option<IndexPlan>,
    pub scale: ScalePlan,
    pub band: BandPlan,
}
