//! Whole-call validation of the backward: the forward's own validation of Q, K, V, O and the LSE
//! (`crate::sdpa::problem`), plus the gradients' agreement with their primals; everything is
//! checked before a single output element is computed or written.

use crate::sdpa::layout::AttnLayout;
use crate::sdpa::problem::{self as forward, Operands, expect_equal, expect_extents, expect_rows};
use ragged_core::dtype::DataType;
use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::Tensor;

use super::{BackwardInputs, BackwardOutputs};

/// A validated backward problem: the forward's, with the LSE present, and the gradient layouts.
#[derive(Debug)]
pub(super) struct Problem {
    pub fwd: forward::Problem,
    pub lse: AttnLayout,
    pub d_o: AttnLayout,
    pub dq: AttnLayout,
    pub dk: AttnLayout,
    pub dv: AttnLayout,
}

/// `tensor` in `role` has the element type, heads, head dim and (ragged) batch split of its
/// primal `leader`, and room for the primal's logical rows.
fn like(
    role: Role,
    tensor: &dyn Tensor,
    leader: Role,
    lead: &AttnLayout,
    lens: &[usize],
    dtype: DataType,
) -> Result<AttnLayout, KernelError> {
    if tensor.data_type() != dtype {
        return Err(KernelError::SdpaDataType {
            role,
            dtype: tensor.data_type(),
            expected: format!("{dtype} (as Q)"),
        });
    }
    let g = AttnLayout::resolve(role, tensor)?;
    expect_equal(role, "batch", g.batch, leader, lead.batch)?;
    expect_equal(role, "heads", g.heads, leader, lead.heads)?;
    expect_equal(role, "head_dim", g.head_dim, leader, lead.head_dim)?;
    expect_extents(role, &g, leader, lead)?;
    expect_rows(role, &g, leader, lens)?;
    Ok(g)
}

pub(super) fn validate(
    inputs: &BackwardInputs<'_>,
    outputs: &BackwardOutputs<'_>,
) -> Result<Problem, KernelError> {
    let fwd = forward::validate(&Operands {
        q: inputs.q,
        k: inputs.k,
        v: inputs.v,
        o: inputs.o,
        lse: Some(inputs.lse),
        seq_len_q: inputs.seq_len_q,
        seq_len_kv: inputs.seq_len_kv,
        paged: None,
        sinks: None,
    })?;
    // Checked by the forward's validation; resolved again so it is not optional here.
    let lse = AttnLayout::resolve(Role::Lse, inputs.lse)?;
    let dtype = fwd.dtype;
    // dO has O's shape; dQ, dK, dV their primals'.
    let d_o = like(Role::DO, inputs.d_o, Role::O, &fwd.o, &fwd.len_q, dtype)?;
    let dq = like(Role::DQ, &*outputs.dq, Role::Q, &fwd.q, &fwd.len_q, dtype)?;
    let dk = like(Role::DK, &*outputs.dk, Role::K, &fwd.k, &fwd.len_kv, dtype)?;
    let dv = like(Role::DV, &*outputs.dv, Role::V, &fwd.v, &fwd.len_kv, dtype)?;
    Ok(Problem {
        fwd,
        lse,
        d_o,
        dq,
        dk,
        dv,
    })
}
