//! Plan-time checks and launch geometry for the CUDA FMHA engine.
//!
//! Everything that can be decided from the graph alone is decided here, once, without a GPU:
//! a graph the kernels cannot run is declined with the offending uid, and the execute path only
//! copies numbers into kernel arguments. What needs the offsets' contents (extents, monotonicity)
//! is left to the device pre-pass, because reading offsets on the host would synchronise the
//! stream on every execute.

use super::device_abi::{self, FlagUids, MIN_BLOCK_M, TileConfig};
use super::problem::{FmhaProblem, LseDesc, OffsetsDesc, RaggedDesc};
use crate::runtime::cuda::error::{GpuError, TensorRole};
use crate::{DataType, DiagonalAlignment};

/// Byte alignment the engine requires of Q, K, V, O (16-byte vector loads and stores).
pub const REQUIRED_ALIGNMENT: i64 = 16;
/// Regions inside the workspace start on this boundary (the caller's pointer is aligned up).
pub const WORKSPACE_ALIGNMENT: u64 = 256;

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

/// Byte offsets of the pre-pass's scratch inside the (aligned-up) workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// `RaggedBatch[B]`.
    pub batches: u64,
    /// `int2[B * max_tiles]`.
    pub tiles: u64,
    /// `int tile_count`.
    pub tile_count: u64,
    /// `u32 err_flag`.
    pub error_flag: u64,
    /// Bytes to request from the caller, including slack for aligning the base pointer.
    pub total_bytes: u64,
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
    pub kernel: &'static str,
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
    /// whichever configuration the device's module publishes.
    pub workspace: WorkspaceLayout,
}

impl FmhaPlan {
    /// Bytes of workspace the caller must provide.
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.total_bytes
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

fn unsupported(
    uid: i64,
    role: TensorRole,
    field: &'static str,
    value: impl std::fmt::Debug,
    requirement: impl Into<String>,
) -> GpuError {
    GpuError::Unsupported {
        uid,
        role,
        field,
        value: format!("{value:?}"),
        requirement: requirement.into(),
    }
}

/// Bytes per element of the integer side tensors the kernels read (offsets, seq_lens).
fn index_bytes(dtype: DataType) -> Option<i32> {
    match dtype {
        DataType::I32 => Some(4),
        DataType::I64 => Some(8),
        _ => None,
    }
}

fn to_i32(value: i64, uid: i64, role: TensorRole, field: &'static str) -> Result<i32, GpuError> {
    i32::try_from(value).map_err(|_| unsupported(uid, role, field, value, "must fit in int32"))
}

/// Checks `problem` against what the kernels support and derives the launch geometry.
pub fn plan(problem: &FmhaProblem) -> Result<FmhaPlan, GpuError> {
    let FmhaProblem { q, k, v, o, .. } = problem;
    let dtype = q.dtype;
    if !matches!(dtype, DataType::F16 | DataType::BF16) {
        return Err(unsupported(
            q.uid,
            TensorRole::Q,
            "dtype",
            dtype,
            "HALF or BFLOAT16",
        ));
    }
    for (t, role) in [(k, TensorRole::K), (v, TensorRole::V), (o, TensorRole::O)] {
        if t.dtype != dtype {
            let need = format!("Q's type {dtype:?}");
            return Err(unsupported(t.uid, role, "dtype", t.dtype, need));
        }
    }

    let [b, s_q, h_q, d] = q.dims;
    let [_, s_kv, h_kv, _] = k.dims;
    if !(d == 64 || d == 128) {
        return Err(unsupported(
            q.uid,
            TensorRole::Q,
            "dims[3] (head dim)",
            d,
            "64 or 128",
        ));
    }
    for (t, role) in [(q, TensorRole::Q), (k, TensorRole::K)] {
        for (axis, name) in [
            (0, "dims[0] (batch)"),
            (1, "dims[1] (S_max)"),
            (2, "dims[2] (heads)"),
        ] {
            if t.dims[axis] < 1 {
                return Err(unsupported(t.uid, role, name, t.dims[axis], "at least 1"));
            }
        }
    }
    let expect_dims = [
        (
            k,
            TensorRole::K,
            [b, s_kv, h_kv, d],
            "[B, S_kv_max, H_kv, D] with Q's B and D",
        ),
        (
            v,
            TensorRole::V,
            [b, s_kv, h_kv, d],
            "K's dims (D_v = D_qk, H_v = H_k)",
        ),
        (o, TensorRole::O, q.dims, "Q's dims"),
    ];
    for (t, role, want, why) in expect_dims {
        if t.dims != want {
            return Err(unsupported(
                t.uid,
                role,
                "dims",
                t.dims,
                format!("{want:?}: {why}"),
            ));
        }
    }
    if h_q % h_kv != 0 {
        let need = format!("a divisor of Q's {h_q} heads (GQA)");
        return Err(unsupported(
            k.uid,
            TensorRole::K,
            "dims[2] (heads)",
            h_kv,
            need,
        ));
    }

    for (t, role) in [
        (q, TensorRole::Q),
        (k, TensorRole::K),
        (v, TensorRole::V),
        (o, TensorRole::O),
    ] {
        check_packed(t, role)?;
        check_alignment(t.uid, role, t.alignment)?;
    }

    let q_offsets = check_offsets(q, TensorRole::QOffsets, b)?;
    let kv_offsets = check_offsets(k, TensorRole::KvOffsets, b)?;
    check_shared_offsets(o, TensorRole::OOffsets, &q.offsets, "Q")?;
    check_shared_offsets(v, TensorRole::VOffsets, &k.offsets, "K")?;

    let seq_len = |desc: &Option<super::problem::SeqLenDesc>, role| -> Result<_, GpuError> {
        let Some(s) = desc else { return Ok(None) };
        let bytes = index_bytes(s.dtype)
            .ok_or_else(|| unsupported(s.uid, role, "dtype", s.dtype, "INT32 or INT64"))?;
        if s.elements != b {
            return Err(unsupported(
                s.uid,
                role,
                "element count",
                s.elements,
                format!("B = {b}"),
            ));
        }
        Ok(Some((s.uid, bytes)))
    };
    let seq_len_q = seq_len(&problem.seq_len_q, TensorRole::SeqLenQ)?;
    let seq_len_kv = seq_len(&problem.seq_len_kv, TensorRole::SeqLenKv)?;

    let lse = problem
        .lse
        .as_ref()
        .map(|l| check_lse(l, [b, s_q, h_q]))
        .transpose()?;

    let mask = problem.mask;
    // The kernels spell "unbounded" as -1; the band, like schema.md §6.1, treats any negative
    // bound as unbounded, so every negative value folds to -1 here.
    let band = |value: Option<i64>, field| -> Result<i32, GpuError> {
        match value {
            Some(bound) if bound >= 0 => to_i32(bound, q.uid, TensorRole::Q, field),
            _ => Ok(-1),
        }
    };
    let mask_left = band(mask.left, "mask left bound")?;
    let mask_right = band(mask.right, "mask right bound")?;

    let kernel = device_abi::forward_kernel(dtype, d).ok_or_else(|| {
        unsupported(
            q.uid,
            TensorRole::Q,
            "dtype/head dim",
            (dtype, d),
            "a compiled configuration",
        )
    })?;
    let workspace = grid_and_workspace(b, s_q, h_q, MIN_BLOCK_M)?.2;

    let strides = |t: &RaggedDesc| RowStrides {
        seq: t.strides[1],
        head: t.strides[2],
    };
    Ok(FmhaPlan {
        kernel,
        batch: to_i32(b, q.uid, TensorRole::Q, "dims[0] (batch)")?,
        s_q_max: to_i32(s_q, q.uid, TensorRole::Q, "dims[1] (S_max)")?,
        s_kv_max: to_i32(s_kv, k.uid, TensorRole::K, "dims[1] (S_max)")?,
        heads_q: to_i32(h_q, q.uid, TensorRole::Q, "dims[2] (heads)")?,
        heads_kv: to_i32(h_kv, k.uid, TensorRole::K, "dims[2] (heads)")?,
        q_offsets,
        kv_offsets,
        seq_len_q,
        seq_len_kv,
        lse,
        q: strides(q),
        k: strides(k),
        v: strides(v),
        o: strides(o),
        uids: [q.uid, k.uid, v.uid, o.uid],
        scale: problem.scale,
        mask_left,
        mask_right,
        bottom_right: i32::from(mask.alignment == DiagonalAlignment::BottomRight),
        workspace,
    })
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

/// The geometry of `plan` under `tiles`.
pub fn geometry(plan: &FmhaPlan, tiles: TileConfig) -> Result<LaunchGeometry, GpuError> {
    let (max_tiles, grid_blocks, workspace) = grid_and_workspace(
        i64::from(plan.batch),
        i64::from(plan.s_q_max),
        i64::from(plan.heads_q),
        i64::from(tiles.block_m),
    )?;
    Ok(LaunchGeometry {
        tiles,
        max_tiles,
        grid_blocks,
        workspace,
    })
}

/// (tiles per batch, grid blocks, workspace) for query tiles of `block_m` rows.
fn grid_and_workspace(
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
        total_bytes: counters + 8 + WORKSPACE_ALIGNMENT,
    };
    Ok((max_tiles as i32, grid as u32, workspace))
}

/// Packed BSHD: head-dim stride 1, head stride D, sequence stride H·D (batch stride ignored).
fn check_packed(t: &RaggedDesc, role: TensorRole) -> Result<(), GpuError> {
    let [_, _, h, d] = t.dims;
    let want = [h * d, d, 1];
    if t.strides[1..] != want {
        let need = format!("packed BSHD [_, {}, {}, 1]", want[0], want[1]);
        return Err(unsupported(t.uid, role, "strides", t.strides, need));
    }
    Ok(())
}

fn check_alignment(uid: i64, role: TensorRole, alignment: i64) -> Result<(), GpuError> {
    if alignment < REQUIRED_ALIGNMENT || alignment % REQUIRED_ALIGNMENT != 0 {
        let need = format!("a positive multiple of {REQUIRED_ALIGNMENT}");
        return Err(unsupported(uid, role, "alignment", alignment, need));
    }
    Ok(())
}

fn check_offsets(t: &RaggedDesc, role: TensorRole, b: i64) -> Result<OffsetsArgs, GpuError> {
    let off = &t.offsets;
    let bytes = index_bytes(off.dtype)
        .ok_or_else(|| unsupported(off.uid, role, "dtype", off.dtype, "INT32 or INT64"))?;
    if off.elements != b + 1 {
        let need = format!("B + 1 = {}", b + 1);
        return Err(unsupported(
            off.uid,
            role,
            "element count",
            off.elements,
            need,
        ));
    }
    if off.multiplier < 1 {
        return Err(unsupported(
            off.uid,
            role,
            "ragged_offset_multiplier",
            off.multiplier,
            "at least 1",
        ));
    }
    Ok(OffsetsArgs {
        uid: off.uid,
        bytes,
        multiplier: off.multiplier,
    })
}

/// The pre-pass computes one token start per batch for Q and O (K and V), so they must read the
/// same aux with the same multiplier; their sequence strides are equal once both are packed with
/// equal dims.
fn check_shared_offsets(
    t: &RaggedDesc,
    role: TensorRole,
    with: &OffsetsDesc,
    with_name: &str,
) -> Result<(), GpuError> {
    if t.offsets.uid != with.uid {
        let need = format!("{with_name}'s ragged_offset uid {}", with.uid);
        return Err(unsupported(t.offsets.uid, role, "uid", t.offsets.uid, need));
    }
    if t.offsets.multiplier != with.multiplier {
        let need = format!("{with_name}'s multiplier {}", with.multiplier);
        return Err(unsupported(
            t.uid,
            role,
            "ragged_offset_multiplier",
            t.offsets.multiplier,
            need,
        ));
    }
    Ok(())
}

fn check_lse(lse: &LseDesc, [b, s_q, h_q]: [i64; 3]) -> Result<LseArgs, GpuError> {
    let role = TensorRole::Lse;
    match lse {
        LseDesc::Dense {
            uid,
            dtype,
            dims,
            strides,
            alignment,
        } => {
            if *dtype != DataType::F32 {
                return Err(unsupported(*uid, role, "dtype", dtype, "FLOAT"));
            }
            let want = [b, h_q, s_q, 1];
            if *dims != want {
                return Err(unsupported(
                    *uid,
                    role,
                    "dims",
                    dims,
                    format!("[B, H_q, S_q_max, 1] = {want:?}"),
                ));
            }
            if strides.iter().any(|&s| s < 0) {
                return Err(unsupported(*uid, role, "strides", strides, "non-negative"));
            }
            check_lse_alignment(*uid, *alignment)?;
            Ok(LseArgs {
                uid: *uid,
                offsets: None,
                batch_stride: strides[0],
                seq_stride: strides[2],
                head_stride: strides[1],
            })
        }
        LseDesc::Ragged(t) => {
            if t.dtype != DataType::F32 {
                return Err(unsupported(t.uid, role, "dtype", t.dtype, "FLOAT"));
            }
            let want = [b, s_q, h_q, 1];
            if t.dims != want {
                return Err(unsupported(
                    t.uid,
                    role,
                    "dims",
                    t.dims,
                    format!("[B, S_q_max, H_q, 1] = {want:?}"),
                ));
            }
            if t.strides[1..] != [h_q, 1, 1] {
                return Err(unsupported(
                    t.uid,
                    role,
                    "strides",
                    t.strides,
                    format!("packed [_, {h_q}, 1, 1]"),
                ));
            }
            check_lse_alignment(t.uid, t.alignment)?;
            let offsets = check_offsets(t, TensorRole::LseOffsets, b)?;
            Ok(LseArgs {
                uid: t.uid,
                offsets: Some(offsets),
                batch_stride: 0,
                seq_stride: h_q,
                head_stride: 1,
            })
        }
    }
}

/// The LSE is written one fp32 at a time, but the engine rule (ragged-sdpa.md §4) asks every
/// GPU tensor for a multiple of 16, which keeps declines uniform across engines.
fn check_lse_alignment(uid: i64, alignment: i64) -> Result<(), GpuError> {
    check_alignment(uid, TensorRole::Lse, alignment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MaskBand;
    use crate::cuda_fmha::problem::SeqLenDesc;

    fn ragged(uid: i64, dims: [i64; 4], offsets_uid: i64) -> RaggedDesc {
        let [_, s, h, d] = dims;
        RaggedDesc {
            uid,
            dtype: DataType::BF16,
            dims,
            strides: [s * h * d, h * d, d, 1],
            alignment: 16,
            offsets: OffsetsDesc {
                uid: offsets_uid,
                dtype: DataType::I32,
                elements: dims[0] + 1,
                multiplier: 1,
            },
        }
    }

    /// B = 3, S_q = 200, H_q = 8, S_kv = 300, H_kv = 2, D = 128; uids 1..=4, offsets 10 and 11.
    fn problem() -> FmhaProblem {
        FmhaProblem {
            q: ragged(1, [3, 200, 8, 128], 10),
            k: ragged(2, [3, 300, 2, 128], 11),
            v: ragged(3, [3, 300, 2, 128], 11),
            o: ragged(4, [3, 200, 8, 128], 10),
            lse: None,
            seq_len_q: None,
            seq_len_kv: None,
            scale: 0.125,
            mask: MaskBand::none(),
        }
    }

    /// The error's text, which must name `uid` and `field`.
    fn rejected(p: &FmhaProblem, uid: i64, field: &str) -> String {
        match plan(p) {
            Err(e @ GpuError::Unsupported { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with(&format!("tensor uid {uid} ")), "{text}");
                assert!(text.contains(field), "{text}");
                text
            }
            other => panic!("expected Unsupported for uid {uid} {field}, got {other:?}"),
        }
    }

    #[test]
    fn a_supported_graph_gets_its_geometry() {
        let plan = plan(&problem()).unwrap();
        assert_eq!(plan.kernel, "ragged_fmha_fwd_bf16_d128");
        assert_eq!((plan.batch, plan.s_q_max, plan.s_kv_max), (3, 200, 300));
        assert_eq!((plan.heads_q, plan.heads_kv), (8, 2));
        assert_eq!(
            plan.q,
            RowStrides {
                seq: 1024,
                head: 128
            }
        );
        assert_eq!(
            plan.k,
            RowStrides {
                seq: 256,
                head: 128
            }
        );
        assert_eq!(
            (plan.mask_left, plan.mask_right, plan.bottom_right),
            (-1, -1, 0)
        );
        // Sized for BM = 64: 3 RaggedBatch (96 B) -> tiles at 256; 3 · ceil(200 / 64) = 12 tiles
        // (96 B) -> counters at 512.
        assert_eq!(
            plan.workspace,
            WorkspaceLayout {
                batches: 0,
                tiles: 256,
                tile_count: 512,
                error_flag: 516,
                total_bytes: 520 + 256
            }
        );
        assert_eq!(plan.workspace_bytes(), 776);
    }

    #[test]
    fn geometry_follows_the_published_tile_config() {
        let plan = plan(&problem()).unwrap();
        // The sm_90a d128 configuration: BM = 192, 384 threads.
        let tiles = TileConfig::from_raw(plan.kernel, [192, 64, 384, 115_712]).unwrap();
        let g = geometry(&plan, tiles).unwrap();
        // ceil(200 / 192) = 2 tiles per batch, times 3 batches, times 8 heads.
        assert_eq!((g.max_tiles, g.grid_blocks), (2, 48));
        assert_eq!(g.workspace.tiles, 256);
        // 6 tiles (48 B) still end below 512.
        assert_eq!(g.workspace.tile_count, 512);
        assert!(g.workspace.total_bytes <= plan.workspace_bytes());

        let tiles = TileConfig::from_raw(plan.kernel, [64, 64, 128, 81_920]).unwrap();
        let g = geometry(&plan, tiles).unwrap();
        assert_eq!((g.max_tiles, g.grid_blocks), (4, 96));
        assert_eq!(g.workspace, plan.workspace);
    }

    #[test]
    fn fp16_d64_with_causal_bottom_right_and_seq_lens() {
        let mut p = problem();
        for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
            t.dtype = DataType::F16;
            t.dims[3] = 64;
            t.strides = [t.dims[1] * t.dims[2] * 64, t.dims[2] * 64, 64, 1];
        }
        p.mask = MaskBand::causal_bottom_right();
        p.seq_len_q = Some(SeqLenDesc {
            uid: 20,
            dtype: DataType::I64,
            elements: 3,
        });
        let plan = plan(&p).unwrap();
        assert_eq!(plan.kernel, "ragged_fmha_fwd_f16_d64");
        assert_eq!(
            (plan.mask_left, plan.mask_right, plan.bottom_right),
            (-1, 0, 1)
        );
        assert_eq!(plan.seq_len_q, Some((20, 8)));
        assert_eq!(plan.seq_len_kv, None);
    }

    #[test]
    fn fp32_and_other_types_are_declined() {
        let mut p = problem();
        p.q.dtype = DataType::F32;
        let text = rejected(&p, 1, "dtype");
        assert!(text.contains("HALF or BFLOAT16"), "{text}");
        let mut p = problem();
        p.v.dtype = DataType::F16;
        rejected(&p, 3, "dtype");
    }

    #[test]
    fn head_dims_other_than_64_and_128_are_declined() {
        for d in [32, 96, 256] {
            let mut p = problem();
            for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
                t.dims[3] = d;
                t.strides = [t.dims[1] * t.dims[2] * d, t.dims[2] * d, d, 1];
            }
            let text = rejected(&p, 1, "head dim");
            assert!(text.contains(&format!("= {d}:")), "{text}");
        }
    }

    #[test]
    fn value_head_dim_must_equal_query_head_dim() {
        let mut p = problem();
        p.v.dims[3] = 64;
        p.v.strides = [300 * 2 * 64, 2 * 64, 64, 1];
        rejected(&p, 3, "dims");
    }

    #[test]
    fn gqa_needs_kv_heads_dividing_query_heads() {
        let mut p = problem();
        for t in [&mut p.k, &mut p.v] {
            t.dims[2] = 3;
            t.strides = [300 * 3 * 128, 3 * 128, 128, 1];
        }
        let text = rejected(&p, 2, "heads");
        assert!(text.contains("GQA"), "{text}");
    }

    #[test]
    fn non_packed_layouts_are_declined() {
        // cuDNN's logical [B, H, S, D] order with BSHD strides: sequence on axis 2.
        let mut p = problem();
        p.q.strides = [200 * 8 * 128, 128, 8 * 128, 1];
        let text = rejected(&p, 1, "strides");
        assert!(text.contains("packed BSHD [_, 1024, 128, 1]"), "{text}");
        // Padded rows (seq stride larger than H·D).
        let mut p = problem();
        p.o.strides[1] = 2048;
        rejected(&p, 4, "strides");
    }

    #[test]
    fn alignment_must_be_a_positive_multiple_of_16() {
        for a in [0, 8, 24, -16] {
            let mut p = problem();
            p.k.alignment = a;
            rejected(&p, 2, "alignment");
        }
        let mut p = problem();
        p.k.alignment = 256;
        assert!(plan(&p).is_ok());
    }

    #[test]
    fn offsets_are_checked_for_type_count_and_multiplier() {
        let mut p = problem();
        p.q.offsets.dtype = DataType::F32;
        rejected(&p, 10, "dtype");
        let mut p = problem();
        p.k.offsets.elements = 3;
        let text = rejected(&p, 11, "element count");
        assert!(text.contains("B + 1 = 4"), "{text}");
        let mut p = problem();
        p.q.offsets.multiplier = 0;
        rejected(&p, 10, "ragged_offset_multiplier");
    }

    #[test]
    fn o_and_v_must_share_the_offsets_of_q_and_k() {
        let mut p = problem();
        p.o.offsets.uid = 12;
        let text = rejected(&p, 12, "uid");
        assert!(text.contains("Q's ragged_offset uid 10"), "{text}");
        let mut p = problem();
        p.v.offsets.multiplier = 2;
        rejected(&p, 3, "ragged_offset_multiplier");
    }

    #[test]
    fn seq_lens_need_an_integer_type_and_b_elements() {
        let mut p = problem();
        p.seq_len_kv = Some(SeqLenDesc {
            uid: 21,
            dtype: DataType::F16,
            elements: 3,
        });
        rejected(&p, 21, "dtype");
        let mut p = problem();
        p.seq_len_kv = Some(SeqLenDesc {
            uid: 21,
            dtype: DataType::I32,
            elements: 4,
        });
        rejected(&p, 21, "element count");
    }

    #[test]
    fn dense_lse_maps_its_strides() {
        let mut p = problem();
        p.lse = Some(LseDesc::Dense {
            uid: 5,
            dtype: DataType::F32,
            dims: [3, 8, 200, 1],
            strides: [1600, 200, 1, 1],
            alignment: 16,
        });
        let lse = plan(&p).unwrap().lse.unwrap();
        assert_eq!(
            (lse.batch_stride, lse.head_stride, lse.seq_stride),
            (1600, 200, 1)
        );
        assert_eq!(lse.offsets, None);
        p.lse = Some(LseDesc::Dense {
            uid: 5,
            dtype: DataType::F32,
            dims: [3, 200, 8, 1],
            strides: [1600, 8, 1, 1],
            alignment: 16,
        });
        rejected(&p, 5, "dims");
    }

    #[test]
    fn ragged_lse_is_token_major_with_its_own_offsets() {
        let mut p = problem();
        let mut lse = ragged(5, [3, 200, 8, 1], 13);
        lse.dtype = DataType::F32;
        lse.offsets.multiplier = 8;
        p.lse = Some(LseDesc::Ragged(lse));
        let args = plan(&p).unwrap().lse.unwrap();
        assert_eq!((args.seq_stride, args.head_stride), (8, 1));
        assert_eq!(
            args.offsets,
            Some(OffsetsArgs {
                uid: 13,
                bytes: 4,
                multiplier: 8
            })
        );
        lse.dtype = DataType::BF16;
        p.lse = Some(LseDesc::Ragged(lse));
        rejected(&p, 5, "dtype");
    }

    #[test]
    fn negative_mask_bounds_are_unbounded_and_huge_ones_declined() {
        let mut p = problem();
        p.mask.left = Some(-2);
        p.mask.right = Some(3);
        let plan = plan(&p).unwrap();
        assert_eq!((plan.mask_left, plan.mask_right), (-1, 3));
        let mut p = problem();
        p.mask.right = Some(i64::from(i32::MAX) + 1);
        rejected(&p, 1, "mask right bound");
    }

    #[test]
    fn empty_dims_are_declined() {
        let mut p = problem();
        p.k.dims[1] = 0;
        p.v.dims[1] = 0;
        rejected(&p, 2, "S_max");
    }

    #[test]
    fn grids_beyond_int32_are_declined() {
        let mut p = problem();
        // 2^20 batches x 2^16 / 64 tiles x 4 heads = 2^32 blocks.
        for t in [&mut p.q, &mut p.o] {
            t.dims = [1 << 20, 1 << 16, 4, 128];
            t.strides = [(1 << 16) * 512, 512, 128, 1];
            t.offsets.elements = (1 << 20) + 1;
        }
        for t in [&mut p.k, &mut p.v] {
            t.dims[0] = 1 << 20;
            t.offsets.elements = (1 << 20) + 1;
        }
        match plan(&p) {
            Err(GpuError::TooLarge { value, .. }) => assert_eq!(value, 1 << 32),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }
}
