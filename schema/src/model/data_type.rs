//! hipDNN's `DataType` enum (`data_types.fbs`), with its wire numbers and JSON names.

use std::fmt;

/// Element type of a tensor as the FlatBuffers schema numbers it.
///
/// These are *not* the backend C enum's numbers (`hipdnnDataType_t` numbers differently);
/// plugins only ever see these. `Unknown` keeps values a newer producer may write, so that the
/// plugin can decline the graph instead of failing to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataType {
    #[default]
    Unset,
    Float,
    Half,
    BFloat16,
    Double,
    Uint8,
    Int32,
    Int8,
    Fp8E4m3,
    Fp8E5m2,
    Fp8E8m0,
    Fp4E2m1,
    Fp6E2m3,
    Fp6E3m2,
    Int4,
    Int64,
    Fp8E4m3Fnuz,
    Fp8E5m2Fnuz,
    /// Provisional: upstream's JSON map knows `boolean`, but its wire number (18) is unconfirmed.
    Boolean,
    Unknown(i8),
}

/// (variant, wire value, JSON string) — one table so the three views cannot drift apart.
const TABLE: [(DataType, i8, &str); 19] = [
    (DataType::Unset, 0, "unset"),
    (DataType::Float, 1, "float"),
    (DataType::Half, 2, "half"),
    (DataType::BFloat16, 3, "bfloat16"),
    (DataType::Double, 4, "double"),
    (DataType::Uint8, 5, "uint8"),
    (DataType::Int32, 6, "int32"),
    (DataType::Int8, 7, "int8"),
    (DataType::Fp8E4m3, 8, "fp8_e4m3"),
    (DataType::Fp8E5m2, 9, "fp8_e5m2"),
    (DataType::Fp8E8m0, 10, "fp8_e8m0"),
    (DataType::Fp4E2m1, 11, "fp4_e2m1"),
    (DataType::Fp6E2m3, 12, "fp6_e2m3"),
    (DataType::Fp6E3m2, 13, "fp6_e3m2"),
    (DataType::Int4, 14, "int4"),
    (DataType::Int64, 15, "int64"),
    (DataType::Fp8E4m3Fnuz, 16, "fp8_e4m3_fnuz"),
    (DataType::Fp8E5m2Fnuz, 17, "fp8_e5m2_fnuz"),
    (DataType::Boolean, 18, "boolean"),
];

impl DataType {
    /// Every named data type (no `Unknown`), in wire order.
    pub fn all_known() -> impl Iterator<Item = DataType> {
        TABLE.iter().map(|(dt, _, _)| *dt)
    }

    pub fn from_wire(value: i8) -> DataType {
        TABLE
            .iter()
            .find(|(_, v, _)| *v == value)
            .map_or(DataType::Unknown(value), |(dt, _, _)| *dt)
    }

    pub fn to_wire(self) -> i8 {
        match self {
            DataType::Unknown(v) => v,
            known => TABLE
                .iter()
                .find(|(dt, _, _)| *dt == known)
                .map_or(0, |(_, v, _)| *v),
        }
    }

    /// The JSON graph-dump spelling; `None` for `Unknown`, which JSON cannot express.
    pub fn json_name(self) -> Option<&'static str> {
        TABLE
            .iter()
            .find(|(dt, _, _)| *dt == self)
            .map(|(_, _, name)| *name)
    }

    /// Strict inverse of [`DataType::json_name`]: unknown strings are `None`, unlike upstream's
    /// nlohmann mapping, which silently reads them as `unset`.
    pub fn from_json_name(name: &str) -> Option<DataType> {
        TABLE
            .iter()
            .find(|(_, _, n)| *n == name)
            .map(|(dt, _, _)| *dt)
    }

    /// Bytes per element for the byte-addressable types; `None` for sub-byte, unset and unknown
    /// types, whose buffer size cannot be computed element-wise.
    pub fn size_in_bytes(self) -> Option<usize> {
        match self {
            DataType::Double | DataType::Int64 => Some(8),
            DataType::Float | DataType::Int32 => Some(4),
            DataType::Half | DataType::BFloat16 => Some(2),
            DataType::Uint8
            | DataType::Int8
            | DataType::Fp8E4m3
            | DataType::Fp8E5m2
            | DataType::Fp8E8m0
            | DataType::Fp8E4m3Fnuz
            | DataType::Fp8E5m2Fnuz
            | DataType::Boolean => Some(1),
            DataType::Unset
            | DataType::Fp4E2m1
            | DataType::Fp6E2m3
            | DataType::Fp6E3m2
            | DataType::Int4
            | DataType::Unknown(_) => None,
        }
    }

    /// Offsets and sequence lengths may only be these two.
    pub fn is_index_type(self) -> bool {
        matches!(self, DataType::Int32 | DataType::Int64)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.json_name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown data type {}", self.to_wire()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_numbers_match_schema_md() {
        assert_eq!(DataType::Unset.to_wire(), 0);
        assert_eq!(DataType::BFloat16.to_wire(), 3);
        assert_eq!(DataType::Int32.to_wire(), 6);
        assert_eq!(DataType::Int64.to_wire(), 15);
        assert_eq!(DataType::Fp8E5m2Fnuz.to_wire(), 17);
        assert_eq!(DataType::from_wire(2), DataType::Half);
        assert_eq!(DataType::from_wire(99), DataType::Unknown(99));
        assert_eq!(DataType::Unknown(99).to_wire(), 99);
    }

    #[test]
    fn every_wire_value_round_trips() {
        for v in i8::MIN..=i8::MAX {
            assert_eq!(DataType::from_wire(v).to_wire(), v);
        }
    }

    #[test]
    fn json_names_are_strict() {
        assert_eq!(
            DataType::from_json_name("bfloat16"),
            Some(DataType::BFloat16)
        );
        assert_eq!(
            DataType::from_json_name("fp8_e4m3_fnuz"),
            Some(DataType::Fp8E4m3Fnuz)
        );
        assert_eq!(DataType::from_json_name("BFLOAT16"), None);
        assert_eq!(DataType::from_json_name("bf16"), None);
        assert_eq!(DataType::Unknown(40).json_name(), None);
    }
}
