//! The host engine's SDPA backward: binds the variant pack of one call to the CPU reference
//! `ragged_reference::sdpa_backward` (issue 15 item 3).
//!
//! The order is the forward's, for the same soundness reasons ([`super`]): offsets and seq_lens
//! are copied first (they fix every extent), then dQ, dK and dV are checked to overlap none of
//! Q, K, V, O, dO, the LSE, any offsets, seq_len or scale, nor each other; only then do views
//! exist. The reference validates everything before it writes, so a failing execute writes no
//! gradient byte. Next to a GPU runtime device tensors are staged through host copies exactly
//! like the forward's ([`super::staging`]), gradients downloaded too so that padding rows keep
//! their device contents.

use std::sync::Arc;

use ragged_core::problem::{OFFSETS_ROLE, Operand, ScalePlan};
use ragged_core::{KernelError, Tensor, TensorMut};
use ragged_reference::{BackwardInputs, BackwardOutputs, SdpaBackwardParams, sdpa_backward};

use super::staging::{self, Access, DeviceMemory, Staging};
use super::{Bound, index_tensor_bytes, internal, name_role, owned_index_copy};
use ragged_core::problem::BackwardProblem;
use crate::engines::{HOST_REFERENCE, Planned};
use crate::error::PluginError;
use crate::overlap::{self, Span};
use crate::scale;
use crate::variant_pack::{self, VariantPack};

/// The host engine's backward plan: the problem is all it needs.
#[derive(Debug)]
pub struct HostBackwardPlan {
    pub problem: Arc<BackwardProblem>,
}

impl Planned for HostBackwardPlan {
    /// The reference keeps its f32 blocks on the host heap, so it asks the caller for no device
    /// scratch.
    fn workspace_size(&self) -> usize {
        0
    }

    fn execute_backward(&self, pack: &VariantPack<'_>) -> Result<(), PluginError> {
        match staging::access() {
            Access::InPlace => run(&self.problem, pack),
            Access::Copies(memory) => run_staged(&self.problem, memory, pack),
            Access::Unreachable(reason) => Err(PluginError::NotApplicable {
                engine: HOST_REFERENCE.name_str(),
                reason: reason.clone(),
            }),
        }
    }
}

/// Runs the CPU reference backward over `pack`, whose pointers must all be host memory.
pub fn run(p: &BackwardProblem, pack: &VariantPack<'_>) -> Result<(), PluginError> {
    let batch = batch(p)?;
    let [q, k, v, o, d_o, lse] = p.inputs().map(|t| Bound::new(t, pack));
    let (q, k, v, o, d_o, lse) = (q?, k?, v?, o?, d_o?, lse?);
    let [dq, dk, dv] = p.outputs().map(|t| Bound::new(t, pack));
    let (dq, dk, dv) = (dq?, dk?, dv?);
    let index = |uid| owned_index_copy(uid, batch, pack);
    let seq_len_q = p.forward.seq_len_q.map(index).transpose()?;
    let seq_len_kv = p.forward.seq_len_kv.map(index).transpose()?;
    // SAFETY: the pack's contract: a runtime or staged scale is a host pointer to one element.
    let scale = unsafe { scale::for_host_engine(p.forward.scale, pack) }?;

    let reads: Vec<Span> = [&q, &k, &v, &o, &d_o, &lse]
        .iter()
        .map(|b| b.span())
        .chain(variant_pack::read_index_spans(pack, &p.forward))
        .chain(variant_pack::read_index_spans(pack, &p.gradient_carrier()))
        .collect();
    let writes: Vec<Span> = [&dq, &dk, &dv].iter().map(|b| b.span()).collect();
    overlap::check(&writes, &reads)?;

    // The gradients overlap nothing (checked above), so exclusive views are sound.
    let (qv, kv, vv, ov, dov, lv) = (
        q.view()?,
        k.view()?,
        v.view()?,
        o.view()?,
        d_o.view()?,
        lse.view()?,
    );
    let (mut dqv, mut dkv, mut dvv) = (dq.view_mut()?, dk.view_mut()?, dv.view_mut()?);
    let inputs = BackwardInputs {
        q: &*qv,
        k: &*kv,
        v: &*vv,
        o: &*ov,
        d_o: &*dov,
        lse: &*lv,
        seq_len_q: seq_len_q.as_deref().map(|t| t as &dyn Tensor),
        seq_len_kv: seq_len_kv.as_deref().map(|t| t as &dyn Tensor),
    };
    let outputs = BackwardOutputs {
        dq: &mut *dqv as &mut dyn TensorMut,
        dk: &mut *dkv as &mut dyn TensorMut,
        dv: &mut *dvv as &mut dyn TensorMut,
    };
    // Features the reference does not compute were declined when the plan was made.
    let params = SdpaBackwardParams {
        scale,
        band: p.forward.mask,
        ..SdpaBackwardParams::default()
    };
    crate::worker_pool::install(|| sdpa_backward(&inputs, outputs, &params))?
        .map_err(|error| name_tensor(error, p))
}

/// The backward with a GPU runtime usable: offsets, seq_lens and a device scale first, then each
/// tensor over its extent; the reference runs on host copies and dQ, dK, dV go back.
fn run_staged(
    p: &BackwardProblem,
    memory: &DeviceMemory,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    let batch = batch(p)?;
    let mut staging = Staging::new(memory, pack);
    let tensors: Vec<&Operand> = p.inputs().into_iter().chain(p.outputs()).collect();
    for t in &tensors {
        if let Some(r) = t.ragged {
            let bytes = index_tensor_bytes(r.uid, r.width, batch.saturating_add(1))?;
            staging.stage(r.uid, OFFSETS_ROLE, bytes)?;
        }
    }
    for s in p.forward.seq_lens() {
        let bytes = index_tensor_bytes(s.uid, s.width, batch)?;
        staging.stage(s.uid, s.role, bytes)?;
    }
    // A pass-by-value scale is a host pointer by contract (plugin-abi.md §5.7): never staged.
    if let ScalePlan::DeviceTensor { uid, data_type } = p.forward.scale {
        staging.stage(uid, "scale_tensor_uid", data_type.size())?;
    }
    let mut extents = Vec::with_capacity(tensors.len());
    {
        let host = staging.pack()?;
        for t in &tensors {
            extents.push((t.uid, t.role, Bound::new(t, &host)?.bytes));
        }
    }
    let mut outputs = Vec::new();
    for (uid, role, bytes) in extents {
        staging.stage(uid, role, bytes)?;
        if p.outputs().iter().any(|t| t.uid == uid) {
            outputs.push((uid, bytes));
        }
    }
    run(p, &staging.pack()?)?;
    staging.upload(&outputs)
}

fn batch(p: &BackwardProblem) -> Result<usize, PluginError> {
    usize::try_from(p.forward.batch()).map_err(|_| {
        internal(&format!(
            "q_tensor_uid tensor uid {}: batch B = {} is negative",
            p.forward.q.uid,
            p.forward.batch()
        ))
    })
}

/// Backward errors name a role; the backend needs the uid.
fn name_tensor(error: KernelError, p: &BackwardProblem) -> PluginError {
    name_role(error, |role| p.uid_of(role))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_core::Role;

    #[test]
    fn backward_errors_about_a_gradient_name_its_uid() {
        let graph = crate::backward_problem::tests::graph();
        let problem =
            crate::backward_problem::build(&graph, crate::backward_problem::tests::node(&graph))
                .expect("the test graph is accepted");
        let error = name_tensor(
            KernelError::RowsBeyondExtent {
                role: Role::DK,
                batch: 1,
                extent: 2,
                rows: 3,
                source_role: Role::K,
            },
            &problem,
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("tensor uid {}:", problem.dk.uid)),
            "{error}"
        );
    }
}
