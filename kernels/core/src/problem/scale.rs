//! The attention scale: its scalar type and where it comes from.

use std::fmt;

use crate::DataType;

/// The element type of a scale scalar: the floating-point graph types, double included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarType {
    /// FLOAT.
    Float,
    /// HALF.
    Half,
    /// BFLOAT16.
    BFloat16,
    /// DOUBLE.
    Double,
}

impl ScalarType {
    /// Bytes of one value.
    pub fn size(self) -> usize {
        match self {
            Self::Half | Self::BFloat16 => 2,
            Self::Float => 4,
            Self::Double => 8,
        }
    }

    /// The tensor SDK's element type; `None` for DOUBLE, which the SDK does not store.
    pub fn element(self) -> Option<DataType> {
        match self {
            Self::Float => Some(DataType::F32),
            Self::Half => Some(DataType::F16),
            Self::BFloat16 => Some(DataType::BF16),
            Self::Double => None,
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Float => "FLOAT",
            Self::Half => "HALF",
            Self::BFloat16 => "BFLOAT16",
            Self::Double => "DOUBLE",
        })
    }
}

/// Where the attention scale comes from (schema.md §6.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalePlan {
    /// Baked into the graph (tensor value, `attn_scale_value`, or the default 1.0).
    Fixed(f32),
    /// `is_runtime_pass_by_value`: the variant pack binds a host pointer to the value
    /// (plugin-abi.md §5.7), so every engine can read it at each execute.
    RuntimeHostScalar {
        /// The scale tensor's uid.
        uid: i64,
        /// Its element type.
        data_type: ScalarType,
    },
    /// A one-element tensor in the caller's memory, which may be device memory. GPU engines
    /// decline it (reading it would cost a device copy and a synchronization per execute); the
    /// host engine reads it, after staging when it lives on a device.
    DeviceTensor {
        /// The scale tensor's uid.
        uid: i64,
        /// Its element type.
        data_type: ScalarType,
    },
}

impl ScalePlan {
    /// The value a GPU plan carries: the fixed scale, or for a runtime scale a finite stand-in
    /// (1.0, so that plan-time checks of the scale pass) that every execute replaces with the
    /// value read from the variant pack before anything is launched.
    pub fn plan_value(&self) -> f32 {
        match *self {
            Self::Fixed(value) => value,
            Self::RuntimeHostScalar { .. } | Self::DeviceTensor { .. } => 1.0,
        }
    }
}
