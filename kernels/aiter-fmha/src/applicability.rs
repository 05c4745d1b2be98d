//! Which ragged SDPA problems the AITER engine takes (ragged-sdpa.md §4, §6, §7.2, §9).
//!
//! Everything is decided from graph metadata and the device architecture, never from tensor
//! contents: applicability runs without device memory. A declined problem is not an error (the
//! plugin answers `SUCCESS` with no engine), but the reason is logged, so each [`Decline`]
//! names the tensor uid, field, value and need that caused it.
//!
//! [`plan`] checks the shared GPU contract
//! ([`ragged_core::contract::check_gpu_admitting_fp8`]) and then this engine's own limits
//! ([`check_applicability`]): HALF/BFLOAT16, CK's head dims, one index width (int32 `index_t`),
//! the shim's build targets and AITER's mask quirks; and for FP8 forwards, exactly the rows of
//! AITER's asm `fp8bf16` table in group mode ([`check_fp8`]).

use std::fmt;

use super::problem::{AiterProblem, LseLayout, RaggedOperand, is_unmasked};
use super::serving::ServingPlan;
use super::workspace::WorkspacePlan;
use ragged_core::contract::{self, Decline};
use ragged_core::problem::{Fp8Forward, Fp8OutputPlan, Fp8Scalar, RaggedSdpaProblem, ScalePlan};
use ragged_core::{DataType, DiagonalAlignment, Fp8Format};

/// CK tile's largest head dim (ragged-sdpa.md §6).
pub const MAX_HEAD_DIM: i64 = 256;
/// AITER indexes with `ck_tile::index_t` (int32): any element index must stay below this.
pub const INDEX_LIMIT: i64 = 1 << 31;

/// An AMD GPU architecture as `gcnArchName` reports it, e.g. `gfx942:sramecc+:xnack-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuArch(String);

impl GpuArch {
    /// Wraps a `gcnArchName` string.
    pub fn new(gcn_arch_name: impl Into<String>) -> Self {
        Self(gcn_arch_name.into())
    }

    /// The full name, target features included (what hipRTC's `--offload-arch` takes).
    pub fn full(&self) -> &str {
        &self.0
    }

    /// The processor without target features (`gfx942`), as AITER's tables key it.
    pub fn processor(&self) -> &str {
        self.0.split(':').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for GpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which AITER path is expected to run. AITER picks it itself inside `mha_fwd`; the engine only
/// forbids asm where asm would be wrong, and reports its expectation in logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedPath {
    /// asm `fmha_fwd_v3` (bf16, D 128/128 on gfx942/gfx950, 192/128 on gfx950; fp8bf16, D
    /// 128/128 on both, 256/256 on gfx950; no window).
    AsmV3,
    /// CK tile `fmha_fwd`.
    CkTile,
}

/// What applicability decided for an accepted problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AiterPlan {
    /// `use_asm_v3` for the shim: false for top-left masks (pitfall 2), for D 192/128 on
    /// gfx942 (listed unsupported by AITER's own table, pitfall 11), and for padded queries
    /// with stats: CK's group-mode kernel indexes its LSE by the physical token start, which is
    /// what the fix-up reads, while the asm kernel receives only the logical cumulative starts
    /// and may index by those (unpinned, like pitfall 14; a hardware run decides).
    pub use_asm_v3: bool,
    /// The path AITER is expected to take, for logs.
    pub expected_path: ExpectedPath,
    /// The workspace layout and size.
    pub workspace: WorkspacePlan,
    /// `how_v3_bf16_cvt`: 0 (round to nearest even), except for FP8 on gfx942, where AITER's
    /// table lists its `fp8bf16` kernels under 1 only (`hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv`).
    pub how_v3_bf16_cvt: i32,
    /// The descales an accepted FP8 forward binds; `None` for a 16-bit forward.
    pub fp8: Option<AiterFp8Plan>,
    /// For a paged or sink graph: what runs around the forward, and the workspace it adds
    /// ([`serving::plan`](super::serving::plan)); `None` for a plain ragged forward.
    pub serving: Option<ServingPlan>,
}

impl AiterPlan {
    /// Workspace bytes the caller provides: the forward's, or with a paged or sink route the
    /// route's regions followed by the forward's.
    pub fn workspace_bytes(&self) -> usize {
        self.serving.map_or(self.workspace.size, |s| s.size)
    }
}

/// What an accepted FP8 forward hands AITER besides Q, K, V: the uids of its three per-tensor
/// descales, each a device-resident FLOAT (AITER's kernels read them through pointers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AiterFp8Plan {
    /// `descale_q_tensor_uid`, `descale_k_tensor_uid`, `descale_v_tensor_uid`.
    pub descale_uids: [i64; 3],
}

/// The FP8 format AITER's asm `fp8bf16` kernels read on `processor`: gfx942's MFMA FP8 is the
/// FNUZ encoding, gfx950's the OCP one (AITER's `aiter/utility/dtypes.py` maps gfx942 to
/// `float8_e4m3fnuz` and gfx950 to `float8_e4m3fn`); no other architecture has those kernels.
pub fn aiter_fp8_format(processor: &str) -> Option<Fp8Format> {
    match processor {
        "gfx942" => Some(Fp8Format::E4M3Fnuz),
        "gfx950" => Some(Fp8Format::E4M3),
        _ => None,
    }
}

/// Head dims `(D_qk, D_v)` of AITER's asm `fp8bf16` group-mode kernels on `processor`
/// (`hsa/<arch>/fmha_v3_fwd/fmha_fwd.csv`, rows with `dtype = fp8bf16` and `mode = 1`).
pub fn aiter_fp8_head_dims(processor: &str) -> &'static [(i64, i64)] {
    match processor {
        "gfx942" => &[(128, 128)],
        "gfx950" => &[(128, 128), (256, 256)],
        _ => &[],
    }
}

/// hipDNN's spelling of a data type, which is what users wrote in their graph.
fn hipdnn_type_name(dtype: DataType) -> &'static str {
    match dtype {
        DataType::F32 => "FLOAT",
        DataType::F16 => "HALF",
        DataType::BF16 => "BFLOAT16",
        DataType::I32 => "INT32",
        DataType::I64 => "INT64",
        DataType::Fp8(Fp8Format::E4M3) => "FP8_E4M3",
        DataType::Fp8(Fp8Format::E5M2) => "FP8_E5M2",
        DataType::Fp8(Fp8Format::E4M3Fnuz) => "FP8_E4M3_FNUZ",
        DataType::Fp8(Fp8Format::E5M2Fnuz) => "FP8_E5M2_FNUZ",
    }
}

fn check_head_dim(t: &RaggedOperand, field: &'static str) -> Result<(), Decline> {
    let value = t.head_dim;
    if !(1..=MAX_HEAD_DIM).contains(&value) || value % 8 != 0 {
        return Err(Decline::new(
            t.uid,
            field,
            value,
            format!("a multiple of 8 ≤ {MAX_HEAD_DIM} (AITER CK)"),
        ));
    }
    Ok(())
}

fn index_overflow(uid: i64, what: &str, elements: i128) -> Result<(), Decline> {
    if elements >= i128::from(INDEX_LIMIT) {
        return Err(Decline::new(
            uid,
            what,
            elements,
            "below 2^31 elements (AITER indexes with int32)",
        ));
    }
    Ok(())
}

fn check_lse_range(problem: &AiterProblem) -> Result<(), Decline> {
    let heads = i128::from(problem.q.heads);
    let (batch, s_q) = (i128::from(problem.batch), i128::from(problem.s_q_max));
    let rows = i128::from(problem.q_rows_total());
    match problem.lse {
        LseLayout::None => Ok(()),
        LseLayout::Dense { uid, strides, .. } => {
            let last = (batch - 1) * i128::from(strides[0])
                + (heads - 1) * i128::from(strides[1])
                + (s_q - 1) * i128::from(strides[2]);
            index_overflow(uid, "the dense stats tensor's last index", last)
        }
        LseLayout::Ragged {
            uid, seq_stride, ..
        } => index_overflow(uid, "B · S_q_max · H_q", rows * i128::from(seq_stride)),
    }
}

fn lse_uid(lse: &LseLayout) -> Option<i64> {
    match lse {
        LseLayout::None => None,
        LseLayout::Dense { uid, .. } | LseLayout::Ragged { uid, .. } => Some(*uid),
    }
}

/// The decline of an FP8 scalar that is not a device tensor: AITER's `fp8bf16` kernels read
/// each descale through a device pointer, and the engine has no device copy of a host value.
fn device_descale(s: &Fp8Scalar, q_uid: i64) -> Result<i64, Decline> {
    match s.plan {
        ScalePlan::DeviceTensor { uid, .. } => Ok(uid),
        ScalePlan::RuntimeHostScalar { uid, .. } => Err(Decline::new(
            uid,
            format!("{} residency", s.role),
            "a runtime pass-by-value host scalar",
            "a device tensor: AITER's fp8bf16 kernels read each descale through a device pointer",
        )),
        ScalePlan::Fixed(value) => Err(Decline::new(
            q_uid,
            s.role,
            format!("a value baked into the graph ({value})"),
            "a device tensor: AITER's fp8bf16 kernels read each descale through a device pointer",
        )),
    }
}

/// FP8 forwards AITER computes as fp8-attention.md §3 defines them: Q, K, V in the format the
/// architecture's asm `fp8bf16` kernels read, per-tensor device descales, P unscaled (AITER takes
/// no `scale_s`/`descale_s`; how its kernels round P internally is left to the §5 tolerance), a
/// BFLOAT16 O with no `scale_o`, no amax outputs, and only the head dims and masks of those
/// kernels' group-mode rows, since CK's `fp8bf16` instances write no LSE and the shim never
/// sends FP8 to CK. Checked in the order a reader would fix them: types, scalars, outputs, shape.
pub fn check_fp8(
    problem: &AiterProblem,
    fp8: &Fp8Forward,
    arch: &GpuArch,
) -> Result<AiterFp8Plan, Decline> {
    let (q, v, o) = (&problem.q, &problem.v, &problem.o);
    let processor = arch.processor();
    let Some(format) = aiter_fp8_format(processor) else {
        return Err(Decline::new(
            q.uid,
            "device architecture for FP8",
            arch.full(),
            "gfx942 or gfx950 (AITER has fp8bf16 attention kernels only there)",
        ));
    };
    if fp8.input != format {
        return Err(Decline::new(
            q.uid,
            "q_tensor_uid data type",
            hipdnn_type_name(DataType::Fp8(fp8.input)),
            format!(
                "{} on {processor}: the only FP8 format AITER's fp8bf16 kernels read there",
                hipdnn_type_name(DataType::Fp8(format))
            ),
        ));
    }
    if let Some(softmax) = &fp8.softmax {
        return Err(Decline::new(
            softmax.scale_s.bound_uid().unwrap_or(q.uid),
            softmax.scale_s.role,
            "set (P quantized as round(P · scale_s), fp8-attention.md §3 step 4)",
            "unset: AITER's fp8bf16 kernels take no P scale, so they cannot quantize P this way",
        ));
    }
    match fp8.output {
        Fp8OutputPlan::Fp8 { format, scale_o } => {
            return Err(Decline::new(
                o.uid,
                "o_tensor_uid data type",
                format!(
                    "{} with {}",
                    hipdnn_type_name(DataType::Fp8(format)),
                    scale_o.role
                ),
                "BFLOAT16: AITER's fp8bf16 kernels write bf16 O and take no output scale",
            ));
        }
        Fp8OutputPlan::Wide if problem.o_dtype != DataType::BF16 => {
            return Err(Decline::new(
                o.uid,
                "o_tensor_uid data type",
                hipdnn_type_name(problem.o_dtype),
                "BFLOAT16: AITER's fp8bf16 kernels write bf16 O",
            ));
        }
        Fp8OutputPlan::Wide => {}
    }
    if let Some(amax) = fp8.amaxes().next() {
        return Err(Decline::new(
            amax.uid,
            amax.role,
            "requested",
            "unset: AITER's fp8bf16 kernels report no amax",
        ));
    }
    let descale_uids = [
        device_descale(&fp8.descale_q, q.uid)?,
        device_descale(&fp8.descale_k, q.uid)?,
        device_descale(&fp8.descale_v, q.uid)?,
    ];
    let dims = (q.head_dim, v.head_dim);
    let table = aiter_fp8_head_dims(processor);
    if !table.contains(&dims) {
        let listed: Vec<String> = table.iter().map(|(a, b)| format!("{a}/{b}")).collect();
        return Err(Decline::new(
            q.uid,
            "D_qk/D_v with FP8",
            format!("{}/{}", dims.0, dims.1),
            format!(
                "{} on {processor} (AITER's asm fp8bf16 group-mode kernels)",
                listed.join(" or ")
            ),
        ));
    }
    let bottom_right_causal = problem.mask.left.is_none()
        && problem.mask.right == Some(0)
        && problem.mask.alignment == DiagonalAlignment::BottomRight;
    if !(is_unmasked(&problem.mask) || bottom_right_causal) {
        return Err(Decline::new(
            q.uid,
            "mask with FP8",
            {
                let bound = |b: Option<i64>| b.map_or("unbounded".to_owned(), |v| v.to_string());
                format!(
                    "{:?}-aligned band (left {}, right {})",
                    problem.mask.alignment,
                    bound(problem.mask.left),
                    bound(problem.mask.right)
                )
            },
            "none or bottom-right causal: AITER's asm fp8bf16 kernels have no other mask (a \
             top-left causal mask would run the bottom-right kernel, pitfall 2)",
        ));
    }
    if let (Some(lens), Some(stats)) = (problem.seq_len_q, lse_uid(&problem.lse)) {
        return Err(Decline::new(
            stats,
            "stats_tensor_uid with FP8 and seq_len_q",
            format!("requested, with seq_len_q uid {}", lens.uid),
            "no stats with padded queries: only AITER's asm kernel runs FP8, and where it \
             writes the LSE of padded queries is not pinned (CK, which would, has no FP8 LSE)",
        ));
    }
    Ok(AiterFp8Plan { descale_uids })
}

/// The asm `fmha_fwd_v3` table (ragged-sdpa.md §7.2), as far as the engine relies on it.
fn expected_path(problem: &AiterProblem, arch: &GpuArch, use_asm_v3: bool) -> ExpectedPath {
    if problem.fp8.is_some() {
        // check_fp8 admits only the asm table's fp8bf16 rows.
        return ExpectedPath::AsmV3;
    }
    let dims = (problem.q.head_dim, problem.v.head_dim);
    let arch_ok = match arch.processor() {
        "gfx950" => dims == (128, 128) || dims == (192, 128),
        "gfx942" => dims == (128, 128),
        _ => false,
    };
    let mask_ok = is_unmasked(&problem.mask)
        || (problem.mask.left.is_none() && problem.mask.right == Some(0));
    if use_asm_v3 && arch_ok && mask_ok && problem.dtype == DataType::BF16 {
        ExpectedPath::AsmV3
    } else {
        ExpectedPath::CkTile
    }
}

/// The AITER engine's plan for `problem` on a device of architecture `arch`: the shared GPU
/// contract, then [`check_applicability`]. `shim_targets` is the shim's build target list.
pub fn plan(
    problem: &RaggedSdpaProblem,
    arch: &GpuArch,
    shim_targets: &str,
) -> Result<(AiterProblem, AiterPlan), Decline> {
    contract::check_gpu_admitting_fp8(problem)?;
    let aiter = AiterProblem::from_problem(problem);
    check_applicability(&aiter, arch, shim_targets).map(|plan| (aiter, plan))
}

/// This engine's own limits on a problem that meets the GPU contract (see [`plan`]), and the
/// settings it runs with.
pub fn check_applicability(
    problem: &AiterProblem,
    arch: &GpuArch,
    shim_targets: &str,
) -> Result<AiterPlan, Decline> {
    let (q, v) = (&problem.q, &problem.v);
    if !shim_targets
        .split([';', ',', ' '])
        .any(|t| !t.is_empty() && t.split(':').next() == Some(arch.processor()))
    {
        return Err(Decline::new(
            q.uid,
            "device architecture",
            arch.full(),
            format!("one of the AITER shim's build targets ({shim_targets})"),
        ));
    }
    let fp8 = match &problem.fp8 {
        Some(fp8) => Some(check_fp8(problem, fp8, arch)?),
        None if matches!(problem.dtype, DataType::F16 | DataType::BF16) => None,
        None => {
            return Err(Decline::new(
                q.uid,
                "data type",
                hipdnn_type_name(problem.dtype),
                "HALF or BFLOAT16 (AITER has no FLOAT FMHA)",
            ));
        }
    };
    if !problem.scale.is_finite() {
        return Err(Decline::new(
            q.uid,
            "attention scale",
            problem.scale,
            "a finite value",
        ));
    }
    check_head_dim(q, "D_qk")?;
    check_head_dim(v, "D_v")?;
    let kv_rows = i128::from(problem.batch) * i128::from(problem.s_kv_max);
    let q_rows = i128::from(problem.q_rows_total());
    for (t, rows) in [
        (&problem.q, q_rows),
        (&problem.k, kv_rows),
        (&problem.v, kv_rows),
        (&problem.o, q_rows),
    ] {
        let elements = rows * i128::from(t.seq_stride);
        index_overflow(t.uid, "B · S_max · seqStride", elements)?;
    }
    for (field, bound) in [
        ("mask left bound", problem.mask.left),
        ("mask right bound", problem.mask.right),
    ] {
        if let Some(value) = bound.filter(|v| *v < 0) {
            return Err(Decline::new(
                q.uid,
                field,
                value,
                "0 to 2^31 - 1 (AITER's window sizes; unbounded is no bound)",
            ));
        }
    }
    let top_left =
        !is_unmasked(&problem.mask) && problem.mask.alignment == DiagonalAlignment::TopLeft;
    if top_left && problem.s_q_max == 1 {
        return Err(Decline::new(
            q.uid,
            "S_q_max with a top-left mask",
            1,
            "more than one query row: AITER drops such masks for one row (pitfall 3)",
        ));
    }
    check_lse_range(problem)?;
    if let Some(uid) = lse_uid(&problem.lse) {
        let scratch = i128::from(q.heads) * i128::from(problem.q_rows_total());
        index_overflow(uid, "the LSE scratch H_q · B · S_q_max", scratch)?;
    }

    let gfx942_192 = arch.processor() == "gfx942" && (q.head_dim, v.head_dim) == (192, 128);
    let padded_stats = problem.seq_len_q.is_some() && lse_uid(&problem.lse).is_some();
    let use_asm_v3 = !top_left && !gfx942_192 && !padded_stats;
    Ok(AiterPlan {
        use_asm_v3,
        expected_path: expected_path(problem, arch, use_asm_v3),
        workspace: WorkspacePlan::for_problem(problem),
        how_v3_bf16_cvt: i32::from(fp8.is_some() && arch.processor() == "gfx942"),
        fp8,
        serving: None,
    })
}

#[cfg(test)]
#[path = "applicability_tests.rs"]
mod tests;
