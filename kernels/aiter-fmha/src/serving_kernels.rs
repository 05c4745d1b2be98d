//! The paged and sink kernels (`hip/ragged_aiter_paged_{starts,gather}.cu`,
//! `hip/ragged_aiter_sink_finish.cu`), their launch arguments, and the device addresses the
//! forward runs on for a [`ServingPlan`]. Pure: addresses are numbers here, and a test holds every
//! argument list against its kernel's parameters.

use super::device_kernels::{KernelArg, Launch, LaunchConfig, linear_blocks, lse_output_args};
use super::mapping::{DeviceBuffers, region_address};
use super::problem::AiterProblem;
use super::serving::ServingPlan;
use super::workspace::{WorkspacePlan, aligned_base};
use ragged_core::DataType;

/// Source of the starts kernel.
pub const STARTS_SOURCE: &str = include_str!("../hip/ragged_aiter_paged_starts.cu");
/// Source of the gather kernel.
pub const GATHER_SOURCE: &str = include_str!("../hip/ragged_aiter_paged_gather.cu");
/// Source of the finish kernel.
pub const FINISH_SOURCE: &str = include_str!("../hip/ragged_aiter_sink_finish.cu");
/// Entry point of [`STARTS_SOURCE`].
pub const STARTS_KERNEL: &str = "ragged_aiter_paged_starts";
/// Entry point of [`GATHER_SOURCE`].
pub const GATHER_KERNEL: &str = "ragged_aiter_paged_gather";
/// Entry point of [`FINISH_SOURCE`].
pub const FINISH_KERNEL: &str = "ragged_aiter_sink_finish";
/// `RAGGED_PAGED_STARTS_THREADS`: the starts kernel runs as exactly one block of this many.
pub const STARTS_THREADS: u32 = 256;
/// Threads per gather block.
pub const GATHER_THREADS: u32 = 256;
/// Threads per finish block.
pub const FINISH_THREADS: u32 = 256;
/// Cap on finish blocks; the kernel loops over the rest (grid-stride).
pub const FINISH_MAX_BLOCKS: u32 = 65_535;

/// The caller's paged and sink tensors (0 where the graph has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServingBuffers {
    /// `page_table_k_tensor_uid`.
    pub table_k: usize,
    /// `page_table_v_tensor_uid`.
    pub table_v: usize,
    /// `sink_token_tensor_uid`.
    pub sinks: usize,
}

/// The buffers the forward (pre-pass, `aiter::mha_fwd`, fix-up) runs on. `buffers` are the
/// caller's (for a paged graph K and V are the pools and there are no ragged offsets); the
/// workspace is the caller's, which the route's regions come first in.
pub fn forward_buffers(
    problem: &AiterProblem,
    serving: &ServingPlan,
    buffers: &DeviceBuffers,
) -> DeviceBuffers {
    let base = aligned_base(buffers.workspace);
    let at = |r| region_address(base, r);
    let mut fwd = DeviceBuffers {
        workspace: base + serving.forward_at,
        ..*buffers
    };
    if let Some(route) = &serving.paged {
        fwd.k = at(route.k);
        fwd.v = at(route.v);
        fwd.q_offsets = at(route.q_start);
        fwd.k_offsets = at(route.kv_start);
        // Packed sequences' extents are their lengths: AITER gets no seq_len_q (and the pre-pass
        // reads none); padded ones keep the graph's, clamped into the slices by the pre-pass.
        if problem.seq_len_q.is_none() {
            fwd.seq_len_q = 0;
        }
        fwd.seq_len_kv = 0;
        // A packed LSE is addressed through the Q starts, as Q is.
        fwd.lse_offsets = if matches!(problem.lse, super::problem::LseLayout::Ragged { .. }) {
            at(route.q_start)
        } else {
            0
        };
    }
    if let Some(r) = serving.lse {
        fwd.lse = at(r);
        if serving.paged.is_none() {
            fwd.lse_offsets = 0;
        }
    }
    fwd
}

/// The starts kernel's launch (paged graphs).
pub fn starts_launch(
    problem: &AiterProblem,
    serving: &ServingPlan,
    buffers: &DeviceBuffers,
) -> Option<Launch> {
    use KernelArg::{I32, I64};
    let route = serving.paged.as_ref()?;
    let ptr = KernelArg::ptr;
    let at = |r| region_address(aligned_base(buffers.workspace), r);
    Some(Launch {
        kernel: STARTS_KERNEL,
        config: LaunchConfig::linear(1, STARTS_THREADS),
        args: vec![
            ("seq_len_q", ptr(buffers.seq_len_q)),
            ("seq_len_q_width", I32(route.seq_len_q.width.bytes())),
            ("seq_len_kv", ptr(buffers.seq_len_kv)),
            ("seq_len_kv_width", I32(route.seq_len_kv.width.bytes())),
            ("batch", I32(i32::try_from(problem.batch).unwrap_or(0))),
            ("q_rows", I64(route.q_rows)),
            ("packed", I32(i32::from(route.packed))),
            ("max_kv", I64(route.max_kv)),
            ("q_start", ptr(at(route.q_start))),
            ("kv_start", ptr(at(route.kv_start))),
            ("invalid", ptr(at(route.invalid))),
        ],
    })
}

/// The gather kernel's launch (paged graphs): grid (ceil(max_kv / 64), B).
pub fn gather_launch(
    problem: &AiterProblem,
    serving: &ServingPlan,
    buffers: &DeviceBuffers,
    tables: &ServingBuffers,
) -> Option<Launch> {
    use KernelArg::{I32, I64};
    let route = serving.paged.as_ref()?;
    let ptr = KernelArg::ptr;
    let at = |r| region_address(aligned_base(buffers.workspace), r);
    let int = |v: i64| I32(i32::try_from(v).unwrap_or(0));
    let (kp, vp, tk, tv) = (route.k_pool, route.v_pool, route.table_k, route.table_v);
    Some(Launch {
        kernel: GATHER_KERNEL,
        config: LaunchConfig {
            grid: (
                route.key_blocks,
                u32::try_from(problem.batch).unwrap_or(0),
                1,
            ),
            block: (GATHER_THREADS, 1, 1),
            shared_mem_bytes: 0,
        },
        args: vec![
            ("k_pool", ptr(buffers.k)),
            ("v_pool", ptr(buffers.v)),
            ("table_k", ptr(tables.table_k)),
            ("table_v", ptr(tables.table_v)),
            ("kv_start", ptr(at(route.kv_start))),
            ("invalid", ptr(at(route.invalid))),
            ("k_out", ptr(at(route.k))),
            ("v_out", ptr(at(route.v))),
            ("k_page", I64(kp.page)),
            ("k_head", I64(kp.head)),
            ("k_slot", I64(kp.slot)),
            ("k_dim", I64(kp.dim)),
            ("v_page", I64(vp.page)),
            ("v_head", I64(vp.head)),
            ("v_slot", I64(vp.slot)),
            ("v_dim", I64(vp.dim)),
            ("tk_row", I64(tk.row)),
            ("tk_col", I64(tk.column)),
            ("tv_row", I64(tv.row)),
            ("tv_col", I64(tv.column)),
            ("pages_k", I32(kp.pages)),
            ("pages_v", I32(vp.pages)),
            ("page_size_k", I32(kp.page_size)),
            ("page_size_v", I32(vp.page_size)),
            ("heads_kv", int(route.heads_kv)),
            ("d_k", int(route.d_qk)),
            ("d_v", int(route.d_v)),
        ],
    })
}

/// The finish kernel's launch, after the fix-up: `problem` and `plan` are the forward's, `fwd`
/// the buffers it ran on ([`forward_buffers`]).
pub fn finish_launch(
    problem: &AiterProblem,
    plan: &WorkspacePlan,
    serving: &ServingPlan,
    fwd: &DeviceBuffers,
    caller_workspace: usize,
    tables: &ServingBuffers,
) -> Launch {
    use KernelArg::{I32, I64};
    let ptr = KernelArg::ptr;
    let at = |r| region_address(fwd.workspace, r);
    let route_at = |r| region_address(aligned_base(caller_workspace), r);
    let to_i32 = |v: i64| I32(i32::try_from(v).unwrap_or(0));
    let rows = problem
        .batch
        .saturating_mul(problem.s_q_max)
        .saturating_mul(problem.q.heads);
    Launch {
        kernel: FINISH_KERNEL,
        config: LaunchConfig::linear(
            linear_blocks(rows, FINISH_THREADS, FINISH_MAX_BLOCKS),
            FINISH_THREADS,
        ),
        args: vec![
            ("seqstart_q", ptr(at(plan.seqstart_q))),
            ("len_q", ptr(at(plan.len_q))),
            (
                "invalid",
                ptr(serving.paged.map_or(0, |r| route_at(r.invalid))),
            ),
            ("batch", to_i32(problem.batch)),
            ("s_q_max", to_i32(problem.s_q_max)),
            ("heads_q", to_i32(problem.q.heads)),
            (
                "sinks",
                ptr(if serving.sinks.is_some() {
                    tables.sinks
                } else {
                    0
                }),
            ),
            ("sink_stride", I64(serving.sinks.map_or(0, |s| s.stride))),
            ("o_ptr", ptr(fwd.o)),
            ("o_bf16", I32(i32::from(problem.o_dtype == DataType::BF16))),
            ("o_seq_stride", I64(problem.o.seq_stride)),
            ("o_head_stride", I64(problem.o.head_stride)),
            ("d_v", to_i32(problem.o.head_dim)),
        ]
        .into_iter()
        .chain(lse_output_args("lse", &problem.lse, fwd))
        .collect(),
    }
}
