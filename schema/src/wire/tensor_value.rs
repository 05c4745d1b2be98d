//! The `TensorAttributes.value` union, read, verified and written by hand.
//!
//! Its members are structs, which flatc 25.12.19 cannot generate for Rust as union members
//! (schema.md §12). The Rust-generation schema keeps the tag (`value_type`, slot 16) and reserves
//! slot 18 as a deprecated placeholder, so the generated verifier never looks at it. This module
//! does what the generated code would: follow the offset at slot 18 to the struct bytes, after
//! checking that the offset and the struct lie inside the buffer and are aligned. It only slices
//! the byte buffer, so it needs no `unsafe`.

use flatbuffers::{FlatBufferBuilder, Table, UnionWIPOffset, VOffsetT, WIPOffset};

use super::fb;
use crate::error::SchemaError;
use crate::model::TensorValue;

/// Vtable offset of `value` (field index 7).
pub(super) const VT_VALUE: VOffsetT = 18;

/// Size and alignment of the struct each tag points to (they are equal for these structs).
fn struct_size(tag: u8) -> Option<usize> {
    match tag {
        1..=3 | 5 => Some(4),
        4 | 8 => Some(1),
        6 | 7 => Some(8),
        _ => None,
    }
}

/// Reads the value of a verified `TensorAttributes` table, given its `value_type` tag.
pub(super) fn read(
    table: &Table<'_>,
    tag: u8,
    uid: i64,
) -> Result<Option<TensorValue>, SchemaError> {
    if tag == 0 {
        return Ok(None);
    }
    let size = struct_size(tag).ok_or(SchemaError::UnknownTensorValueTag { uid, tag })?;
    let malformed = |detail: String| SchemaError::MalformedTensorValue { uid, detail };
    let field_offset = table.vtable().get(VT_VALUE);
    if field_offset == 0 {
        return Err(malformed(format!(
            "value_type is {tag} but value is absent"
        )));
    }
    let buf = table.buf();
    let field_loc = table
        .loc()
        .checked_add(usize::from(field_offset))
        .ok_or_else(|| malformed("value offset overflows".to_string()))?;
    let offset_bytes = slice(buf, field_loc, 4).ok_or_else(|| {
        malformed(format!(
            "value offset at byte {field_loc} is outside the buffer"
        ))
    })?;
    if field_loc % 4 != 0 {
        return Err(malformed(format!(
            "value offset at byte {field_loc} is not 4-byte aligned"
        )));
    }
    let relative = u32::from_le_bytes([
        offset_bytes[0],
        offset_bytes[1],
        offset_bytes[2],
        offset_bytes[3],
    ]);
    if relative == 0 {
        return Err(malformed("value offset is 0".to_string()));
    }
    let target = usize::try_from(relative)
        .ok()
        .and_then(|r| field_loc.checked_add(r))
        .ok_or_else(|| malformed("value offset overflows".to_string()))?;
    if target % size != 0 {
        return Err(malformed(format!(
            "value struct at byte {target} is not {size}-byte aligned"
        )));
    }
    let bytes = slice(buf, target, size).ok_or_else(|| {
        malformed(format!(
            "value struct at byte {target} ({size} bytes) is outside the buffer"
        ))
    })?;
    Ok(Some(decode_struct(tag, bytes)))
}

fn slice(buf: &[u8], start: usize, len: usize) -> Option<&[u8]> {
    buf.get(start..start.checked_add(len)?)
}

/// `bytes` has exactly the tag's struct size (checked by the caller).
fn decode_struct(tag: u8, bytes: &[u8]) -> TensorValue {
    let b4 = || [bytes[0], bytes[1], bytes[2], bytes[3]];
    let b8 = || {
        [
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]
    };
    match tag {
        1 => TensorValue::Float32(f32::from_le_bytes(b4())),
        2 => TensorValue::Float16(f32::from_le_bytes(b4())),
        3 => TensorValue::BFloat16(f32::from_le_bytes(b4())),
        4 => TensorValue::Float8(bytes[0]),
        5 => TensorValue::Int32(i32::from_le_bytes(b4())),
        6 => TensorValue::Float64(f64::from_le_bytes(b8())),
        7 => TensorValue::Int64(i64::from_le_bytes(b8())),
        _ => TensorValue::Bool(bytes[0] != 0),
    }
}

/// Pushes the value struct out of line (as C++'s `CreateStruct(v).Union()` does); the caller
/// stores the returned offset at [`VT_VALUE`] inside the table.
pub(super) fn push(
    fbb: &mut FlatBufferBuilder<'_>,
    value: TensorValue,
) -> WIPOffset<UnionWIPOffset> {
    match value {
        TensorValue::Float32(v) => fbb.push(fb::Float32Value::new(v)).as_union_value(),
        TensorValue::Float16(v) => fbb.push(fb::Float16Value::new(v)).as_union_value(),
        TensorValue::BFloat16(v) => fbb.push(fb::BFloat16Value::new(v)).as_union_value(),
        TensorValue::Float8(v) => fbb.push(fb::Float8Value::new(v)).as_union_value(),
        TensorValue::Int32(v) => fbb.push(fb::Int32Value::new(v)).as_union_value(),
        TensorValue::Float64(v) => fbb.push(fb::Float64Value::new(v)).as_union_value(),
        TensorValue::Int64(v) => fbb.push(fb::Int64Value::new(v)).as_union_value(),
        TensorValue::Bool(v) => fbb.push(fb::BoolValue::new(v)).as_union_value(),
    }
}

#[cfg(test)]
mod tests {
    use flatbuffers::FlatBufferBuilder;

    use super::*;
    use crate::wire::fb;

    /// A root `TensorAttributes` table with uid 7, the given tag, and `value_slot` written as a
    /// raw u32 at slot 18 (a real offset or garbage), verified through the generated verifier.
    fn table_bytes(tag: u8, value_slot: Option<u32>) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let start = fbb.start_table();
        fbb.push_slot::<i64>(fb::TensorAttributes::VT_UID, 7, 0);
        if let Some(raw) = value_slot {
            fbb.push_slot_always::<u32>(VT_VALUE, raw);
        }
        fbb.push_slot::<u8>(fb::TensorAttributes::VT_VALUE_TYPE, tag, 0);
        let end = fbb.end_table(start);
        fbb.finish_minimal(WIPOffset::<fb::TensorAttributes<'_>>::new(end.value()));
        fbb.finished_data().to_vec()
    }

    fn read_from(bytes: &[u8], tag: u8) -> Result<Option<TensorValue>, SchemaError> {
        let t = flatbuffers::root::<fb::TensorAttributes>(bytes)
            .unwrap_or_else(|e| panic!("test table must verify: {e}"));
        read(&t._tab, tag, t.uid())
    }

    #[test]
    fn no_tag_means_no_value_even_with_garbage_in_the_slot() {
        assert_eq!(read_from(&table_bytes(0, Some(0xffff_ffff)), 0), Ok(None));
    }

    #[test]
    fn unknown_tag_is_reported_with_uid() {
        assert_eq!(
            read_from(&table_bytes(9, Some(4)), 9),
            Err(SchemaError::UnknownTensorValueTag { uid: 7, tag: 9 })
        );
    }

    #[test]
    fn tag_without_value_is_malformed() {
        assert!(matches!(
            read_from(&table_bytes(1, None), 1),
            Err(SchemaError::MalformedTensorValue { uid: 7, .. })
        ));
    }

    #[test]
    fn offset_past_the_end_is_malformed() {
        let err = read_from(&table_bytes(5, Some(0x7fff_0000)), 5);
        assert!(
            matches!(&err, Err(SchemaError::MalformedTensorValue { uid: 7, detail }) if detail.contains("outside the buffer")),
            "{err:?}"
        );
    }

    #[test]
    fn misaligned_struct_is_malformed() {
        // The slot sits at a 4-aligned position; an offset of 2 lands on a 2-aligned byte,
        // which is inside the buffer but not aligned for an f32 struct.
        let err = read_from(&table_bytes(1, Some(2)), 1);
        assert!(
            matches!(&err, Err(SchemaError::MalformedTensorValue { detail, .. }) if detail.contains("aligned")),
            "{err:?}"
        );
    }

    #[test]
    fn pushed_struct_is_read_back() {
        let mut fbb = FlatBufferBuilder::new();
        let value = push(&mut fbb, TensorValue::Float64(-0.75));
        let start = fbb.start_table();
        fbb.push_slot_always(VT_VALUE, value);
        fbb.push_slot::<u8>(fb::TensorAttributes::VT_VALUE_TYPE, 6, 0);
        let end = fbb.end_table(start);
        fbb.finish_minimal(WIPOffset::<fb::TensorAttributes<'_>>::new(end.value()));
        assert_eq!(
            read_from(fbb.finished_data(), 6),
            Ok(Some(TensorValue::Float64(-0.75)))
        );
    }
}
