//! Launch geometry and workspace layout of the CUDA FMHA engine: how many query tiles, how large a
//! grid, where the pre-pass's scratch lies. Computed once for the plan (for the smallest tile the
//! module may publish) and again per execute for the tile the loaded module does publish.

use super::device_abi::{self, TileConfig};
use ragged_gpu_runtime::cuda::error::GpuError;

/// Regions inside the workspace start on this boundary (the caller's pointer is aligned up).
pub const WORKSPACE_ALIGNMENT: u64 = 256;

/// The counters region: tile count, error flag, the persistent bodies' work counter, a free word;
/// then the fused list's claim and publication words (u64 at bytes 16 and 24) and its count of
/// blocks that left (u32 at 32), `kernels/cuda-fmha/cuda/fmha/fused_list.cuh`.
const COUNTER_BYTES: u64 = 48;

/// Byte offsets of the pre-pass's scratch inside the (aligned-up) workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// `RaggedBatch[B]`.
    pub batches: u64,
    /// `int2[B * max_tiles]`.
    pub tiles: u64,
    /// `int tile_count`.
    pub tile_count: u64,
    /// `u32 err_flag`. The word after it (`tile_count[2]`) is the work counter from which the
    /// persistent Hopper bodies draw their items (the body's `DYN` schedule); the
    /// forward pre-pass zeroes it every launch (with the fused list, the block whose claim of the
    /// execute's nonce wins), so it needs no memset either.
    pub error_flag: u64,
    /// Bytes to request from the caller, including slack for aligning the base pointer.
    pub total_bytes: u64,
}

/// Launch shape of one execute, once the module's tile configuration is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchGeometry {
    /// The entry point's published configuration.
    pub tiles: TileConfig,
    /// Query tiles per batch at most: ceil(S_q_max / BM).
    pub max_tiles: i32,
    /// Forward grid: B · max_tiles · H_q blocks (an upper bound; surplus blocks exit at once).
    pub grid_blocks: u32,
    /// Scratch layout for this BM (never larger than the plan's).
    pub workspace: WorkspaceLayout,
}

/// (tiles per batch, grid blocks, workspace) for query tiles of `block_m` rows.
pub(crate) fn grid_and_workspace(
    b: i64,
    s_q: i64,
    h_q: i64,
    block_m: i64,
) -> Result<(i32, u32, WorkspaceLayout), GpuError> {
    let max_tiles = (s_q + block_m - 1) / block_m;
    let tiles = u128::from(b.unsigned_abs()) * u128::from(max_tiles.unsigned_abs());
    let grid = tiles * u128::from(h_q.unsigned_abs());
    let limit = i32::MAX as u128;
    if grid > limit {
        return Err(GpuError::TooLarge {
            what: "forward grid (B · ceil(S_q_max / BM) · H_q)",
            value: grid,
            limit,
        });
    }
    let align = |x: u64| x.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
    let batches_bytes = b.unsigned_abs() * device_abi::RAGGED_BATCH_BYTES;
    let tiles_offset = align(batches_bytes);
    let counters = align(tiles_offset + tiles as u64 * device_abi::TILE_ENTRY_BYTES);
    let workspace = WorkspaceLayout {
        batches: 0,
        tiles: tiles_offset,
        tile_count: counters,
        error_flag: counters + 4,
        total_bytes: counters + COUNTER_BYTES + WORKSPACE_ALIGNMENT,
    };
    Ok((max_tiles as i32, grid as u32, workspace))
}
