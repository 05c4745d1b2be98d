//! The variant pack of one execute: tensor uid → pointer, valid only during the call.
//!
//! hipDNN sends a handful of entries, so a linear scan beats building a map on every execute.

use std::ffi::c_void;
use std::ptr::NonNull;

use crate::abi::types::DeviceBuffer;
use crate::error::PluginError;

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
