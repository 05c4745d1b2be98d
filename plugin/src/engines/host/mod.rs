//! The `RAGGED_SDPA_HOST_REFERENCE` engine: wraps each variant-pack pointer for this one call
//! (RFC §4.10) and runs the kernels crate's CPU reference.
//!
//! Order matters for soundness: offsets and seq_lens are read (and copied) first, which fixes
//! every tensor's byte extent; the extents are checked for overlap with the outputs; only then
//! are shared and exclusive views created. Writing happens inside `sdpa_forward`, after it has
//! validated everything, so a failing execute writes no output byte.

pub mod backward;
mod bound;
pub mod device_memory;
pub mod graph;
pub mod staging;

use std::ffi::OsStr;
use std::sync::Arc;

use parking_lot::Mutex;
use ragged_core::problem::{IndexInput, RaggedSdpaProblem};
use ragged_core::{KernelError, Role};
use ragged_reference::{SdpaParams, sdpa_forward};

use super::{HOST_REFERENCE, Listing, Planned, Planner};
use crate::error::PluginError;
use crate::overlap;
use crate::scale;
use crate::variant_pack::{self, VariantPack};
pub use bound::index_tensor_bytes;
use bound::{Bound, Scratch, View, index_copy, owned_index_copy};
use ragged_core::Decline;

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
            ragged_gpu_runtime::probe::gpu_runtime_present(),
            std::env::var_os(HOST_ENGINE_ENV).as_deref(),
        )
    }

    fn plan(&self, _problem: &RaggedSdpaProblem) -> Result<Box<dyn Planned>, Decline> {
        staging::check_reachable()?;
        Ok(Box::<HostPlan>::default())
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
        problem: &Arc<ragged_core::problem::BackwardProblem>,
    ) -> Result<Box<dyn Planned>, Decline> {
        staging::check_reachable()?;
        Ok(Box::new(backward::HostBackwardPlan {
            problem: Arc::clone(problem),
        }))
    }
}

/// The host engine keeps nothing per graph beyond the problem itself, and between calls the
/// buffers its host copies of offsets and seq_lens live in ([`bound::Scratch`]).
#[derive(Debug, Default)]
struct HostPlan {
    scratch: Mutex<Scratch>,
}

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
            staging::Access::InPlace => match self.scratch.try_lock() {
                Some(mut scratch) => forward(problem, pack, Some(&mut scratch)),
                // Another thread is executing this context right now: this call copies into
                // buffers of its own rather than wait.
                None => run(problem, pack),
            },
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
    forward(problem, pack, None)
}

/// [`run`], with the host copies of offsets and seq_lens made in `scratch` when given.
fn forward(
    problem: &RaggedSdpaProblem,
    pack: &VariantPack<'_>,
    mut scratch: Option<&mut Scratch>,
) -> Result<(), PluginError> {
    let batch = usize::try_from(problem.batch()).map_err(|_| {
        internal(&format!(
            "q_tensor_uid tensor uid {}: batch B = {} is negative",
            problem.q.uid,
            problem.batch()
        ))
    })?;
    if let Some(scratch) = scratch.as_deref_mut() {
        scratch.begin_call();
    }
    let mut bind = |t| Bound::bind(t, pack, scratch.as_deref_mut());
    let (mut q, mut k, mut v, mut o) = (
        bind(&problem.q)?,
        bind(&problem.k)?,
        bind(&problem.v)?,
        bind(&problem.o)?,
    );
    let mut stats = problem.stats.as_ref().map(&mut bind).transpose()?;
    let mut index = |s: &IndexInput| index_copy(*s, batch, pack, scratch.as_deref_mut());
    let seq_len_q = problem.seq_len_q.as_ref().map(&mut index).transpose()?;
    let seq_len_kv = problem.seq_len_kv.as_ref().map(&mut index).transpose()?;
    // SAFETY: the pack's contract: a runtime or staged scale is a host pointer to one element.
    let scale = unsafe { scale::for_host_engine(problem.scale, pack) }?;
    let reads = [q.span(), k.span(), v.span()].into_iter().chain(
        variant_pack::index_spans(pack, problem)
            .into_iter()
            .flatten(),
    );
    let writes = [Some(o.span()), stats.as_ref().map(Bound::span)];
    overlap::check_all(writes.into_iter().flatten(), reads)?;

    // Outputs overlap nothing (checked above), so exclusive views are sound.
    let (qv, kv, vv, mut ov) = (
        q.take_view()?,
        k.take_view()?,
        v.take_view()?,
        o.take_view_mut()?,
    );
    let mut lv = stats.as_mut().map(Bound::take_view_mut).transpose()?;
    let params = SdpaParams {
        scale,
        band: problem.mask,
    };
    let forward = || {
        sdpa_forward(
            qv.tensor(),
            kv.tensor(),
            vv.tensor(),
            ov.tensor_mut(),
            lv.as_mut().map(View::tensor_mut),
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
        ragged_reference::sdpa::on_calling_thread(forward)
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
}
