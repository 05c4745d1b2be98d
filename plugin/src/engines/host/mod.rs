//! The `RAGGED_SDPA_HOST_REFERENCE` engine: wraps each variant-pack pointer for this one call
//! (RFC §4.10) and runs the kernels crate's CPU reference.
//!
//! Order matters for soundness: offsets and seq_lens are read (and copied) first, which fixes
//! every tensor's byte extent; the extents are checked for overlap with the outputs; only then
//! are shared and exclusive views created. Writing happens inside `sdpa_forward`, after it has
//! validated everything, so a failing execute writes no output byte.

pub mod staging;

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use ragged_kernels::tensor::{BSHD_SEQ_AXIS, RaggedLayout};
use ragged_kernels::{
    DataType as KernelType, DenseTensor, HostData, KernelError, Role, SdpaParams,
    ShallowRaggedTensor, ShallowRaggedTensorMut, ShallowTensor, ShallowTensorMut, Tensor,
    TensorMut, sdpa_forward,
};
use ragged_schema::DataType;

use crate::error::PluginError;
use crate::overlap::{self, Span};
use crate::plan::{self, IndexPlan, SdpaPlan, TensorPlan};
use crate::scale;
use crate::variant_pack::{self, VariantPack};

/// Runs the plan over host memory.
///
/// # Safety
/// Every pointer in `pack` is a host pointer valid for the extent its tensor in `plan` implies
/// (for a ragged tensor: `ragged_offset[B] × multiplier` elements), for the whole call; inputs
/// are not written by anyone meanwhile.
pub unsafe fn execute(plan: &SdpaPlan, pack: &VariantPack<'_>) -> Result<(), PluginError> {
    let batch = usize::try_from(plan.q.dims[0]).map_err(|_| {
        internal(&format!(
            "q_tensor_uid tensor uid {}: batch dims[0] = {} is negative",
            plan.q.uid, plan.q.dims[0]
        ))
    })?;
    // SAFETY: forwarded contract; each helper reads only the extent the plan gives.
    let (scale, q, k, v, o, stats, seq_len_q, seq_len_kv) = unsafe {
        (
            scale::for_host_engine(plan.scale, pack)?,
            Bound::new(&plan.q, pack)?,
            Bound::new(&plan.k, pack)?,
            Bound::new(&plan.v, pack)?,
            Bound::new(&plan.o, pack)?,
            plan.stats
                .as_ref()
                .map(|t| Bound::new(t, pack))
                .transpose()?,
            plan.seq_len_q
                .map(|p| owned_index_copy(p, batch, pack))
                .transpose()?,
            plan.seq_len_kv
                .map(|p| owned_index_copy(p, batch, pack))
                .transpose()?,
        )
    };
    let reads: Vec<Span> = [&q, &k, &v]
        .iter()
        .map(|b| b.span())
        .chain(variant_pack::read_index_spans(pack, plan))
        .collect();
    let writes: Vec<Span> = std::iter::once(&o)
        .chain(stats.as_ref())
        .map(Bound::span)
        .collect();
    overlap::check(&writes, &reads)?;

    // SAFETY: extents come from validated geometry; outputs overlap nothing.
    let (qv, kv, vv, mut ov, mut lv) = unsafe {
        (
            q.view()?,
            k.view()?,
            v.view()?,
            o.view_mut()?,
            stats.as_ref().map(|s| s.view_mut()).transpose()?,
        )
    };
    let params = SdpaParams {
        scale,
        band: plan.band.mask_band(),
    };
    // The parallel loops run on the plugin's own pool (crate::worker_pool), and only this
    // CPU-only step: staging and GPU calls stay on the caller's thread, whose context they use.
    crate::worker_pool::install(|| {
        sdpa_forward(
            &*qv,
            &*kv,
            &*vv,
            &mut *ov,
            lv.as_mut().map(|t| &mut **t as &mut dyn TensorMut),
            seq_len_q.as_deref(),
            seq_len_kv.as_deref(),
            &params,
        )
    })?
    .map_err(|error| name_tensor(error, plan))
}

/// Bytes `tensor` spans in this call: its dense element space, or for a ragged tensor
/// `ragged_offset[B] × multiplier` elements (read from the pack).
///
/// # Safety
/// The ragged offset pointer (if any) is a host pointer valid for `B + 1` elements of its type.
pub unsafe fn extent_bytes(
    tensor: &TensorPlan,
    pack: &VariantPack<'_>,
) -> Result<usize, PluginError> {
    // SAFETY: forwarded contract.
    unsafe { Bound::new(tensor, pack) }.map(|bound| bound.bytes)
}

/// One Q/K/V/O/LSE tensor of this call: its pointer, its byte extent, and (if ragged) the offsets
/// copied out of the variant pack.
struct Bound<'p> {
    plan: &'p TensorPlan,
    ptr: NonNull<c_void>,
    element: KernelType,
    bytes: usize,
    ragged: Option<(Arc<dyn Tensor>, i64)>,
}

impl<'p> Bound<'p> {
    /// # Safety
    /// The ragged offset pointer (if any) is valid for `B + 1` elements of its type.
    unsafe fn new(plan: &'p TensorPlan, pack: &VariantPack<'_>) -> Result<Self, PluginError> {
        let ptr = pack.pointer(plan.uid, plan.role)?;
        let element = kernel_type(plan.data_type, plan.uid)?;
        let dims = plan.dims.to_vec();
        let strides = plan.strides.to_vec();
        let (elements, ragged) = match plan.ragged {
            None => (
                dense_element_space(&plan.dims, &plan.strides, plan.uid)?,
                None,
            ),
            Some(r) => {
                let aux_plan = IndexPlan {
                    uid: r.aux_uid,
                    role: "ragged_offset_tensor_uid",
                    data_type: r.aux_data_type,
                };
                let count = plan.dims[0]
                    .checked_add(1)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        internal(&format!(
                            "{} tensor uid {}: batch dims[0] + 1 = {} + 1 is out of range",
                            plan.role, plan.uid, plan.dims[0]
                        ))
                    })?;
                // SAFETY: forwarded contract.
                let aux: Arc<dyn Tensor> = unsafe { owned_index_copy(aux_plan, count, pack) }?;
                let layout =
                    RaggedLayout::new(dims, strides, BSHD_SEQ_AXIS, Arc::clone(&aux), r.multiplier)
                        .map_err(|e| PluginError::from(e.for_tensor(plan.uid)))?;
                let total = usize::try_from(layout.total_elements()).map_err(|_| {
                    internal(&format!(
                        "{} tensor uid {}: ragged element total {} is negative",
                        plan.role,
                        plan.uid,
                        layout.total_elements()
                    ))
                })?;
                (total, Some((aux, r.multiplier)))
            }
        };
        let bytes = elements.checked_mul(element.size()).ok_or_else(|| {
            internal(&format!(
                "{} tensor uid {}: {elements} elements of {} bytes overflow the address space",
                plan.role,
                plan.uid,
                element.size()
            ))
        })?;
        Ok(Bound {
            plan,
            ptr,
            element,
            bytes,
            ragged,
        })
    }

    /// An exclusive view over memory another operand also covers would be undefined behaviour,
    /// so every output's span is checked against all other bindings before any view exists.
    fn span(&self) -> Span {
        Span {
            uid: self.plan.uid,
            role: self.plan.role,
            start: self.ptr.as_ptr() as usize,
            bytes: self.bytes,
        }
    }

    /// # Safety
    /// `ptr` is valid for `bytes` bytes that nobody writes during the view's life.
    unsafe fn view(&self) -> Result<Box<dyn Tensor + '_>, PluginError> {
        let (dims, strides) = (self.plan.dims.to_vec(), self.plan.strides.to_vec());
        let ptr = self.ptr.as_ptr().cast_const();
        // SAFETY: forwarded contract.
        let view: Result<Box<dyn Tensor>, KernelError> = unsafe {
            match &self.ragged {
                None => ShallowTensor::from_raw(ptr, self.element, self.bytes, dims, strides)
                    .map(|t| Box::new(t) as Box<dyn Tensor>),
                Some((aux, multiplier)) => ShallowRaggedTensor::from_raw(
                    ptr,
                    self.element,
                    self.bytes,
                    dims,
                    strides,
                    BSHD_SEQ_AXIS,
                    Arc::clone(aux),
                    *multiplier,
                )
                .map(|t| Box::new(t) as Box<dyn Tensor>),
            }
        };
        view.map_err(|e| e.for_tensor(self.plan.uid).into())
    }

    /// # Safety
    /// `ptr` is valid for `bytes` writable bytes that nothing else touches during the view's life.
    unsafe fn view_mut(&self) -> Result<Box<dyn TensorMut + '_>, PluginError> {
        let (dims, strides) = (self.plan.dims.to_vec(), self.plan.strides.to_vec());
        let ptr = self.ptr.as_ptr();
        // SAFETY: forwarded contract.
        let view: Result<Box<dyn TensorMut>, KernelError> = unsafe {
            match &self.ragged {
                None => ShallowTensorMut::from_raw(ptr, self.element, self.bytes, dims, strides)
                    .map(|t| Box::new(t) as Box<dyn TensorMut>),
                Some((aux, multiplier)) => ShallowRaggedTensorMut::from_raw(
                    ptr,
                    self.element,
                    self.bytes,
                    dims,
                    strides,
                    BSHD_SEQ_AXIS,
                    Arc::clone(aux),
                    *multiplier,
                )
                .map(|t| Box::new(t) as Box<dyn TensorMut>),
            }
        };
        view.map_err(|e| e.for_tensor(self.plan.uid).into())
    }
}

/// Copies an int32/int64 `[n, 1, 1, 1]` tensor (ragged offsets, seq_lens) out of the variant pack. The copy is what lets
/// it travel as `Arc<dyn Tensor>` (no borrowed lifetime) and pins the values for this call.
///
/// # Safety
/// The pointer bound to `index.uid` is valid for `n` elements of `index.data_type`.
unsafe fn owned_index_copy(
    index: IndexPlan,
    n: usize,
    pack: &VariantPack<'_>,
) -> Result<Arc<dyn Tensor>, PluginError> {
    // SAFETY: forwarded contract.
    let shallow = unsafe { index_view(index, n, pack) }?;
    let (dims, strides) = index_shape(n);
    let owned: Result<Arc<dyn Tensor>, KernelError> = match shallow.host_data() {
        HostData::I32(values) => DenseTensor::from_vec(values.to_vec(), dims, strides)
            .map(|t| Arc::new(t) as Arc<dyn Tensor>),
        HostData::I64(values) => DenseTensor::from_vec(values.to_vec(), dims, strides)
            .map(|t| Arc::new(t) as Arc<dyn Tensor>),
        _ => {
            return Err(internal(&format!(
                "{} tensor uid {} is not int32/int64",
                index.role, index.uid
            )));
        }
    };
    owned.map_err(|e| e.for_tensor(index.uid).into())
}

/// # Safety
/// As for [`owned_index_copy`].
unsafe fn index_view<'a>(
    index: IndexPlan,
    n: usize,
    pack: &VariantPack<'a>,
) -> Result<ShallowTensor<'a>, PluginError> {
    let ptr = pack.pointer(index.uid, index.role)?;
    let element = kernel_type(index.data_type, index.uid)?;
    let bytes = index_tensor_bytes(index.uid, index.data_type, n)?;
    let (dims, strides) = index_shape(n);
    // SAFETY: forwarded contract: `n` elements of `element` at `ptr`.
    unsafe { ShallowTensor::from_raw(ptr.as_ptr().cast_const(), element, bytes, dims, strides) }
        .map_err(|e| e.for_tensor(index.uid).into())
}

/// Bytes of an `n`-entry int32/int64 tensor (offsets: B + 1, seq_lens: B). `n` comes from the
/// graph's dims, so the product is checked rather than trusted to fit.
pub fn index_tensor_bytes(uid: i64, data_type: DataType, n: usize) -> Result<usize, PluginError> {
    kernel_type(data_type, uid)?
        .size()
        .checked_mul(n)
        .ok_or_else(|| {
            PluginError::InvalidValue(format!(
                "tensor uid {uid}: {n} entries of {data_type} overflow the address space"
            ))
        })
}

fn index_shape(n: usize) -> (Vec<i64>, Vec<i64>) {
    (vec![n as i64, 1, 1, 1], vec![1, 1, 1, 1])
}

fn kernel_type(data_type: DataType, uid: i64) -> Result<KernelType, PluginError> {
    plan::kernel_type(data_type).ok_or_else(|| {
        internal(&format!(
            "tensor uid {uid} has data type {data_type}, which the plan should have declined"
        ))
    })
}

/// Elements a dense tensor spans: `1 + Σ (dims[i] − 1)·strides[i]`, 0 if any dim is 0.
fn dense_element_space(
    dims: &[i64; 4],
    strides: &[i64; 4],
    uid: i64,
) -> Result<usize, PluginError> {
    if dims.contains(&0) {
        return Ok(0);
    }
    let last = dims.iter().zip(strides).try_fold(0i64, |acc, (d, s)| {
        (d - 1).checked_mul(*s).and_then(|x| acc.checked_add(x))
    });
    last.and_then(|l| l.checked_add(1))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            PluginError::InvalidValue(format!(
                "tensor uid {uid}: dims {dims:?} with strides {strides:?} overflow the address space"
            ))
        })
}

/// SDPA errors name a role; the backend needs the uid.
fn name_tensor(error: KernelError, plan: &SdpaPlan) -> PluginError {
    let role = match &error {
        KernelError::SdpaRank { role, .. }
        | KernelError::SdpaDataType { role, .. }
        | KernelError::SdpaDim { role, .. }
        | KernelError::SdpaSeqAxis { role, .. }
        | KernelError::RowsOutsideBatch { role, .. }
        | KernelError::ExtentMismatch { role, .. }
        | KernelError::RowsBeyondExtent { role, .. }
        | KernelError::SeqLenOutOfRange { role, .. }
        | KernelError::NotScalar { role, .. } => Some(*role),
        _ => None,
    };
    let uid = match role {
        Some(Role::Q) => Some(plan.q.uid),
        Some(Role::K) => Some(plan.k.uid),
        Some(Role::V) => Some(plan.v.uid),
        Some(Role::O) => Some(plan.o.uid),
        Some(Role::Lse) => plan.stats.as_ref().map(|s| s.uid),
        Some(Role::SeqLenQ) => plan.seq_len_q.map(|s| s.uid),
        Some(Role::SeqLenKv) => plan.seq_len_kv.map(|s| s.uid),
        _ => None,
    };
    match uid {
        Some(uid) => error.for_tensor(uid).into(),
        None => error.into(),
    }
}

fn internal(what: &str) -> PluginError {
    PluginError::Engine(format!("host engine: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability;

    #[test]
    fn sdpa_errors_about_an_output_name_its_uid() {
        let graph = crate::test_graphs::golden();
        let plan = applicability::plan(&graph).expect("the golden graph is accepted");
        let error = name_tensor(
            KernelError::RowsBeyondExtent {
                role: Role::O,
                batch: 0,
                extent: 1,
                rows: 2,
                source_role: Role::Q,
            },
            &plan,
        );
        assert_eq!(
            error.to_string(),
            "tensor uid 4: O: batch 0 has sequence extent 1, below the 2 rows Q defines"
        );
    }

    #[test]
    fn index_tensor_sizes_are_checked_and_name_the_uid() {
        assert_eq!(index_tensor_bytes(5, DataType::Int32, 3).ok(), Some(12));
        assert_eq!(index_tensor_bytes(5, DataType::Int64, 3).ok(), Some(24));
        let error = index_tensor_bytes(6, DataType::Int64, usize::MAX / 4)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error,
            Some(format!(
                "invalid value: tensor uid 6: {} entries of int64 overflow the address space",
                usize::MAX / 4
            ))
        );
    }
}
