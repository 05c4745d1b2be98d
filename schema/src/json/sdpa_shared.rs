//! The attributes forward and backward SDPA nodes share (flags, scalars, bounds and the
//! diagonal alignment), read and written once for both.

use serde_json::{Map, Value, json};

use super::object::{Obj, read_enum};
use crate::error::SchemaError;
use crate::model::{DiagonalAlignment, SdpaShared};

/// The attributes forward and backward nodes share, read into either: absent flags are false,
/// absent scalars and bounds unset.
pub(super) fn read_shared_attributes<T: SdpaShared>(
    a: &Obj<'_>,
    s: &mut T,
) -> Result<(), SchemaError> {
    for f in &T::FLAGS {
        *(f.slot)(s) = a.boolean(f.name)?.unwrap_or(false);
    }
    for f in &T::SCALARS {
        *(f.slot)(s) = a.f32(f.name)?;
    }
    for f in &T::BOUNDS {
        *(f.slot)(s) = a.i64(f.name)?;
    }
    Ok(())
}

/// `diagonal_alignment` by name or wire number; absent means the schema default.
pub(super) fn read_alignment(a: &Obj<'_>) -> Result<DiagonalAlignment, SchemaError> {
    Ok(read_enum(
        a,
        "diagonal_alignment",
        DiagonalAlignment::from_json_name,
        DiagonalAlignment::from_wire,
    )?
    .unwrap_or_default())
}

/// The attributes forward and backward nodes share, in wire order; unset ones as `null`.
pub(super) fn write_shared_attributes<T: SdpaShared>(s: &T, m: &mut Map<String, Value>) {
    for f in &T::FLAGS {
        m.insert(f.name.into(), json!((f.get)(s)));
    }
    for f in &T::SCALARS {
        m.insert(f.name.into(), json!((f.get)(s).map(f64::from)));
    }
    for f in &T::BOUNDS {
        m.insert(f.name.into(), json!((f.get)(s)));
    }
}

/// `diagonal_alignment` by its JSON name, or its wire number where it has none.
pub(super) fn diagonal_alignment(a: DiagonalAlignment) -> Value {
    a.json_name()
        .map_or_else(|| json!(a.to_wire()), |n| json!(n))
}
