//! Plan-time checks and launch arguments for the CUDA FMHA engine.
//!
//! Everything that can be decided from the graph alone is decided here, once, without a GPU: the
//! shared GPU contract ([`ragged_core::contract::check_gpu`]) first, then this engine's own limits
//! (HALF or BFLOAT16, (D_qk, D_v) in device_abi::HEAD_DIMS, int32 dims, a grid that fits int32). The execute
//! path only copies numbers into kernel arguments. What needs the offsets' contents (extents,
//! monotonicity) is left to the device pre-pass, because reading offsets on the host would
//! synchronise the stream on every execute.

use super::device_abi::{self, FlagUids, ForwardKernel, MIN_BLOCK_M, TileConfig};
use super::fp8::{Fp8Plan, plan_fp8};
use super::geometry::{LaunchGeometry, WorkspaceLayout, grid_and_workspace};
use ragged_core::contract::{self, Decline};
use ragged_core::problem::{IndexInput, Offsets, Operand, RaggedSdpaProblem};
use ragged_core::{DataType, DiagonalAlignment};
use ragged_gpu_runtime::cuda::error::GpuError;

/// How a ragged offsets aux is read on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetsArgs {
    /// uid of the aux.
    pub uid: i64,
    /// 4 or 8.
    pub bytes: i32,
    /// `ragged_offset_multiplier`.
    pub multiplier: i64,
}

/// Where the LSE goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LseArgs {
    /// uid of the LSE tensor.
    pub uid: i64,
    /// The ragged LSE's offsets; `None` for a dense LSE.
    pub offsets: Option<OffsetsArgs>,
    /// Dense: elements between batches.
    pub batch_stride: i64,
    /// Elements between query rows.
    pub seq_stride: i64,
    /// Elements between heads.
    pub head_stride: i64,
}

/// (seq stride, head stride) of a tensor, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowStrides {
    /// Elements between tokens.
    pub seq: i64,
    /// Elements between heads.
    pub head: i64,
}

/// Everything an execute needs, derived from the graph once.
#[derive(Debug, Clone, PartialEq)]
pub struct FmhaPlan {
    /// The forward entry point.
    pub kernel: ForwardKernel,
    /// B.
    pub batch: i32,
    /// S_q_max.
    pub s_q_max: i32,
    /// S_kv_max.
    pub s_kv_max: i32,
    /// H_q.
    pub heads_q: i32,
    /// H_kv.
    pub heads_kv: i32,
    /// Q's offsets (O shares them).
    pub q_offsets: OffsetsArgs,
    /// K's offsets (V shares them).
    pub kv_offsets: OffsetsArgs,
    /// `seq_len_q` (uid, element bytes).
    pub seq_len_q: Option<(i64, i32)>,
    /// `seq_len_kv` (uid, element bytes).
    pub seq_len_kv: Option<(i64, i32)>,
    /// The LSE output, if requested.
    pub lse: Option<LseArgs>,
    /// Row strides of Q, K, V, O.
    pub q: RowStrides,
    /// K.
    pub k: RowStrides,
    /// V.
    pub v: RowStrides,
    /// O.
    pub o: RowStrides,
    /// uids of Q, K, V, O for pointer errors.
    pub uids: [i64; 4],
    /// Softmax scale.
    pub scale: f32,
    /// Band: left, right (−1 unbounded), bottom-right alignment flag.
    pub mask_left: i32,
    /// See `mask_left`.
    pub mask_right: i32,
    /// 1 for BOTTOM_RIGHT, 0 for TOP_LEFT.
    pub bottom_right: i32,
    /// Scratch layout for the smallest BM of any configuration, so that it is large enough
    /// whichever configuration the device's module publishes (with an FP8 plan's regions after
    /// it, counted in `total_bytes`).
    pub workspace: WorkspaceLayout,
    /// The FP8 (e4m3) forward's side, for an FP8 problem.
    pub fp8: Option<Fp8Plan>,
}

impl FmhaPlan {
    /// Bytes of workspace the caller must provide.
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.total_bytes
    }

    /// The launch shape under the tile configuration the loaded module publishes.
    pub fn geometry(&self, tiles: TileConfig) -> Result<LaunchGeometry, GpuError> {
        let (max_tiles, grid_blocks, workspace) = grid_and_workspace(
            i64::from(self.batch),
            i64::from(self.s_q_max),
            i64::from(self.heads_q),
            i64::from(tiles.block_m),
        )?;
        Ok(LaunchGeometry {
            tiles,
            max_tiles,
            grid_blocks,
            workspace,
        })
    }

    /// The uids named by device validation errors.
    pub fn flag_uids(&self) -> FlagUids {
        FlagUids {
            q_offsets: self.q_offsets.uid,
            kv_offsets: self.kv_offsets.uid,
            lse_offsets: self.lse.and_then(|l| l.offsets).map(|o| o.uid),
            seq_len_q: self.seq_len_q.map(|s| s.0),
            seq_len_kv: self.seq_len_kv.map(|s| s.0),
            s_max: (i64::from(self.s_q_max), i64::from(self.s_kv_max)),
        }
    }
}

fn to_i32(value: i64, t: &Operand, field: &str) -> Result<i32, Decline> {
    i32::try_from(value).map_err(|_| {
        Decline::new(
            t.uid,
            format!("{} {field}", t.role),
            value,
            "must fit in int32",
        )
    })
}

fn offsets_args(offsets: Offsets) -> OffsetsArgs {
    OffsetsArgs {
        uid: offsets.uid,
        bytes: offsets.width.bytes(),
        multiplier: offsets.multiplier.get(),
    }
}

/// Checks `problem` against the GPU contract and what the kernels support, and derives the
/// launch arguments.
pub fn plan(problem: &RaggedSdpaProblem) -> Result<FmhaPlan, Decline> {
    match &problem.fp8 {
        None => contract::check_gpu(problem)?,
        Some(_) => contract::check_gpu_admitting_fp8(problem)?,
    }
    let RaggedSdpaProblem { q, k, v, o, .. } = problem;
    let [b, s_q, h_q, d] = q.bshd();
    let [_, s_kv, h_kv, _] = k.bshd();
    let kernel_16_bit = match problem.fp8 {
        None => Some(select_16_bit(problem)?),
        Some(_) => None,
    };
    let mut workspace = grid_and_workspace(b, s_q, h_q, MIN_BLOCK_M)
        .map_err(|error| match error {
            GpuError::TooLarge { what, value, limit } => {
                Decline::new(q.uid, what.to_owned(), value, format!("at most {limit}"))
            }
            other => Decline::new(q.uid, "launch geometry", other, "a plannable launch"),
        })?
        .2;
    let fp8 = match &problem.fp8 {
        Some(fp8) => Some(plan_fp8(problem, fp8, &mut workspace)?),
        None => None,
    };
    let kernel = match kernel_16_bit {
        Some(kernel) => kernel,
        None => ForwardKernel::select_fp8(d)
            .ok_or_else(|| Decline::new(q.uid, "FP8 head dim", d, "a compiled configuration"))?,
    };
    let (Some(q_off), Some(kv_off)) = (q.ragged, k.ragged) else {
        // The contract declines dense primaries; this only keeps a broken invariant a decline.
        return Err(Decline::new(q.uid, "Q/K layout", "dense", "ragged Q and K"));
    };
    let seq_len = |s: Option<IndexInput>| s.map(|s| (s.uid, s.width.bytes()));
    let lse = problem.stats.map(|stats| LseArgs {
        uid: stats.uid,
        offsets: stats.ragged.map(offsets_args),
        batch_stride: if stats.ragged.is_some() {
            0
        } else {
            stats.batch_stride()
        },
        seq_stride: stats.seq_stride(),
        head_stride: stats.head_stride(),
    });

    let mask = problem.mask;
    // The kernels spell "unbounded" as -1; the band, like schema.md §6.1, treats any negative
    // bound as unbounded, so every negative value folds to -1 here (the contract bounds the rest).
    let band = |value: Option<i64>| match value {
        Some(bound) if bound >= 0 => bound as i32,
        _ => -1,
    };

    let strides = |t: &Operand| RowStrides {
        seq: t.seq_stride(),
        head: t.head_stride(),
    };
    Ok(FmhaPlan {
        kernel,
        batch: to_i32(b, q, "batch B")?,
        s_q_max: to_i32(s_q, q, "S_max")?,
        s_kv_max: to_i32(s_kv, k, "S_max")?,
        heads_q: to_i32(h_q, q, "heads")?,
        heads_kv: to_i32(h_kv, k, "heads")?,
        q_offsets: offsets_args(q_off),
        kv_offsets: offsets_args(kv_off),
        seq_len_q: seq_len(problem.seq_len_q),
        seq_len_kv: seq_len(problem.seq_len_kv),
        lse,
        q: strides(q),
        k: strides(k),
        v: strides(v),
        o: strides(o),
        uids: [q.uid, k.uid, v.uid, o.uid],
        scale: problem.scale.plan_value(),
        mask_left: band(mask.left),
        mask_right: band(mask.right),
        bottom_right: i32::from(mask.alignment == DiagonalAlignment::BottomRight),
        workspace,
        fp8,
    })
}

/// The bf16 / fp16 entry point of `problem` (HALF or BFLOAT16, (D_qk, D_v) in
/// device_abi::HEAD_DIMS).
fn select_16_bit(problem: &RaggedSdpaProblem) -> Result<ForwardKernel, Decline> {
    let RaggedSdpaProblem { q, v, .. } = problem;
    let dtype = q.dtype;
    let d = q.head_dim();
    let d_v = v.head_dim();
    if !matches!(dtype, DataType::F16 | DataType::BF16) {
        return Err(Decline::new(
            q.uid,
            format!("{} data type", q.role),
            format!("{dtype:?}"),
            "HALF or BFLOAT16 (the CUDA FMHA kernels)",
        ));
    }
    if !device_abi::HEAD_DIMS.iter().any(|&(d_qk, _)| d_qk == d) {
        return Err(Decline::new(
            q.uid,
            format!("{} head dim", q.role),
            d,
            "64, 96, 128, 192 or 256 (the compiled CUDA FMHA kernels)",
        ));
    }
    if !device_abi::HEAD_DIMS.contains(&(d, d_v)) {
        let with: Vec<String> = device_abi::HEAD_DIMS
            .iter()
            .filter(|&&(d_qk, _)| d_qk == d)
            .map(|(_, d_v)| d_v.to_string())
            .collect();
        return Err(Decline::new(
            v.uid,
            format!("{} head dim", v.role),
            d_v,
            format!(
                "{} with Q/K head dim {d} (the compiled CUDA FMHA kernels)",
                with.join(" or ")
            ),
        ));
    }
    ForwardKernel::select(dtype, d, d_v).ok_or_else(|| {
        Decline::new(
            q.uid,
            format!("{} data type/head dim", q.role),
            format!("{dtype:?}/{d}/{d_v}"),
            "a compiled configuration",
        )
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
