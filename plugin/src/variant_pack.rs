//! The variant pack of one execute: tensor uid → pointer, valid only during the call.
//!
//! hipDNN sends a handful of entries, so a linear scan beats building a map on every execute.

use std::ffi::c_void;
use std::ptr::NonNull;

use crate::abi::types::DeviceBuffer;
use crate::error::PluginError;
use crate::overlap::Span;
use crate::plan::{IndexPlan, ScalePlan, SdpaPlan, TensorPlan};

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

/// The spans of the small inputs `plan` reads besides Q, K and V: every ragged offset aux
/// (`B + 1` entries), each seq_len (`B`), and a scale tensor bound at execute (one element),
/// for the overlap check ([`crate::overlap`]). Bindings that are absent or NULL are left out:
/// the engine reports those by uid when it reads them.
pub fn read_index_spans(pack: &VariantPack<'_>, plan: &SdpaPlan) -> Vec<Span> {
    let index_bytes = |t: ragged_schema::DataType| {
        if t == ragged_schema::DataType::Int32 {
            4
        } else {
            8
        }
    };
    let batch = usize::try_from(plan.q.dims[0]).unwrap_or(0);
    let mut wanted: Vec<(i64, &'static str, usize)> = Vec::new();
    let tensors = [&plan.q, &plan.k, &plan.v, &plan.o]
        .into_iter()
        .chain(plan.stats.as_ref());
    for t in tensors {
        if let Some(r) = t.ragged {
            let entries = usize::try_from(t.dims[0]).unwrap_or(0).saturating_add(1);
            let bytes = entries.saturating_mul(index_bytes(r.aux_data_type));
            wanted.push((r.aux_uid, "ragged_offset_tensor_uid", bytes));
        }
    }
    for index in [plan.seq_len_q, plan.seq_len_kv].into_iter().flatten() {
        wanted.push((
            index.uid,
            index.role,
            batch.saturating_mul(index_bytes(index.data_type)),
        ));
    }
    if let ScalePlan::RuntimeHostScalar { uid, data_type }
    | ScalePlan::DeviceTensor { uid, data_type } = plan.scale
    {
        let bytes = crate::plan::kernel_type(data_type).map_or(8, |t| t.size());
        wanted.push((uid, "scale_tensor_uid", bytes));
    }
    wanted
        .into_iter()
        .filter_map(|(uid, role, bytes)| {
            let start = pack.pointer(uid, role).ok()?.as_ptr() as usize;
            Some(Span {
                uid,
                role,
                start,
                bytes,
            })
        })
        .collect()
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
