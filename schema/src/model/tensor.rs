//! `TensorAttributes` (RFC §4.2: the frontend's chainable setters and getters) and the baked
//! scalar `TensorValue`.

use super::DataType;

/// Default of `TensorAttributes.alignment` in the newest schema (RFC drafts said 1; the schema
/// and test code say 16, and "non-default" alignment is what gates API 1.3.0).
pub const DEFAULT_ALIGNMENT: i64 = 16;

/// Default of `ragged_offset_multiplier`: offsets are stored in element units.
pub const DEFAULT_RAGGED_OFFSET_MULTIPLIER: i64 = 1;

/// A scalar constant baked into the graph (the `TensorValue` union, whose members are structs).
///
/// `Float16` and `BFloat16` are stored as f32 on the wire; the narrowing happens in the engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TensorValue {
    Float32(f32),
    Float16(f32),
    BFloat16(f32),
    Float8(u8),
    Int32(i32),
    Float64(f64),
    Int64(i64),
    Bool(bool),
}

impl TensorValue {
    /// The union tag hipDNN writes for this member (`value_type`).
    pub fn tag(&self) -> u8 {
        match self {
            TensorValue::Float32(_) => 1,
            TensorValue::Float16(_) => 2,
            TensorValue::BFloat16(_) => 3,
            TensorValue::Float8(_) => 4,
            TensorValue::Int32(_) => 5,
            TensorValue::Float64(_) => 6,
            TensorValue::Int64(_) => 7,
            TensorValue::Bool(_) => 8,
        }
    }

    /// The member's name as the JSON `value_type` key spells it.
    pub fn member_name(&self) -> &'static str {
        match self {
            TensorValue::Float32(_) => "Float32Value",
            TensorValue::Float16(_) => "Float16Value",
            TensorValue::BFloat16(_) => "BFloat16Value",
            TensorValue::Float8(_) => "Float8Value",
            TensorValue::Int32(_) => "Int32Value",
            TensorValue::Float64(_) => "Float64Value",
            TensorValue::Int64(_) => "Int64Value",
            TensorValue::Bool(_) => "BoolValue",
        }
    }

    /// The value widened to f64, for the scale and other scalars an engine folds into math.
    ///
    /// A `Float8` yields its encoding byte, not the number it encodes: which fp8 format it is
    /// (e4m3, e5m2, ...) is the tensor's data type, which the value does not carry. Callers that
    /// need the number must decode it with that type, or refuse it.
    pub fn as_f64(&self) -> f64 {
        match *self {
            TensorValue::Float32(v) | TensorValue::Float16(v) | TensorValue::BFloat16(v) => {
                f64::from(v)
            }
            TensorValue::Float8(v) => f64::from(v),
            TensorValue::Int32(v) => f64::from(v),
            TensorValue::Float64(v) => v,
            // Scalars beyond 2^53 lose precision; no SDPA scalar is that large.
            TensorValue::Int64(v) => v as f64,
            TensorValue::Bool(v) => f64::from(u8::from(v)),
        }
    }
}

/// One tensor of a graph. Fields mirror the wire table (schema.md §4, newest field order).
///
/// A tensor is *ragged* when `ragged_offset_tensor_uid` is set: its buffer is packed per batch
/// and addressed through the offset aux tensor of that uid, and its sequence dim reports S_max
/// (which axis that is: [`TensorAttributes::sdpa_head_axis`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorAttributes {
    pub uid: i64,
    pub name: String,
    pub data_type: DataType,
    /// In elements, not bytes.
    pub strides: Vec<i64>,
    pub dims: Vec<i64>,
    /// Intermediate not bound by the user (wire field `virtual`).
    pub is_virtual: bool,
    pub value: Option<TensorValue>,
    /// RFC 0016: the scalar arrives at execute through a host pointer in the variant pack.
    pub is_runtime_pass_by_value: bool,
    /// RFC 0014: uid of the `ragged_offset[B+1]` aux tensor.
    pub ragged_offset_tensor_uid: Option<i64>,
    /// Required byte alignment of the data pointer.
    pub alignment: i64,
    /// `element_offset = stored_offset * ragged_offset_multiplier`.
    pub ragged_offset_multiplier: i64,
}

impl TensorAttributes {
    /// The head axis of a rank-4 SDPA Q/K/V/O tensor (ragged-sdpa.md §1, revised 2026-12-01).
    ///
    /// A ragged tensor is BSHD memory written as `[B, S, H, D]` or `[B, H, S, D]`: its sequence
    /// axis is the middle axis of larger stride (one head ties them; then the larger dim is the
    /// sequence) and the head axis is the other. A dense tensor is hipDNN's `[B, H, S, D]`.
    /// The kernels' `problem::resolve_axes` applies the same rule to the problem the engines
    /// read; this copy serves wire validation, which cannot depend on the kernels.
    pub fn sdpa_head_axis(&self) -> usize {
        if !self.is_ragged() || self.dims.len() != 4 || self.strides.len() != 4 {
            return 1;
        }
        let seq_axis = match self.strides[1].cmp(&self.strides[2]) {
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => 2,
            std::cmp::Ordering::Equal if self.dims[2] > self.dims[1] => 2,
            std::cmp::Ordering::Equal => 1,
        };
        3 - seq_axis
    }
}

impl Default for TensorAttributes {
    fn default() -> Self {
        TensorAttributes {
            uid: 0,
            name: String::new(),
            data_type: DataType::Unset,
            strides: Vec::new(),
            dims: Vec::new(),
            is_virtual: false,
            value: None,
            is_runtime_pass_by_value: false,
            ragged_offset_tensor_uid: None,
            alignment: DEFAULT_ALIGNMENT,
            ragged_offset_multiplier: DEFAULT_RAGGED_OFFSET_MULTIPLIER,
        }
    }
}

impl TensorAttributes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Packed row-major strides for `dims` (last dim contiguous), the layout most tests build.
    pub fn packed_strides(dims: &[i64]) -> Vec<i64> {
        let mut strides = vec![1; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        strides
    }

    pub fn set_uid(mut self, uid: i64) -> Self {
        self.uid = uid;
        self
    }
    pub fn set_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    pub fn set_data_type(mut self, data_type: DataType) -> Self {
        self.data_type = data_type;
        self
    }
    pub fn set_dims(mut self, dims: Vec<i64>) -> Self {
        self.dims = dims;
        self
    }
    pub fn set_strides(mut self, strides: Vec<i64>) -> Self {
        self.strides = strides;
        self
    }
    pub fn set_is_virtual(mut self, is_virtual: bool) -> Self {
        self.is_virtual = is_virtual;
        self
    }
    pub fn set_value(mut self, value: TensorValue) -> Self {
        self.value = Some(value);
        self
    }
    pub fn set_is_runtime_pass_by_value(mut self, pass_by_value: bool) -> Self {
        self.is_runtime_pass_by_value = pass_by_value;
        self
    }
    /// Makes this tensor ragged, addressed through `aux` (RFC §4.2). Only the aux's uid is
    /// stored, as on the wire; the aux itself must be added to the graph separately.
    pub fn set_ragged_offset(mut self, aux: &TensorAttributes) -> Self {
        self.ragged_offset_tensor_uid = Some(aux.uid);
        self
    }
    /// Same as [`TensorAttributes::set_ragged_offset`] when only the aux's uid is at hand.
    pub fn set_ragged_offset_uid(mut self, aux_uid: i64) -> Self {
        self.ragged_offset_tensor_uid = Some(aux_uid);
        self
    }
    pub fn clear_ragged_offset(mut self) -> Self {
        self.ragged_offset_tensor_uid = None;
        self
    }
    /// Byte alignment of the data pointer (default 16); a value other than 16 requires API 1.3.0.
    pub fn set_alignment(mut self, alignment_in_bytes: i64) -> Self {
        self.alignment = alignment_in_bytes;
        self
    }
    pub fn set_ragged_offset_multiplier(mut self, multiplier: i64) -> Self {
        self.ragged_offset_multiplier = multiplier;
        self
    }

    pub fn get_uid(&self) -> i64 {
        self.uid
    }
    pub fn get_name(&self) -> &str {
        &self.name
    }
    pub fn get_data_type(&self) -> DataType {
        self.data_type
    }
    pub fn get_dims(&self) -> &[i64] {
        &self.dims
    }
    pub fn get_strides(&self) -> &[i64] {
        &self.strides
    }
    pub fn get_is_virtual(&self) -> bool {
        self.is_virtual
    }
    pub fn get_value(&self) -> Option<TensorValue> {
        self.value
    }
    pub fn get_is_runtime_pass_by_value(&self) -> bool {
        self.is_runtime_pass_by_value
    }
    /// The uid of the ragged offset aux, if this tensor is ragged.
    pub fn get_ragged_offset(&self) -> Option<i64> {
        self.ragged_offset_tensor_uid
    }
    pub fn get_alignment(&self) -> i64 {
        self.alignment
    }
    pub fn get_ragged_offset_multiplier(&self) -> i64 {
        self.ragged_offset_multiplier
    }
    pub fn is_ragged(&self) -> bool {
        self.ragged_offset_tensor_uid.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_newest_schema() {
        let t = TensorAttributes::new();
        assert_eq!(t.get_alignment(), 16);
        assert_eq!(t.get_ragged_offset_multiplier(), 1);
        assert_eq!(t.get_ragged_offset(), None);
        assert!(!t.is_ragged());
    }

    #[test]
    fn builder_chains_and_stores_aux_uid() {
        let aux = TensorAttributes::new()
            .set_uid(5)
            .set_dims(vec![3, 1, 1, 1]);
        let q = TensorAttributes::new()
            .set_uid(1)
            .set_name("q")
            .set_data_type(DataType::BFloat16)
            .set_dims(vec![2, 3, 2, 16])
            .set_strides(vec![96, 32, 16, 1])
            .set_ragged_offset(&aux)
            .set_alignment(32)
            .set_ragged_offset_multiplier(32);
        assert_eq!(q.get_ragged_offset(), Some(5));
        assert_eq!(q.get_alignment(), 32);
        assert_eq!(q.get_ragged_offset_multiplier(), 32);
        assert_eq!(q.get_name(), "q");
        assert!(q.is_ragged());
        assert!(!q.clear_ragged_offset().is_ragged());
    }

    #[test]
    fn packed_strides_are_row_major() {
        assert_eq!(
            TensorAttributes::packed_strides(&[2, 3, 2, 16]),
            vec![96, 32, 16, 1]
        );
        assert_eq!(TensorAttributes::packed_strides(&[]), Vec::<i64>::new());
    }

    #[test]
    fn tensor_value_tags_match_schema_md() {
        assert_eq!(TensorValue::Float32(0.5).tag(), 1);
        assert_eq!(TensorValue::Bool(true).tag(), 8);
        assert_eq!(TensorValue::Int64(3).member_name(), "Int64Value");
        assert_eq!(TensorValue::BFloat16(0.25).as_f64(), 0.25);
    }
}
