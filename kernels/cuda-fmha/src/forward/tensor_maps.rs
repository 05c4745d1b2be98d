//! The TMA tensor maps of the warp-specialized Hopper entry points (`NAME_tma` published): one
//! `CUtensorMap` each for Q, K and V, encoded per execute because they hold the base pointers.
//!
//! Each map covers its whole packed buffer as a 3-D tensor {head dim, heads, tokens} with the
//! variant pack's head and sequence strides, boxes of {64 columns, 1 head, tile rows} and the
//! 128-byte swizzle the kernels' wgmma descriptors expect (kernels/cuda-fmha/cuda/README.md). The kernels
//! request only whole boxes inside a batch's valid rows (tail tiles are copied with zero-filling
//! cp.async, or a K / V tail of a batch with at least a tile of keys is loaded as the batch's last
//! whole box), so the token extent has to cover the coordinates, not the buffer, whose size the
//! plugin does not know. Coordinates are token indices below 2^31 for any buffer that fits a
//! device: 2^31 tokens of at least 64 two-byte elements would be 256 GiB.

use std::ffi::c_void;

use cudarc::driver::sys as cu;

use super::device_abi::TileConfig;
use super::plan::{FmhaPlan, RowStrides};
use ragged_gpu_runtime::cuda::error::{DriverCall, GpuError};
use ragged_gpu_runtime::cuda::module::KernelArg;

/// Token extent of every map: the largest coordinate a kernel can pass.
const TOKEN_EXTENT: u64 = (1 << 31) - 1;
/// Columns per box: one 128-byte swizzle atom of two-byte elements.
const BOX_COLUMNS: u32 = 64;

/// The three map arguments (Q, K, V) that follow the common ones for `plan` with `tiles`, over
/// the device buffers at `bases` (Q, K, V).
pub(crate) fn tensor_map_args(
    plan: &FmhaPlan,
    tiles: &TileConfig,
    bases: [u64; 3],
) -> Result<[KernelArg; 3], GpuError> {
    let kernel = plan.kernel;
    let (name, d_qk, d_v) = (kernel.name(), kernel.d_qk(), kernel.d_v());
    let rows = |v: i32| u32::try_from(v).unwrap_or(0);
    let (bm, bn) = (rows(tiles.block_m), rows(tiles.block_n));
    let [q, k, v] = bases;
    Ok([
        KernelArg::TensorMap(encode(name, q, d_qk, plan.heads_q, plan.q, bm)?),
        KernelArg::TensorMap(encode(name, k, d_qk, plan.heads_kv, plan.k, bn)?),
        KernelArg::TensorMap(encode(name, v, d_v, plan.heads_kv, plan.v, bn)?),
    ])
}

/// The shared-memory swizzle of a map's boxes, whose rows span it: 128 bytes (64 two-byte columns)
/// for every tile of Q, K, V and the gradients, and for the FP8 forward's transposed V in rows of
/// 128 keys; 64 bytes (32 columns) for its rows of 64 keys (the D 256 entry point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowSwizzle {
    /// `CU_TENSOR_MAP_SWIZZLE_128B`, boxes of 64 two-byte columns.
    Bytes128,
    /// `CU_TENSOR_MAP_SWIZZLE_64B`, boxes of 32 two-byte columns.
    Bytes64,
}

impl RowSwizzle {
    /// Two-byte columns per box row.
    pub(crate) fn box_columns(self) -> u32 {
        match self {
            Self::Bytes128 => BOX_COLUMNS,
            Self::Bytes64 => BOX_COLUMNS / 2,
        }
    }

    fn driver(self) -> cu::CUtensorMapSwizzle {
        match self {
            Self::Bytes128 => cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            Self::Bytes64 => cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        }
    }
}

/// One map over a [tokens, heads, d] buffer at `base` (strides in elements); also used by the
/// backward's TMA gradient kernels (`crate::backward::launcher`).
pub(crate) fn encode(
    kernel: &str,
    base: u64,
    d: i64,
    heads: i32,
    strides: RowStrides,
    box_rows: u32,
) -> Result<[u64; 16], GpuError> {
    encode_swizzled(
        kernel,
        base,
        d,
        heads,
        strides,
        box_rows,
        RowSwizzle::Bytes128,
    )
}

/// [`encode`] with boxes of `swizzle`'s width and swizzle.
pub(crate) fn encode_swizzled(
    kernel: &str,
    base: u64,
    d: i64,
    heads: i32,
    strides: RowStrides,
    box_rows: u32,
    swizzle: RowSwizzle,
) -> Result<[u64; 16], GpuError> {
    let bad = |detail: String| GpuError::KernelContract {
        kernel: kernel.to_owned(),
        detail,
    };
    let dim = |v: i64| u64::try_from(v).map_err(|_| bad(format!("negative tensor-map extent {v}")));
    let bytes = |v: i64| {
        u64::try_from(v)
            .ok()
            .and_then(|e| e.checked_mul(2))
            .ok_or_else(|| bad(format!("tensor-map stride {v} elements")))
    };
    if box_rows == 0 || box_rows > 256 {
        return Err(bad(format!("tensor-map box of {box_rows} rows")));
    }
    let global_dim = [dim(d)?, dim(i64::from(heads))?, TOKEN_EXTENT];
    let global_strides = [bytes(strides.head)?, bytes(strides.seq)?];
    let box_dim = [swizzle.box_columns(), 1, box_rows];
    encode_tiled(
        cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
        base,
        &global_dim,
        &global_strides,
        &box_dim,
        swizzle.driver(),
        cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    )
}

/// A 2-D map over `blocks` consecutive blocks of `block` f32 at `base` (16-byte aligned), one block
/// per box, no swizzle: the backward's row statistics (Di, then the scaled LSE, in the Di pass's
/// row blocks), which its TMA gradient kernels copy one or two blocks per query tile
/// (`tma_load_2d`, fmha/async_ops.cuh) at int block coordinates.
pub(crate) fn encode_f32_blocks(
    kernel: &str,
    base: u64,
    block: u32,
    blocks: u64,
) -> Result<[u64; 16], GpuError> {
    let bad = |detail: String| GpuError::KernelContract {
        kernel: kernel.to_owned(),
        detail,
    };
    if blocks == 0 || blocks > TOKEN_EXTENT {
        return Err(bad(format!(
            "a tensor map of {blocks} row blocks (int coordinates reach {TOKEN_EXTENT})"
        )));
    }
    if block == 0 || block > 256 || !(block * 4).is_multiple_of(16) {
        return Err(bad(format!("a tensor-map box of {block} f32")));
    }
    let global_dim = [u64::from(block), blocks];
    let global_strides = [u64::from(block) * 4];
    let box_dim = [block, 1];
    encode_tiled(
        cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        base,
        &global_dim,
        &global_strides,
        &box_dim,
        cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
    )
}

/// cuTensorMapEncodeTiled of a rank-R map (element strides 1, no interleave, out-of-bounds boxes
/// zero-filled); `global_strides` holds the byte strides of dimensions 1..R.
fn encode_tiled<const R: usize, const S: usize>(
    data_type: cu::CUtensorMapDataType,
    base: u64,
    global_dim: &[u64; R],
    global_strides: &[u64; S],
    box_dim: &[u32; R],
    swizzle: cu::CUtensorMapSwizzle,
    l2_promotion: cu::CUtensorMapL2promotion,
) -> Result<[u64; 16], GpuError> {
    const { assert!(R >= 1 && S + 1 == R, "rank - 1 strides") };
    let element_strides = [1u32; R];
    let mut map = cu::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every pointer argument addresses a live array of the rank (R) or rank - 1 (S)
    // entries the driver reads, and `map` is a writable CUtensorMap. Encoding only reads host
    // memory; `base` is recorded, not dereferenced (the launch's buffer checks cover it).
    unsafe {
        cu::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            R as u32,
            base as *mut c_void,
            global_dim.as_ptr(),
            global_strides.as_ptr(),
            box_dim.as_ptr(),
            element_strides.as_ptr(),
            cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            l2_promotion,
            cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .call("cuTensorMapEncodeTiled")?;
    Ok(map.opaque)
}
