//! Runtime element types and type-erased host buffers.
//!
//! The plugin learns element types from the graph at run time, so tensors are type-erased; a
//! typed slice is recovered by matching on [`HostData`] instead of casting pointers, which keeps
//! every access after construction safe.

use std::fmt;

use half::{bf16, f16};

use crate::fp8::Fp8Format;

/// Element types the SDK stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer (offsets, sequence lengths).
    I32,
    /// Signed 64-bit integer (offsets, sequence lengths).
    I64,
    /// One of the four 8-bit float formats, held as raw codes (`u8`): only the host engine's
    /// FP8 forward reads and writes them, through [`Fp8Format`]'s exact conversions.
    Fp8(Fp8Format),
}

impl DataType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::F16 | DataType::BF16 => 2,
            DataType::I64 => 8,
            DataType::Fp8(_) => 1,
        }
    }

    /// Whether this is a floating-point type the SDK computes on. FP8 is not: its codes are
    /// decoded explicitly ([`Fp8Format`]), never read as numbers by the generic paths.
    pub const fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::BF16)
    }

    /// The FP8 format, for an FP8 type.
    pub const fn fp8(self) -> Option<Fp8Format> {
        match self {
            DataType::Fp8(format) => Some(format),
            DataType::F32 | DataType::F16 | DataType::BF16 | DataType::I32 | DataType::I64 => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::Fp8(format) => format.name(),
        })
    }
}

/// A borrowed host buffer of any supported element type.
#[derive(Debug, Clone, Copy)]
pub enum HostData<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f16 elements.
    F16(&'a [f16]),
    /// bf16 elements.
    BF16(&'a [bf16]),
    /// i32 elements.
    I32(&'a [i32]),
    /// i64 elements.
    I64(&'a [i64]),
    /// FP8 codes of one format.
    Fp8(Fp8Format, &'a [u8]),
}

impl HostData<'_> {
    /// Element type of the buffer.
    pub fn data_type(&self) -> DataType {
        match self {
            HostData::F32(_) => DataType::F32,
            HostData::F16(_) => DataType::F16,
            HostData::BF16(_) => DataType::BF16,
            HostData::I32(_) => DataType::I32,
            HostData::I64(_) => DataType::I64,
            HostData::Fp8(format, _) => DataType::Fp8(*format),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(s) => s.len(),
            HostData::F16(s) => s.len(),
            HostData::BF16(s) => s.len(),
            HostData::I32(s) => s.len(),
            HostData::I64(s) => s.len(),
            HostData::Fp8(_, s) => s.len(),
        }
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A mutably borrowed host buffer of any supported element type.
#[derive(Debug)]
pub enum HostDataMut<'a> {
    /// f32 elements.
    F32(&'a mut [f32]),
    /// f16 elements.
    F16(&'a mut [f16]),
    /// bf16 elements.
    BF16(&'a mut [bf16]),
    /// i32 elements.
    I32(&'a mut [i32]),
    /// i64 elements.
    I64(&'a mut [i64]),
    /// FP8 codes of one format.
    Fp8(Fp8Format, &'a mut [u8]),
}

impl HostDataMut<'_> {
    /// Shared view of the same buffer.
    pub fn as_ref(&self) -> HostData<'_> {
        match self {
            HostDataMut::F32(s) => HostData::F32(s),
            HostDataMut::F16(s) => HostData::F16(s),
            HostDataMut::BF16(s) => HostData::BF16(s),
            HostDataMut::I32(s) => HostData::I32(s),
            HostDataMut::I64(s) => HostData::I64(s),
            HostDataMut::Fp8(format, s) => HostData::Fp8(*format, s),
        }
    }

    /// Mutable reborrow, so a long-lived view can lend itself out.
    pub fn reborrow(&mut self) -> HostDataMut<'_> {
        match self {
            HostDataMut::F32(s) => HostDataMut::F32(s),
            HostDataMut::F16(s) => HostDataMut::F16(s),
            HostDataMut::BF16(s) => HostDataMut::BF16(s),
            HostDataMut::I32(s) => HostDataMut::I32(s),
            HostDataMut::I64(s) => HostDataMut::I64(s),
            HostDataMut::Fp8(format, s) => HostDataMut::Fp8(*format, s),
        }
    }

    /// Element type of the buffer.
    pub fn data_type(&self) -> DataType {
        self.as_ref().data_type()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.as_ref().len()
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

/// A Rust type that is one of the SDK's [`DataType`]s; sealed because [`HostData`] is closed.
pub trait Element:
    Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// The runtime tag of this type.
    const DATA_TYPE: DataType;
    /// The typed slice inside `data`, if `data` holds this type.
    fn slice(data: HostData<'_>) -> Option<&[Self]>;
    /// The typed mutable slice inside `data`, if `data` holds this type.
    fn slice_mut(data: HostDataMut<'_>) -> Option<&mut [Self]>;
    /// Type-erases a slice.
    fn host_data(slice: &[Self]) -> HostData<'_>;
    /// Type-erases a mutable slice.
    fn host_data_mut(slice: &mut [Self]) -> HostDataMut<'_>;
    /// Converts from f64, rounding to nearest (saturating for integers).
    fn from_f64(value: f64) -> Self;
    /// Converts to f64 (exact except for i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// The value written where a test must later prove nothing was written: a quiet NaN with a
    /// fixed payload for floats (no arithmetic produces that payload), an unlikely magic number
    /// for integers.
    fn sentinel() -> Self;
}

macro_rules! element {
    ($t:ty, $variant:ident, $from:expr, $to:expr, $sentinel:expr) => {
        impl Element for $t {
            const DATA_TYPE: DataType = DataType::$variant;
            fn slice(data: HostData<'_>) -> Option<&[Self]> {
                match data {
                    HostData::$variant(s) => Some(s),
                    _ => None,
                }
            }
            fn slice_mut(data: HostDataMut<'_>) -> Option<&mut [Self]> {
                match data {
                    HostDataMut::$variant(s) => Some(s),
                    _ => None,
                }
            }
            fn host_data(slice: &[Self]) -> HostData<'_> {
                HostData::$variant(slice)
            }
            fn host_data_mut(slice: &mut [Self]) -> HostDataMut<'_> {
                HostDataMut::$variant(slice)
            }
            fn from_f64(value: f64) -> Self {
                let convert: fn(f64) -> Self = $from;
                convert(value)
            }
            fn to_f64(self) -> f64 {
                let convert: fn(Self) -> f64 = $to;
                convert(self)
            }
            fn sentinel() -> Self {
                $sentinel
            }
        }
    };
}

element!(
    f32,
    F32,
    |v| v as f32,
    f64::from,
    f32::from_bits(SENTINEL_F32_BITS)
);
element!(
    f16,
    F16,
    f16::from_f64,
    f16::to_f64,
    f16::from_bits(SENTINEL_F16_BITS)
);
element!(
    bf16,
    BF16,
    bf16::from_f64,
    bf16::to_f64,
    bf16::from_bits(SENTINEL_BF16_BITS)
);
element!(
    i32,
    I32,
    |v| v.round() as i32,
    f64::from,
    SENTINEL_INT as i32
);
element!(i64, I64, |v| v.round() as i64, |v| v as f64, SENTINEL_INT);

/// Quiet NaN with payload 0x5A5A5: arithmetic on non-NaN inputs only yields the default NaN.
pub const SENTINEL_F32_BITS: u32 = 0x7FC5_A5A5;
/// Quiet f16 NaN with a non-default payload.
pub const SENTINEL_F16_BITS: u16 = 0x7E5A;
/// Quiet bf16 NaN with a non-default payload.
pub const SENTINEL_BF16_BITS: u16 = 0x7FDA;
/// Integer sentinel (fits in i32).
pub const SENTINEL_INT: i64 = -0x5A5A_5A5A;

/// Floating-point element types the SDPA reference computes on (f32 accumulation).
pub trait FloatElement: Element {
    /// Widens to f32 exactly.
    fn to_f32(self) -> f32;
    /// Narrows from f32, rounding to nearest even.
    fn from_f32(value: f32) -> Self;
}

impl FloatElement for f32 {
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl FloatElement for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl FloatElement for bf16 {
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_rust_types() {
        assert_eq!(DataType::F32.size(), std::mem::size_of::<f32>());
        assert_eq!(DataType::F16.size(), std::mem::size_of::<f16>());
        assert_eq!(DataType::BF16.size(), std::mem::size_of::<bf16>());
        assert_eq!(DataType::I32.size(), std::mem::size_of::<i32>());
        assert_eq!(DataType::I64.size(), std::mem::size_of::<i64>());
    }

    #[test]
    fn float_sentinels_are_nan_with_a_payload_arithmetic_does_not_make() {
        assert!(f32::sentinel().is_nan());
        assert!(f16::sentinel().is_nan());
        assert!(bf16::sentinel().is_nan());
        let produced = f32::NAN * 2.0;
        assert_ne!(produced.to_bits(), SENTINEL_F32_BITS);
        let zero = std::hint::black_box(0.0f32);
        assert_ne!((zero / zero).to_bits(), SENTINEL_F32_BITS);
    }

    #[test]
    fn half_types_round_to_nearest_even() {
        // 1 + 2^-11 lies exactly between two f16 values; ties go to the even mantissa (1.0).
        assert_eq!(f16::from_f32(1.0 + 2f32.powi(-11)), f16::from_f32(1.0));
        // 1 + 3·2^-11 ties between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
        assert_eq!(
            <f16 as FloatElement>::from_f32(1.0 + 3.0 * 2f32.powi(-11)).to_f32(),
            1.0 + 2f32.powi(-9)
        );
        assert_eq!(
            <bf16 as FloatElement>::from_f32(1.0 + 2f32.powi(-8)).to_f32(),
            1.0
        );
    }

    #[test]
    fn typed_slices_are_recovered_only_for_their_own_type() {
        let values = [1.0f32, 2.0];
        let data = f32::host_data(&values);
        assert_eq!(data.data_type(), DataType::F32);
        assert_eq!(f32::slice(data), Some(&values[..]));
        assert_eq!(i32::slice(data), None);
    }
}
