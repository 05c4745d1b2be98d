//! The `RAGGED_SDPA_HOST_REFERENCE` engine: wraps each variant-pack pointer for this one call
//! (RFC §4.10) and runs the kernels crate's CPU reference.
//!
//! Order matters for soundness: offsets and seq_lens are read (and copied) first, which fixes
//! every tensor's byte extent; the extents are checked for overlap with the outputs; only then
//! are shared and exclusive views created. Writing happens inside `sdpa_forward`, after it has
//! validated everything, so a failing execute writes no output byte.

pub mod backward;
pub mod device_memory;
pub mod graph;
pub mod staging;

use std::ffi::{OsStr, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use ragged_kernels::problem::{IndexInput, IndexWidth, OFFSETS_ROLE, Operand, RaggedSdpaProblem};
use ragged_kernels::tensor::{BorrowedStorage, Dense, Ragged, RaggedLayout};
use ragged_kernels::{
    DataType as KernelType, DenseTensor, HostData, HostDataMut, KernelError, Role, SdpaParams,
    ShallowTensor, Tensor, TensorMut, sdpa_forward,
};

use super::{HOST_REFERENCE, Listing, Planned, Planner};
use crate::error::PluginError;
use crate::overlap::{self, Span};
use crate::scale;
use crate::variant_pack::{self, VariantPack};
use ragged_kernels::Decline;

/// Environment variable that lists the host reference engine even next to a GPU runtime.
pub const HOST_ENGINE_ENV: &str = "HIPDNN_RAGGED_SDPA_HOST_ENGINE";

/// The engine: applicable to every graph the plugin accepts, wherever it can reach the memory.
pub struct HostReference;

/// The host engine's listing rule, separated from the probes so it can be tested on any machine.
pub fn host_engine_offered(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> bool {
    !gpu_runtime_present || env_value == Some(OsStr::new("1"))
}

/// Listed without a GPU runtime (every pointer is host memory) or when asked for; silent when
/// listed, as it always was.
pub fn listing_for(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> Listing {
    if host_engine_offered(gpu_runtime_present, env_value) {
        return Listing {
            listed: true,
            line: None,
        };
    }
    Listing {
        listed: false,
        line: Some(format!(
            "{} not listed: a GPU runtime is loadable and {HOST_ENGINE_ENV} is not 1 (set it to \
             run the CPU reference; next to CUDA it copies device tensors to the host)",
            HOST_REFERENCE.name_str()
        )),
    }
}

impl Planner for HostReference {
    fn listing(&self) -> Listing {
        listing_for(
            ragged_kernels::runtime::probe::gpu_runtime_present(),
            std::env::var_os(HOST_ENGINE_ENV).as_deref(),
        )
    }

    fn plan(&self, _problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline> {
        staging::check_reachable()?;
        Ok(Box::new(HostPlan))
    }

    fn plan_graph(
        &self,
        graph: &Arc<crate::graph_plan::GraphPlan>,
    ) -> Result<Box<dyn Planned>, Decline> {
        staging::check_reachable()?;
        Ok(Box::new(graph::HostGraphPlan {
            graph: Arc::clone(graph),
        }))
    }

    fn plan_backward(
        &self,
        problem: &Arc<crate::backward_problem::BackwardProblem>,
    ) -> Result<Box<dyn Planned>, Decline> {
        staging::check_reachable()?;
        Ok(Box::new(backward::HostBackwardPlan {
            problem: Arc::clone(problem),
        }))
    }
}

/// The host engine keeps nothing per graph beyond the problem itself.
#[derive(Debug)]
struct HostPlan;

impl Planned for HostPlan {
    fn workspace_size(&self) -> usize {
        0
    }

    /// The engine's one entry: in place where every pointer is host memory, else through
    /// host copies of the device tensors ([`staging`]).
    fn execute(
        &self,
        problem: &RaggedSdpaProblem,
        pack: &VariantPack<'_>,
    ) -> Result<(), PluginError> {
        match staging::access() {
            staging::Access::InPlace => run(problem, pack),
            staging::Access::Copies(memory) => staging::run_staged(problem, memory, pack),
            staging::Access::Unreachable(reason) => Err(PluginError::NotApplicable {
                engine: HOST_REFERENCE.name_str(),
                reason: reason.clone(),
            }),
        }
    }
}

/// Runs the CPU reference over `pack`, whose pointers must all be host memory (the caller
/// stages device memory first).
pub fn run(problem: &RaggedSdpaProblem, pack: &VariantPack<'_>) -> Result<(), PluginError> {
    let batch = usize::try_from(problem.batch()).map_err(|_| {
        internal(&format!(
            "q_tensor_uid tensor uid {}: batch B = {} is negative",
            problem.q.uid,
            problem.batch()
        ))
    })?;
    let (q, k, v, o) = (
        Bound::new(&problem.q, pack)?,
        Bound::new(&problem.k, pack)?,
        Bound::new(&problem.v, pack)?,
        Bound::new(&problem.o, pack)?,
    );
    let stats = match &problem.stats {
        Some(t) => Some(Bound::new(t, pack)?),
        None => None,
    };
    let index = |s: &IndexInput| owned_index_copy(*s, batch, pack);
    let seq_len_q = problem.seq_len_q.as_ref().map(index).transpose()?;
    let seq_len_kv = problem.seq_len_kv.as_ref().map(index).transpose()?;
    // SAFETY: the pack's contract: a runtime or staged scale is a host pointer to one element.
    let scale = unsafe { scale::for_host_engine(problem.scale, pack) }?;
    let reads: Vec<Span> = [&q, &k, &v]
        .iter()
        .map(|b| b.span())
        .chain(variant_pack::read_index_spans(pack, problem))
        .collect();
    let writes: Vec<Span> = std::iter::once(&o)
        .chain(stats.as_ref())
        .map(Bound::span)
        .collect();
    overlap::check(&writes, &reads)?;

    // Outputs overlap nothing (checked above), so exclusive views are sound.
    let (qv, kv, vv, mut ov) = (q.view()?, k.view()?, v.view()?, o.view_mut()?);
    let mut lv = stats.as_ref().map(|s| s.view_mut()).transpose()?;
    let params = SdpaParams {
        scale,
        band: problem.mask,
    };
    let forward = || {
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
    };
    // A problem whose whole work is below INLINE_WORK runs on the caller's thread: waking a pool
    // thread and waiting for it would cost more than it saves. Otherwise the parallel loops run
    // on the plugin's own pool (crate::worker_pool), and only this CPU-only step: staging and
    // GPU calls stay on the caller's thread, whose context they use.
    let result = if forward_work(problem) <= INLINE_WORK {
        ragged_kernels::sdpa::on_calling_thread(forward)
    } else {
        crate::worker_pool::install(forward)?
    };
    result.map_err(|error| name_tensor(error, problem))
}

/// Multiply-adds below which the forward runs on the calling thread: about 50 µs of one core's
/// work at the reference's tile throughput, against a few µs per pool hand-off.
const INLINE_WORK: u128 = 1 << 20;

/// An upper bound of the forward's multiply-adds from the graph's dims alone (every batch at
/// S_max, every key admitted): B · H_q · S_q · S_kv · (D_qk + D_v).
fn forward_work(problem: &RaggedSdpaProblem) -> u128 {
    let dim = |x: i64| u128::try_from(x).unwrap_or(u128::MAX);
    let [b, s_q, h_q, d_qk] = problem.q.bshd();
    let [_, s_kv, _, _] = problem.k.bshd();
    let d_v = problem.v.head_dim();
    [b, h_q, s_q, s_kv]
        .into_iter()
        .map(dim)
        .fold(dim(d_qk).saturating_add(dim(d_v)), u128::saturating_mul)
}

/// Bytes each of Q, K, V, O and the stats tensor spans in this call (uid, role, bytes): its
/// dense element space, or for a ragged tensor `ragged_offset[B] × multiplier` elements, read
/// from the pack, whose offsets must be host memory.
pub fn extents(
    problem: &RaggedSdpaProblem,
    pack: &VariantPack<'_>,
) -> Result<Vec<(i64, &'static str, usize)>, PluginError> {
    problem
        .tensors()
        .map(|t| Bound::new(t, pack).map(|b| (t.uid, t.role, b.bytes)))
        .collect()
}

/// One Q/K/V/O/LSE tensor of this call: its pointer, its byte extent, and (if ragged) the offsets
/// copied out of the variant pack.
struct Bound<'p> {
    plan: &'p Operand,
    ptr: NonNull<c_void>,
    element: KernelType,
    bytes: usize,
    ragged: Option<(Arc<dyn Tensor>, i64)>,
}

impl<'p> Bound<'p> {
    /// Reads the offsets (if ragged) to fix the tensor's byte extent.
    fn new(plan: &'p Operand, pack: &VariantPack<'_>) -> Result<Self, PluginError> {
        let ptr = pack.pointer(plan.uid, plan.role)?;
        let element = plan.dtype;
        let dims = plan.dims.to_vec();
        let strides = plan.strides.to_vec();
        let (elements, ragged) = match plan.ragged {
            None => (
                dense_element_space(&plan.dims, &plan.strides, plan.uid)?,
                None,
            ),
            Some(r) => {
                let aux_plan = IndexInput {
                    uid: r.uid,
                    role: OFFSETS_ROLE,
                    width: r.width,
                };
                let count = plan
                    .batch()
                    .checked_add(1)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| {
                        internal(&format!(
                            "{} tensor uid {}: batch B + 1 = {} + 1 is out of range",
                            plan.role,
                            plan.uid,
                            plan.batch()
                        ))
                    })?;
                let aux: Arc<dyn Tensor> = owned_index_copy(aux_plan, count, pack)?;
                let layout = RaggedLayout::new(
                    dims,
                    strides,
                    plan.axes().seq,
                    Arc::clone(&aux),
                    r.multiplier,
                )
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

    /// A shared view; `ptr` is valid for `bytes` host bytes nobody writes during the call (the
    /// pack's contract, with outputs checked not to overlap inputs).
    fn view(&self) -> Result<Box<dyn Tensor + '_>, PluginError> {
        // SAFETY: the pack's contract: `bytes` readable host bytes, unwritten during the call.
        unsafe {
            self.raw_view::<HostData<'_>, _>(
                self.ptr.as_ptr().cast_const(),
                |t| Box::new(t),
                |t| Box::new(t),
            )
        }
    }

    /// An exclusive view; called only for outputs, after `check_outputs_do_not_overlap`.
    fn view_mut(&self) -> Result<Box<dyn TensorMut + '_>, PluginError> {
        // SAFETY: the pack's contract: `bytes` writable host bytes; outputs overlap no other
        // operand (checked before any view exists), so nothing else touches them.
        unsafe {
            self.raw_view::<HostDataMut<'_>, _>(self.ptr.as_ptr(), |t| Box::new(t), |t| Box::new(t))
        }
    }

    /// The operand's dense or ragged view over `ptr`, boxed by `dense` or `ragged`.
    ///
    /// # Safety
    ///
    /// `ptr` holds `self.bytes` bytes valid for the view's lifetime, with the access the carrier
    /// `S` claims (unwritten by anyone for a read-only one, untouched by anyone else for a
    /// writable one).
    unsafe fn raw_view<'a, S: BorrowedStorage<'a>, R>(
        &'a self,
        ptr: S::Ptr,
        dense: fn(Dense<S>) -> R,
        ragged: fn(Ragged<S>) -> R,
    ) -> Result<R, PluginError> {
        let (dims, strides) = (self.plan.dims.to_vec(), self.plan.strides.to_vec());
        // SAFETY: forwarded from this function's contract.
        let view: Result<R, KernelError> = unsafe {
            match &self.ragged {
                None => Dense::from_raw(ptr, self.element, self.bytes, dims, strides).map(dense),
                Some((aux, multiplier)) => Ragged::from_raw(
                    ptr,
                    self.element,
                    self.bytes,
                    dims,
                    strides,
                    self.plan.axes().seq,
                    Arc::clone(aux),
                    *multiplier,
                )
                .map(ragged),
            }
        };
        view.map_err(|e| e.for_tensor(self.plan.uid).into())
    }
}

/// Copies an int32/int64 `[n, 1, 1, 1]` tensor (ragged offsets, seq_lens) out of the variant
/// pack. The copy is what lets it travel as `Arc<dyn Tensor>` (no borrowed lifetime) and pins
/// the values for this call.
fn owned_index_copy(
    index: IndexInput,
    n: usize,
    pack: &VariantPack<'_>,
) -> Result<Arc<dyn Tensor>, PluginError> {
    let shallow = index_view(index, n, pack)?;
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

fn index_view<'a>(
    index: IndexInput,
    n: usize,
    pack: &VariantPack<'a>,
) -> Result<ShallowTensor<'a>, PluginError> {
    let ptr = pack.pointer(index.uid, index.role)?;
    let element = index.width.data_type();
    let bytes = index_tensor_bytes(index.uid, index.width, n)?;
    let (dims, strides) = index_shape(n);
    // SAFETY: the pack's contract: `n` elements of `element` at `ptr`, in host memory.
    unsafe { ShallowTensor::from_raw(ptr.as_ptr().cast_const(), element, bytes, dims, strides) }
        .map_err(|e| e.for_tensor(index.uid).into())
}

/// Bytes of an `n`-entry int32/int64 tensor (offsets: B + 1, seq_lens: B). `n` comes from the
/// graph's dims, so the product is checked rather than trusted to fit.
pub fn index_tensor_bytes(uid: i64, width: IndexWidth, n: usize) -> Result<usize, PluginError> {
    width.data_type().size().checked_mul(n).ok_or_else(|| {
        PluginError::InvalidValue(format!(
            "tensor uid {uid}: {n} entries of {width} overflow the address space"
        ))
    })
}

fn index_shape(n: usize) -> (Vec<i64>, Vec<i64>) {
    (vec![n as i64, 1, 1, 1], vec![1, 1, 1, 1])
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
fn name_tensor(error: KernelError, plan: &RaggedSdpaProblem) -> PluginError {
    name_role(error, |role| match role {
        Role::Q => Some(plan.q.uid),
        Role::K => Some(plan.k.uid),
        Role::V => Some(plan.v.uid),
        Role::O => Some(plan.o.uid),
        Role::Lse => plan.stats.as_ref().map(|s| s.uid),
        Role::SeqLenQ => plan.seq_len_q.map(|s| s.uid),
        Role::SeqLenKv => plan.seq_len_kv.map(|s| s.uid),
        _ => None,
    })
}

/// Attaches to a CPU reference error the uid `uid_of` gives for the role it is about, forward
/// or backward; an error about no role, or a role the problem lacks, stays as it is.
fn name_role(error: KernelError, uid_of: impl FnOnce(Role) -> Option<i64>) -> PluginError {
    let role = match &error {
        KernelError::SdpaRank { role, .. }
        | KernelError::SdpaDataType { role, .. }
        | KernelError::SdpaDim { role, .. }
        | KernelError::SdpaSeqAxis { role, .. }
        | KernelError::RowsOutsideBatch { role, .. }
        | KernelError::ExtentMismatch { role, .. }
        | KernelError::RowsBeyondExtent { role, .. }
        | KernelError::SeqLenOutOfRange { role, .. }
        | KernelError::NotScalar { role, .. }
        | KernelError::BackwardSeqAxis { role, .. } => Some(*role),
        _ => None,
    };
    match role.and_then(uid_of) {
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
        let plan = applicability::problem(&graph).expect("the golden graph is accepted");
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
        assert_eq!(index_tensor_bytes(5, IndexWidth::I32, 3).ok(), Some(12));
        assert_eq!(index_tensor_bytes(5, IndexWidth::I64, 3).ok(), Some(24));
        let error = index_tensor_bytes(6, IndexWidth::I64, usize::MAX / 4)
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
