//! The variant pack of one execute: tensor uid → pointer, valid only during the call.
//!
//! hipDNN sends a handful of entries, so a linear scan beats building a map on every execute.

use std::ffi::c_void;
use std::ptr::NonNull;

use crate::abi::types::DeviceBuffer;
use crate::error::PluginError;
use crate::plan::{IndexPlan, TensorPlan};

pub struct VariantPack<'a> {
    entries: &'a [DeviceBuffer],
}

impl<'a> VariantPack<'a> {
    /// Rejects a uid bound twice: which pointer the caller meant would be a guess.
    pub fn new(entries: &'a [DeviceBuffer]) -> Result<Self, PluginError> {
        for (i, entry) in entries.iter().enumerate() {
            if entries[..i].iter().any(|e| e.uid == entry.uid) {
                return Err(PluginError::InvalidValue(format!(
                    "device_buffers binds tensor uid {} more than once",
                    entry.uid
                )));
            }
        }
        Ok(VariantPack { entries })
    }

    /// Every binding, in the caller's order.
    pub fn entries(&self) -> &'a [DeviceBuffer] {
        self.entries
    }

    /// The pointer bound to `uid`; `role` names the SDPA field in the error.
    pub fn pointer(&self, uid: i64, role: &'static str) -> Result<NonNull<c_void>, PluginError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.uid == uid)
            .ok_or(PluginError::MissingBuffer { uid, role })?;
        NonNull::new(entry.ptr).ok_or(PluginError::NullBuffer { uid, role })
    }

    /// The address bound to `uid`, for GPU engines, which hand addresses to device code and
    /// never dereference them here.
    pub fn address(&self, uid: i64, role: &'static str) -> Result<usize, PluginError> {
        Ok(self.pointer(uid, role)?.as_ptr() as usize)
    }

    /// The address of `tensor`'s ragged offset aux; 0 (the launchers' "absent") when dense.
    pub fn aux_address(&self, tensor: &TensorPlan) -> Result<usize, PluginError> {
        tensor.ragged.map_or(Ok(0), |r| {
            self.address(r.aux_uid, "ragged_offset_tensor_uid")
        })
    }

    /// The address of an optional index input (`seq_len_q/kv`); 0 when the graph has none.
    pub fn optional_address(&self, index: Option<IndexPlan>) -> Result<usize, PluginError> {
        index.map_or(Ok(0), |s| self.address(s.uid, s.role))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_name_the_missing_or_null_uid() {
        let mut x = 0u8;
        let entries = [
            DeviceBuffer {
                uid: 1,
                ptr: (&raw mut x).cast(),
            },
            DeviceBuffer {
                uid: 2,
                ptr: std::ptr::null_mut(),
            },
        ];
        let pack = VariantPack::new(&entries);
        let pack = pack.as_ref().ok();
        assert!(pack.is_some_and(|p| p.pointer(1, "q_tensor_uid").is_ok()));
        let missing = pack.and_then(|p| p.pointer(7, "k_tensor_uid").err());
        assert_eq!(
            missing.map(|e| e.to_string()),
            Some("tensor uid 7 (k_tensor_uid) has no entry in device_buffers".into())
        );
        let null = pack.and_then(|p| p.pointer(2, "v_tensor_uid").err());
        assert!(matches!(null, Some(PluginError::NullBuffer { uid: 2, .. })));
    }

    #[test]
    fn device_addresses_are_zero_only_for_what_the_graph_lacks() {
        use crate::plan::RaggedPlan;
        use ragged_schema::DataType;

        let (mut q, mut offsets) = (0u8, 0u8);
        let entries = [
            DeviceBuffer {
                uid: 1,
                ptr: (&raw mut q).cast(),
            },
            DeviceBuffer {
                uid: 5,
                ptr: (&raw mut offsets).cast(),
            },
        ];
        let pack = VariantPack::new(&entries).ok();
        let mut tensor = TensorPlan {
            uid: 1,
            role: "q_tensor_uid",
            data_type: DataType::Half,
            dims: [1, 1, 1, 1],
            strides: [1, 1, 1, 1],
            alignment: 16,
            ragged: None,
        };
        let aux = |t: &TensorPlan| pack.as_ref().map(|p| p.aux_address(t).ok());
        assert_eq!(aux(&tensor), Some(Some(0)), "dense: no aux");
        tensor.ragged = Some(RaggedPlan {
            aux_uid: 5,
            aux_data_type: DataType::Int32,
            multiplier: 1,
        });
        assert_eq!(aux(&tensor), Some(Some(&raw mut offsets as usize)));
        tensor.ragged = tensor.ragged.map(|r| RaggedPlan { aux_uid: 6, ..r });
        let missing = pack.as_ref().and_then(|p| p.aux_address(&tensor).err());
        assert!(matches!(
            missing,
            Some(PluginError::MissingBuffer {
                uid: 6,
                role: "ragged_offset_tensor_uid"
            })
        ));
        let none = pack.as_ref().map(|p| p.optional_address(None).ok());
        assert_eq!(none, Some(Some(0)));
        let seq_len = IndexPlan {
            uid: 1,
            role: "seq_len_q_tensor_uid",
            data_type: DataType::Int32,
        };
        let bound = pack
            .as_ref()
            .map(|p| p.optional_address(Some(seq_len)).ok());
        assert_eq!(bound, Some(Some(&raw mut q as usize)));
    }

    #[test]
    fn a_uid_bound_twice_is_rejected() {
        let entries = [
            DeviceBuffer {
                uid: 3,
                ptr: std::ptr::null_mut(),
            },
            DeviceBuffer {
                uid: 3,
                ptr: std::ptr::null_mut(),
            },
        ];
        assert!(VariantPack::new(&entries).is_err());
    }
}
