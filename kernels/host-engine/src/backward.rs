//! The host engine's SDPA backward: the call's host slices as tensors, then the CPU reference
//! backward.
//!
//! The binder has checked that dQ, dK and dV overlap none of Q, K, V, O, dO, the LSE, any offsets,
//! seq_len or scale, nor each other; the reference validates everything before it writes, so a
//! failing execute writes no gradient byte.

use std::sync::Arc;

use ragged_core::binding::Call;
use ragged_core::engine::{Planned, Reach};
use ragged_core::problem::BackwardProblem;
use ragged_core::{KernelError, TensorMut};
use ragged_reference::{BackwardInputs, BackwardOutputs, SdpaBackwardParams, sdpa_backward};

use crate::pool;
use crate::views;

/// The host engine's backward plan: the problem is all it needs.
#[derive(Debug)]
pub struct HostBackward {
    pub problem: Arc<BackwardProblem>,
}

impl Planned for HostBackward {
    fn reach(&self) -> Reach {
        Reach::Host
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let p = &*self.problem;
        let f = &p.forward;
        let scale = call.scale(f.scale)?;
        let [q, k, v, o, d_o, lse] = p.inputs();
        let (q, k, v, o, d_o, lse) = (
            views::input(call, q)?,
            views::input(call, k)?,
            views::input(call, v)?,
            views::input(call, o)?,
            views::input(call, d_o)?,
            views::input(call, lse)?,
        );
        let [dq, dk, dv] = p.outputs();
        let (mut dq, mut dk, mut dv) = (
            views::output(call, dq)?,
            views::output(call, dk)?,
            views::output(call, dv)?,
        );
        let seq_len_q = f.seq_len_q.map(|s| views::index(call, s)).transpose()?;
        let seq_len_kv = f.seq_len_kv.map(|s| views::index(call, s)).transpose()?;
        let inputs = BackwardInputs {
            q: q.tensor(),
            k: k.tensor(),
            v: v.tensor(),
            o: o.tensor(),
            d_o: d_o.tensor(),
            lse: lse.tensor(),
            seq_len_q: seq_len_q.as_deref(),
            seq_len_kv: seq_len_kv.as_deref(),
        };
        let outputs = BackwardOutputs {
            dq: dq.tensor_mut() as &mut dyn TensorMut,
            dk: dk.tensor_mut(),
            dv: dv.tensor_mut(),
        };
        // Features the reference does not compute were declined when the plan was made.
        let params = SdpaBackwardParams {
            scale,
            band: f.mask,
            ..SdpaBackwardParams::default()
        };
        pool::install(|| sdpa_backward(&inputs, outputs, &params))?
            .map_err(|error| views::name_role(error, |role| p.uid_of(role)))
    }
}
