//! The variant pack of one execute: tensor uid → pointer, plus the call's stream and workspace,
//! valid only during the call.
//!
//! Creating one is the single unsafe step of an execute: [`VariantPack::new`] takes the caller's
//! promise about every pointer, and every layer below it (the engines' `execute`, the host
//! engine's views and staging) is a safe function that relies on that promise.
//!
//! hipDNN sends a handful of entries, so a linear scan beats building a map on every execute.

use std::ffi::c_void;
use std::ptr::NonNull;

use ragged_core::problem::{
    IndexInput, IndexWidth, OFFSETS_ROLE, Operand, RaggedSdpaProblem, ScalePlan,
};

use crate::abi::types::DeviceBuffer;
use crate::error::PluginError;
use crate::overlap::Span;

#[derive(Debug)]
pub struct VariantPack<'a> {
    entries: &'a [DeviceBuffer],
    stream: *mut c_void,
    workspace: *mut c_void,
}

impl<'a> VariantPack<'a> {
    /// Rejects a uid bound twice: which pointer the caller meant would be a guess.
    ///
    /// # Safety
    /// For the whole call and until `stream` completes the work it is given: every pointer in
    /// `entries` is valid for the extent its tensor in the execution context's problem implies
    /// (for a ragged tensor `ragged_offset[B] × multiplier` elements), in memory the context's
    /// engine reaches (host memory, or device memory of `stream`'s context where the engine is a
    /// GPU engine or stages device memory); inputs are not written by anyone meanwhile; a
    /// pass-by-value scale's pointer is a host pointer to one element of its type
    /// (plugin-abi.md §5.7); `workspace` is NULL or holds the context's workspace size in bytes;
    /// `stream` is NULL or a live stream.
    pub unsafe fn new(
        entries: &'a [DeviceBuffer],
        stream: *mut c_void,
        workspace: *mut c_void,
    ) -> Result<Self, PluginError> {
        for (i, entry) in entries.iter().enumerate() {
            if entries[..i].iter().any(|e| e.uid == entry.uid) {
                return Err(PluginError::InvalidValue(format!(
                    "device_buffers binds tensor uid {} more than once",
                    entry.uid
                )));
            }
        }
        Ok(VariantPack {
            entries,
            stream,
            workspace,
        })
    }

    /// The stream this call's work is enqueued on (NULL: the default stream).
    pub fn stream(&self) -> *mut c_void {
        self.stream
    }

    /// The caller's workspace for this call (NULL when the plan needs none).
    pub fn workspace(&self) -> *mut c_void {
        self.workspace
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
    pub fn aux_address(&self, tensor: &Operand) -> Result<usize, PluginError> {
        tensor
            .ragged
            .map_or(Ok(0), |r| self.address(r.uid, OFFSETS_ROLE))
    }

    /// The address of an optional index input (`seq_len_q/kv`); 0 when the graph has none.
    pub fn optional_address(&self, index: Option<IndexInput>) -> Result<usize, PluginError> {
        index.map_or(Ok(0), |s| self.address(s.uid, s.role))
    }
}

/// The spans of the small inputs `plan` reads besides Q, K and V: every ragged offset aux
/// (`B + 1` entries), each seq_len (`B`), and a scale tensor bound at execute (one element),
/// for the overlap check ([`crate::overlap`]). Bindings that are absent or NULL are left out:
/// the engine reports those by uid when it reads them.
pub fn read_index_spans(pack: &VariantPack<'_>, problem: &RaggedSdpaProblem) -> Vec<Span> {
    index_spans(pack, problem).into_iter().flatten().collect()
}

/// [`read_index_spans`] on the stack, for the per-call path: one slot per Q/K/V/O/LSE offsets
/// aux, per seq_len and for the scale, in that order, `None` where there is none.
pub fn index_spans(pack: &VariantPack<'_>, problem: &RaggedSdpaProblem) -> [Option<Span>; 8] {
    let batch = usize::try_from(problem.batch()).unwrap_or(0);
    let width = |w: IndexWidth| usize::try_from(w.bytes()).unwrap_or(8);
    let span = |uid: i64, role: &'static str, bytes: usize| {
        let start = pack.pointer(uid, role).ok()?.as_ptr() as usize;
        Some(Span {
            uid,
            role,
            start,
            bytes,
        })
    };
    let mut spans = [None; 8];
    let tensors = problem.tensors().map(Some).chain(std::iter::repeat(None));
    for (slot, t) in spans[..5].iter_mut().zip(tensors) {
        if let Some(t) = t
            && let Some(r) = t.ragged
        {
            let entries = usize::try_from(t.dims[0]).unwrap_or(0).saturating_add(1);
            *slot = span(r.uid, OFFSETS_ROLE, entries.saturating_mul(width(r.width)));
        }
    }
    let seq_lens = [problem.seq_len_q, problem.seq_len_kv];
    for (slot, index) in spans[5..7].iter_mut().zip(seq_lens) {
        if let Some(index) = index {
            *slot = span(
                index.uid,
                index.role,
                batch.saturating_mul(width(index.width)),
            );
        }
    }
    if let ScalePlan::RuntimeHostScalar { uid, data_type }
    | ScalePlan::DeviceTensor { uid, data_type } = problem.scale
    {
        spans[7] = span(uid, "scale_tensor_uid", data_type.size());
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut as null;

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
        // SAFETY: nothing in this test dereferences a pointer.
        let pack = unsafe { VariantPack::new(&entries, null(), null()) };
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
        use ragged_core::DataType;
        use ragged_core::problem::{IndexWidth, Offsets};

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
        // SAFETY: nothing in this test dereferences a pointer.
        let pack = unsafe { VariantPack::new(&entries, null(), null()) }.ok();
        let mut tensor = Operand {
            uid: 1,
            role: "q_tensor_uid",
            dtype: DataType::F16,
            dims: [1, 1, 1, 1],
            strides: [1, 1, 1, 1],
            alignment: 16,
            ragged: None,
        };
        let aux = |t: &Operand| pack.as_ref().map(|p| p.aux_address(t).ok());
        assert_eq!(aux(&tensor), Some(Some(0)), "dense: no aux");
        tensor.ragged = Some(Offsets {
            uid: 5,
            width: IndexWidth::I32,
            multiplier: 1,
        });
        assert_eq!(aux(&tensor), Some(Some(&raw mut offsets as usize)));
        tensor.ragged = tensor.ragged.map(|r| Offsets { uid: 6, ..r });
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
        let seq_len = IndexInput {
            uid: 1,
            role: "seq_len_q_tensor_uid",
            width: IndexWidth::I32,
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
        // SAFETY: the pack is refused before any pointer could be used.
        assert!(unsafe { VariantPack::new(&entries, null(), null()) }.is_err());
    }
}
