//! `TensorAttributes` ↔ the wire table. Writing is hand-assembled (the generated builder has no
//! slot for the struct union value); reading uses the generated accessors plus
//! [`super::tensor_value`].

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::{fb, tensor_value};
use crate::error::SchemaError;
use crate::model::{
    DEFAULT_ALIGNMENT, DEFAULT_RAGGED_OFFSET_MULTIPLIER, DataType, TensorAttributes,
};

pub(super) fn decode(t: &fb::TensorAttributes<'_>) -> Result<TensorAttributes, SchemaError> {
    let uid = t.uid();
    Ok(TensorAttributes {
        uid,
        name: t.name().unwrap_or_default().to_string(),
        data_type: DataType::from_wire(t.data_type().0),
        strides: t.strides().map(|v| v.iter().collect()).unwrap_or_default(),
        dims: t.dims().map(|v| v.iter().collect()).unwrap_or_default(),
        is_virtual: t.virtual_(),
        value: tensor_value::read(&t._tab, t.value_type().0, uid)?,
        is_runtime_pass_by_value: t.is_runtime_pass_by_value(),
        ragged_offset_tensor_uid: t.ragged_offset_tensor_uid(),
        alignment: t.alignment(),
        ragged_offset_multiplier: t.ragged_offset_multiplier(),
    })
}

pub(super) fn encode<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    t: &TensorAttributes,
) -> WIPOffset<fb::TensorAttributes<'a>> {
    type T<'x> = fb::TensorAttributes<'x>;
    let name = fbb.create_string(&t.name);
    let strides = fbb.create_vector(&t.strides);
    let dims = fbb.create_vector(&t.dims);
    let value = t.value.map(|v| tensor_value::push(fbb, v));
    let value_type = fb::TensorValueType(t.value.map_or(0, |v| v.tag()));

    let start = fbb.start_table();
    // Widest fields first, as flatc's own builders order them, to minimise padding.
    fbb.push_slot::<i64>(
        T::VT_RAGGED_OFFSET_MULTIPLIER,
        t.ragged_offset_multiplier,
        DEFAULT_RAGGED_OFFSET_MULTIPLIER,
    );
    fbb.push_slot::<i64>(T::VT_ALIGNMENT, t.alignment, DEFAULT_ALIGNMENT);
    if let Some(aux) = t.ragged_offset_tensor_uid {
        fbb.push_slot_always::<i64>(T::VT_RAGGED_OFFSET_TENSOR_UID, aux);
    }
    fbb.push_slot::<i64>(T::VT_UID, t.uid, 0);
    if let Some(value) = value {
        fbb.push_slot_always(tensor_value::VT_VALUE, value);
    }
    fbb.push_slot_always(T::VT_DIMS, dims);
    fbb.push_slot_always(T::VT_STRIDES, strides);
    fbb.push_slot_always(T::VT_NAME, name);
    fbb.push_slot::<bool>(
        T::VT_IS_RUNTIME_PASS_BY_VALUE,
        t.is_runtime_pass_by_value,
        false,
    );
    fbb.push_slot(T::VT_VALUE_TYPE, value_type, fb::TensorValueType::NONE);
    fbb.push_slot::<bool>(T::VT_VIRTUAL_, t.is_virtual, false);
    fbb.push_slot(
        T::VT_DATA_TYPE,
        fb::DataType(t.data_type.to_wire()),
        fb::DataType::UNSET,
    );
    let end = fbb.end_table(start);
    WIPOffset::new(end.value())
}
