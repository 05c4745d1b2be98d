//! Backward problem → `ragged_aiter_bwd_args`, and the launches of the backward's two kernels
//! (`kernels/aiter-fmha/hip/ragged_aiter_bwd_{lse,fixup}.cu`).
//!
//! AITER's conventions, as for the forward ([`super::mapping`]): group mode, token-unit starts
//! from the forward's pre-pass, strides in elements, the `(H_q, B·S_q_max)` layout for the LSE
//! (and for D, which AITER writes itself), logical lengths as cumulative arrays. Pure: pointer
//! values are just numbers here.

use std::ffi::c_void;

use super::backward::{AiterBackwardPlan, AiterBackwardProblem};
use super::device_kernels::{KernelArg, Launch, LaunchConfig, linear_blocks, stats_layout};
use super::mapping::{DeviceBuffers, aiter_mask, clamp_i32, region_address, shim_data_type};
use super::shim_abi_bwd::RaggedAiterBwdArgs;
use super::workspace::{Region, WorkspacePlan};

/// Source of the LSE pre-pass (hipDNN stats → AITER's LSE layout, −∞ rows as +∞).
pub const BWD_LSE_SOURCE: &str = include_str!("../hip/ragged_aiter_bwd_lse.cu");
/// Source of the zero-length-batch fix-up.
pub const BWD_FIXUP_SOURCE: &str = include_str!("../hip/ragged_aiter_bwd_fixup.cu");
/// Entry point of the LSE pre-pass.
pub const BWD_LSE_KERNEL: &str = "ragged_aiter_bwd_lse";
/// Entry point of the fix-up.
pub const BWD_FIXUP_KERNEL: &str = "ragged_aiter_bwd_fixup";
/// Threads per block of both; the grids are grid-stride loops capped at this many blocks.
pub const BWD_THREADS: u32 = 256;
/// Grid cap of both kernels.
pub const BWD_MAX_BLOCKS: u32 = 65_535;

/// Device addresses of one backward execution. `forward` holds Q, K, V, O, their offsets, the
/// seq_lens, the stats tensor (`lse`, an input here) and the workspace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardBuffers {
    /// The forward's buffers.
    pub forward: DeviceBuffers,
    /// dO.
    pub d_o: usize,
    /// dQ.
    pub dq: usize,
    /// dK.
    pub dk: usize,
    /// dV.
    pub dv: usize,
}

fn blocks_for(items: i64) -> u32 {
    linear_blocks(items, BWD_THREADS, BWD_MAX_BLOCKS)
}

/// Builds the shim's backward arguments. `aligned_workspace` is the workspace base after
/// [`aligned_base`](super::workspace::aligned_base); `stream` is the `hipStream_t`.
pub fn shim_bwd_args(
    problem: &AiterBackwardProblem,
    plan: &AiterBackwardPlan,
    buffers: &BackwardBuffers,
    aligned_workspace: usize,
    stream: usize,
) -> RaggedAiterBwdArgs {
    let f = &problem.forward;
    let ws: &WorkspacePlan = &plan.workspace.forward;
    let at = |r: Region| region_address(aligned_workspace, r);
    let int_ptr = |r: Option<Region>| r.map_or(std::ptr::null(), |r| at(r) as *const i32);
    let (mask_type, window_size_left, window_size_right) = aiter_mask(f);
    let b = &buffers.forward;
    RaggedAiterBwdArgs {
        struct_size: u32::try_from(std::mem::size_of::<RaggedAiterBwdArgs>()).unwrap_or(0),
        data_type: shim_data_type(f.dtype),
        q_ptr: b.q as *const c_void,
        k_ptr: b.k as *const c_void,
        v_ptr: b.v as *const c_void,
        o_ptr: b.o as *const c_void,
        do_ptr: buffers.d_o as *const c_void,
        lse_ptr: ws
            .lse_scratch
            .map_or(std::ptr::null(), |r| at(r) as *const c_void),
        d_ptr: at(plan.workspace.d_scratch) as *mut c_void,
        dq_ptr: buffers.dq as *mut c_void,
        dk_ptr: buffers.dk as *mut c_void,
        dv_ptr: buffers.dv as *mut c_void,
        seqstart_q_ptr: at(ws.seqstart_q) as *const i32,
        seqstart_k_ptr: at(ws.seqstart_k) as *const i32,
        cu_seqlen_q_ptr: int_ptr(ws.cu_seqlen_q),
        cu_seqlen_k_ptr: int_ptr(ws.cu_seqlen_k),
        stream: stream as *mut c_void,
        batch: clamp_i32(f.batch),
        max_seqlen_q: clamp_i32(f.s_q_max),
        max_seqlen_k: clamp_i32(f.s_kv_max),
        seqlen_q: clamp_i32(f.batch.saturating_mul(f.s_q_max)),
        seqlen_k: clamp_i32(f.batch.saturating_mul(f.s_kv_max)),
        hdim_q: clamp_i32(f.q.head_dim),
        hdim_v: clamp_i32(f.v.head_dim),
        nhead_q: clamp_i32(f.q.heads),
        nhead_k: clamp_i32(f.k.heads),
        stride_q: clamp_i32(f.q.seq_stride),
        stride_k: clamp_i32(f.k.seq_stride),
        stride_v: clamp_i32(f.v.seq_stride),
        stride_o: clamp_i32(f.o.seq_stride),
        stride_do: clamp_i32(problem.d_o.seq_stride),
        stride_dq: clamp_i32(problem.dq.seq_stride),
        stride_dk: clamp_i32(problem.dk.seq_stride),
        stride_dv: clamp_i32(problem.dv.seq_stride),
        nhead_stride_q: clamp_i32(f.q.head_stride),
        nhead_stride_k: clamp_i32(f.k.head_stride),
        nhead_stride_v: clamp_i32(f.v.head_stride),
        nhead_stride_o: clamp_i32(f.o.head_stride),
        nhead_stride_do: clamp_i32(problem.d_o.head_stride),
        nhead_stride_dq: clamp_i32(problem.dq.head_stride),
        nhead_stride_dk: clamp_i32(problem.dk.head_stride),
        nhead_stride_dv: clamp_i32(problem.dv.head_stride),
        nhead_stride_lsed: clamp_i32(WorkspacePlan::scratch_head_stride(f)),
        mask_type,
        window_size_left,
        window_size_right,
        scale: f.scale,
        // A CK plan (`plan.ck_tile`): deterministic, which AITER's asm backward never is (it
        // returns "no kernel" when asked to be), so asm is off and its flags unused.
        use_asm_v3: 0,
        v3_atomic_fp32: 0,
        v3_bf16_cvt: 0,
        is_deterministic: 1,
        aiter_workspace_ptr: at(plan.workspace.aiter_scratch) as *mut c_void,
        aiter_workspace_bytes: u64::try_from(plan.workspace.aiter_scratch.bytes)
            .unwrap_or(u64::MAX),
    }
}

/// LSE pre-pass launch: after the forward's pre-pass (token starts, lengths), before AITER.
pub fn lse_launch(
    problem: &AiterBackwardProblem,
    plan: &AiterBackwardPlan,
    buffers: &BackwardBuffers,
    aligned_workspace: usize,
) -> Launch {
    use KernelArg::{I32, I64};
    let ptr = KernelArg::ptr;
    let f = &problem.forward;
    let ws = &plan.workspace.forward;
    let at = |r| region_address(aligned_workspace, r);
    let (layout, strides, aux) = stats_layout(&f.lse);
    let rows = f.batch.saturating_mul(f.s_q_max).saturating_mul(f.q.heads);
    Launch {
        kernel: BWD_LSE_KERNEL,
        config: LaunchConfig::linear(blocks_for(rows), BWD_THREADS),
        args: vec![
            ("seqstart_q", ptr(at(ws.seqstart_q))),
            ("len_q", ptr(at(ws.len_q))),
            ("batch", I32(clamp_i32(f.batch))),
            ("s_q_max", I32(clamp_i32(f.s_q_max))),
            ("heads_q", I32(clamp_i32(f.q.heads))),
            ("stats", ptr(buffers.forward.lse)),
            ("stats_layout", I32(layout)),
            ("stride_b", I64(strides[0])),
            ("stride_h", I64(strides[1])),
            ("stride_s", I64(strides[2])),
            (
                "stats_offsets",
                ptr(if aux.is_some() {
                    buffers.forward.lse_offsets
                } else {
                    0
                }),
            ),
            (
                "stats_offset_width",
                I32(aux.map_or(0, |(a, _, _)| a.width.bytes())),
            ),
            (
                "stats_multiplier",
                I64(aux.map_or(0, |(a, _, _)| a.multiplier)),
            ),
            ("stats_seq_stride", I64(aux.map_or(0, |(_, s, _)| s))),
            ("stats_head_stride", I64(aux.map_or(0, |(_, _, h)| h))),
            ("scratch", ptr(ws.lse_scratch.map_or(0, at))),
            (
                "scratch_head_stride",
                I64(WorkspacePlan::scratch_head_stride(f)),
            ),
        ],
    }
}

/// Fix-up launch: after AITER, zeroes dQ of batches without keys and dK/dV of batches without
/// queries.
pub fn bwd_fixup_launch(
    problem: &AiterBackwardProblem,
    plan: &AiterBackwardPlan,
    buffers: &BackwardBuffers,
    aligned_workspace: usize,
) -> Launch {
    use KernelArg::{I32, I64};
    let ptr = KernelArg::ptr;
    let f = &problem.forward;
    let ws = &plan.workspace.forward;
    let at = |r| region_address(aligned_workspace, r);
    let items = f
        .batch
        .saturating_mul(f.s_q_max)
        .saturating_mul(f.q.heads)
        .saturating_add(f.batch.saturating_mul(f.s_kv_max).saturating_mul(f.k.heads));
    Launch {
        kernel: BWD_FIXUP_KERNEL,
        config: LaunchConfig::linear(blocks_for(items), BWD_THREADS),
        args: vec![
            ("seqstart_q", ptr(at(ws.seqstart_q))),
            ("seqstart_k", ptr(at(ws.seqstart_k))),
            ("len_q", ptr(at(ws.len_q))),
            ("len_kv", ptr(at(ws.len_kv))),
            ("batch", I32(clamp_i32(f.batch))),
            ("s_q_max", I32(clamp_i32(f.s_q_max))),
            ("s_kv_max", I32(clamp_i32(f.s_kv_max))),
            ("heads_q", I32(clamp_i32(f.q.heads))),
            ("heads_kv", I32(clamp_i32(f.k.heads))),
            ("d_qk", I32(clamp_i32(f.q.head_dim))),
            ("d_v", I32(clamp_i32(f.v.head_dim))),
            ("dq", ptr(buffers.dq)),
            ("dq_seq_stride", I64(problem.dq.seq_stride)),
            ("dq_head_stride", I64(problem.dq.head_stride)),
            ("dk", ptr(buffers.dk)),
            ("dk_seq_stride", I64(problem.dk.seq_stride)),
            ("dk_head_stride", I64(problem.dk.head_stride)),
            ("dv", ptr(buffers.dv)),
            ("dv_seq_stride", I64(problem.dv.seq_stride)),
            ("dv_head_stride", I64(problem.dv.head_stride)),
        ],
    }
}

#[cfg(test)]
#[path = "backward_mapping_tests.rs"]
mod tests;
