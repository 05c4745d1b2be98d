//! Which ragged SDPA problems the AITER engine takes (ragged-sdpa.md §4, §6, §7.2, §9).
//!
//! Everything is decided from graph metadata and the device architecture, never from tensor
//! contents: applicability runs without device memory. A declined problem is not an error (the
//! plugin answers `SUCCESS` with no engine), but the reason is logged, so each [`Decline`]
//! names the tensor uid, field, value and need that caused it.
//!
//! [`plan`] checks the shared GPU contract ([`ragged_core::contract::check_gpu`]) and then this
//! engine's own limits ([`check_applicability`]): HALF/BFLOAT16, CK's head dims, one index width
//! (int32 `index_t`), the shim's build targets and AITER's mask quirks.

use std::fmt;

use super::problem::{AiterProblem, LseLayout, RaggedOperand, is_unmasked};
use super::workspace::WorkspacePlan;
use ragged_core::contract::{self, Decline};
use ragged_core::problem::RaggedSdpaProblem;
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
    /// asm `fmha_fwd_v3` (bf16, D 128/128 on gfx942/gfx950, 192/128 on gfx950; no window).
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
        } => index_overflow(
            uid,
            "B · S_q_max · H_q",
            batch * s_q * i128::from(seq_stride),
        ),
    }
}

fn lse_uid(lse: &LseLayout) -> Option<i64> {
    match lse {
        LseLayout::None => None,
        LseLayout::Dense { uid, .. } | LseLayout::Ragged { uid, .. } => Some(*uid),
    }
}

/// The asm `fmha_fwd_v3` table (ragged-sdpa.md §7.2), as far as the engine relies on it.
fn expected_path(problem: &AiterProblem, arch: &GpuArch, use_asm_v3: bool) -> ExpectedPath {
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
    contract::check_gpu(problem)?;
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
    if !matches!(problem.dtype, DataType::F16 | DataType::BF16) {
        return Err(Decline::new(
            q.uid,
            "data type",
            hipdnn_type_name(problem.dtype),
            "HALF or BFLOAT16 (AITER has no FLOAT FMHA)",
        ));
    }
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
    for (t, s_max) in [
        (&problem.q, problem.s_q_max),
        (&problem.k, problem.s_kv_max),
        (&problem.v, problem.s_kv_max),
        (&problem.o, problem.s_q_max),
    ] {
        let elements = i128::from(problem.batch) * i128::from(s_max) * i128::from(t.seq_stride);
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
        let scratch = i128::from(q.heads) * i128::from(problem.batch) * i128::from(problem.s_q_max);
        index_overflow(uid, "the LSE scratch H_q · B · S_q_max", scratch)?;
    }

    let gfx942_192 = arch.processor() == "gfx942" && (q.head_dim, v.head_dim) == (192, 128);
    let padded_stats = problem.seq_len_q.is_some() && lse_uid(&problem.lse).is_some();
    let use_asm_v3 = !top_left && !gfx942_192 && !padded_stats;
    Ok(AiterPlan {
        use_asm_v3,
        expected_path: expected_path(problem, arch, use_asm_v3),
        workspace: WorkspacePlan::for_problem(problem),
    })
}

#[cfg(test)]
#[path = "applicability_tests.rs"]
mod tests;
