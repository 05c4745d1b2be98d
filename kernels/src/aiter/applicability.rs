//! Which ragged SDPA problems the AITER engine takes (ragged-sdpa.md §4, §6, §7.2, §9).
//!
//! Everything is decided from graph metadata and the device architecture, never from tensor
//! contents: applicability runs without device memory. A declined problem is not an error (the
//! plugin answers `SUCCESS` with no engine), but the reason is logged, so each [`Decline`]
//! names the tensor uid, field and value that caused it.

use std::fmt;

use super::problem::{AiterProblem, LseLayout, RaggedAux, RaggedOperand, is_unmasked};
use super::workspace::WorkspacePlan;
use crate::{DataType, DiagonalAlignment};

/// CK tile's largest head dim (ragged-sdpa.md §6).
pub const MAX_HEAD_DIM: i64 = 256;
/// Device pointers must be aligned to a positive multiple of this (ragged-sdpa.md §4).
pub const MIN_ALIGNMENT: i64 = 16;
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

/// Why the AITER engine declines a problem. `Display` is the INFO-log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decline {
    /// FLOAT inputs: AITER has no fp32 FMHA.
    DataType {
        /// Q's uid.
        uid: i64,
        /// The data type.
        dtype: DataType,
    },
    /// A graph dim is not positive.
    EmptyDim {
        /// Which dim.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// A head dim outside CK's `D ≤ 256, D % 8 == 0`.
    HeadDim {
        /// The tensor's uid.
        uid: i64,
        /// Which head dim.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// Two tensors disagree on a dim that must match.
    Mismatch {
        /// First tensor's uid.
        uid: i64,
        /// Second tensor's uid.
        other_uid: i64,
        /// The dim.
        field: &'static str,
        /// First value.
        value: i64,
        /// Second value.
        other: i64,
    },
    /// `H_q % H_kv != 0`.
    GqaRatio {
        /// H_q.
        heads_q: i64,
        /// H_kv.
        heads_kv: i64,
    },
    /// Not packed BSHD: head-dim stride 1, head stride D, seqStride H·D.
    NotPacked {
        /// The tensor's uid.
        uid: i64,
        /// Which stride.
        field: &'static str,
        /// Declared value.
        value: i64,
        /// Packed value.
        expected: i64,
    },
    /// Q and O (or K and V) would not yield identical token starts.
    TokenStartsDiffer {
        /// First tensor's uid.
        uid: i64,
        /// Second tensor's uid.
        other_uid: i64,
        /// Why.
        detail: String,
    },
    /// `ragged_offset_multiplier < 1`.
    Multiplier {
        /// The aux tensor's uid.
        uid: i64,
        /// Its value.
        value: i64,
    },
    /// Alignment not a positive multiple of 16.
    Alignment {
        /// The tensor's uid.
        uid: i64,
        /// Its value.
        value: i64,
    },
    /// An element index could reach 2³¹ (AITER's int32 `index_t`).
    IndexOverflow {
        /// The tensor's uid (the LSE's for the scratch).
        uid: i64,
        /// What overflows.
        what: &'static str,
        /// The bound that reached 2³¹.
        elements: i64,
    },
    /// A window bound that is negative or does not fit int32.
    MaskBound {
        /// `left` or `right`.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// Top-left band with `S_q_max == 1` (pitfall 3).
    TopLeftSingleRow,
    /// A stats layout the fix-up cannot write.
    Lse {
        /// The stats tensor's uid.
        uid: i64,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// The scale is NaN or infinite.
    Scale {
        /// Its value, as text (NaN does not compare).
        value: String,
    },
    /// AITER would run no kernel, or would end the process loading one (its asm `.co` file
    /// unreadable); the shim's preflight says which (`asm_kernels`).
    NoRunnableKernel {
        /// The shim's reason.
        reason: String,
    },
    /// The shim was not built for this GPU.
    Arch {
        /// The device's `gcnArchName`.
        arch: String,
        /// The shim's build targets.
        built_for: String,
    },
}

/// hipDNN's spelling of a data type, which is what users wrote in their graph.
fn hipdnn_type_name(dtype: DataType) -> &'static str {
    match dtype {
        DataType::F32 => "FLOAT",
        DataType::F16 => "HALF",
        DataType::BF16 => "BFLOAT16",
        DataType::I32 => "INT32",
        DataType::I64 => "INT64",
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataType { uid, dtype } => write!(
                f,
                "tensor uid {uid}: data type {} has no AITER FMHA kernel (HALF and BFLOAT16 only)",
                hipdnn_type_name(*dtype)
            ),
            Self::EmptyDim { field, value } => {
                write!(f, "{field} = {value}: must be at least 1")
            }
            Self::HeadDim { uid, field, value } => write!(
                f,
                "tensor uid {uid}: {field} = {value}: AITER CK needs a head dim ≤ {MAX_HEAD_DIM} and a multiple of 8"
            ),
            Self::Mismatch {
                uid,
                other_uid,
                field,
                value,
                other,
            } => write!(
                f,
                "tensor uid {uid} has {field} = {value} but tensor uid {other_uid} has {other}"
            ),
            Self::GqaRatio { heads_q, heads_kv } => write!(
                f,
                "H_q = {heads_q} is not a multiple of H_kv = {heads_kv} (GQA needs H_q % H_kv == 0)"
            ),
            Self::NotPacked {
                uid,
                field,
                value,
                expected,
            } => write!(
                f,
                "tensor uid {uid}: {field} = {value}, packed BSHD needs {expected}"
            ),
            Self::TokenStartsDiffer {
                uid,
                other_uid,
                detail,
            } => write!(
                f,
                "tensors uid {uid} and uid {other_uid} must share token starts: {detail}"
            ),
            Self::Multiplier { uid, value } => write!(
                f,
                "offset tensor uid {uid}: ragged_offset_multiplier = {value}, must be at least 1"
            ),
            Self::Alignment { uid, value } => write!(
                f,
                "tensor uid {uid}: alignment = {value}, GPU engines need a positive multiple of {MIN_ALIGNMENT}"
            ),
            Self::IndexOverflow {
                uid,
                what,
                elements,
            } => write!(
                f,
                "tensor uid {uid}: {what} can reach {elements} elements, AITER indexes with int32 (limit 2^31)"
            ),
            Self::MaskBound { field, value } => write!(
                f,
                "mask {field} bound = {value}: must be between 0 and 2^31 - 1 (unbounded is None)"
            ),
            Self::TopLeftSingleRow => f.write_str(
                "top-left mask with S_q_max = 1: AITER drops such masks for one query row (pitfall 3)",
            ),
            Self::Lse { uid, field, value } => {
                write!(f, "stats tensor uid {uid}: {field} = {value} is not supported")
            }
            Self::Scale { value } => write!(f, "attention scale {value} is not finite"),
            Self::NoRunnableKernel { reason } => {
                write!(f, "AITER would run no kernel here: {reason}")
            }
            Self::Arch { arch, built_for } => write!(
                f,
                "device architecture {arch} is not among the AITER shim's build targets ({built_for})"
            ),
        }
    }
}

fn check_alignment(uid: i64, alignment: i64) -> Result<(), Decline> {
    if alignment <= 0 || alignment % MIN_ALIGNMENT != 0 {
        return Err(Decline::Alignment {
            uid,
            value: alignment,
        });
    }
    Ok(())
}

fn check_multiplier(aux: &RaggedAux) -> Result<(), Decline> {
    if aux.multiplier < 1 {
        return Err(Decline::Multiplier {
            uid: aux.uid,
            value: aux.multiplier,
        });
    }
    Ok(())
}

fn check_head_dim(uid: i64, field: &'static str, value: i64) -> Result<(), Decline> {
    if !(1..=MAX_HEAD_DIM).contains(&value) || value % 8 != 0 {
        return Err(Decline::HeadDim { uid, field, value });
    }
    Ok(())
}

fn check_packed(t: &RaggedOperand) -> Result<(), Decline> {
    let expected = [
        ("head-dim stride (strides[3])", t.dim_stride, 1),
        ("head stride (strides[2])", t.head_stride, t.head_dim),
        (
            "seqStride (strides[1])",
            t.seq_stride,
            t.heads.saturating_mul(t.head_dim),
        ),
    ];
    for (field, value, expected) in expected {
        if value != expected {
            return Err(Decline::NotPacked {
                uid: t.uid,
                field,
                value,
                expected,
            });
        }
    }
    Ok(())
}

fn check_same(
    a: &RaggedOperand,
    b: &RaggedOperand,
    field: &'static str,
    get: fn(&RaggedOperand) -> i64,
) -> Result<(), Decline> {
    if get(a) != get(b) {
        return Err(Decline::Mismatch {
            uid: a.uid,
            other_uid: b.uid,
            field,
            value: get(a),
            other: get(b),
        });
    }
    Ok(())
}

/// Q and O (K and V) are addressed through one int32 token-start array, so their offsets must
/// describe the same token boundaries: the same aux tensor, and the same tokens per stored unit
/// (`seqStride / multiplier`, compared by cross-multiplication to stay exact).
fn check_shared_token_starts(a: &RaggedOperand, b: &RaggedOperand) -> Result<(), Decline> {
    if a.aux.uid != b.aux.uid {
        return Err(Decline::TokenStartsDiffer {
            uid: a.uid,
            other_uid: b.uid,
            detail: format!(
                "they use different offset tensors (uid {} and uid {})",
                a.aux.uid, b.aux.uid
            ),
        });
    }
    if i128::from(a.aux.multiplier) * i128::from(b.seq_stride)
        != i128::from(b.aux.multiplier) * i128::from(a.seq_stride)
    {
        return Err(Decline::TokenStartsDiffer {
            uid: a.uid,
            other_uid: b.uid,
            detail: format!(
                "multiplier/seqStride differ ({}/{} vs {}/{})",
                a.aux.multiplier, a.seq_stride, b.aux.multiplier, b.seq_stride
            ),
        });
    }
    Ok(())
}

/// `B · S_max · seqStride`: the largest element index a ragged tensor can need.
fn check_index_range(t: &RaggedOperand, batch: i64, s_max: i64) -> Result<(), Decline> {
    let elements = i128::from(batch) * i128::from(s_max) * i128::from(t.seq_stride);
    if elements >= i128::from(INDEX_LIMIT) {
        return Err(Decline::IndexOverflow {
            uid: t.uid,
            what: "B · S_max · seqStride",
            elements: i64::try_from(elements).unwrap_or(i64::MAX),
        });
    }
    Ok(())
}

fn check_mask_bound(field: &'static str, bound: Option<i64>) -> Result<(), Decline> {
    match bound {
        Some(value) if !(0..INDEX_LIMIT).contains(&value) => {
            Err(Decline::MaskBound { field, value })
        }
        _ => Ok(()),
    }
}

fn check_lse(problem: &AiterProblem) -> Result<(), Decline> {
    let heads = problem.q.heads;
    match problem.lse {
        LseLayout::None => Ok(()),
        LseLayout::Dense {
            uid,
            strides,
            alignment,
        } => {
            check_alignment(uid, alignment)?;
            for (field, value) in [
                ("strides[0]", strides[0]),
                ("strides[1]", strides[1]),
                ("strides[2]", strides[2]),
            ] {
                if value < 0 {
                    return Err(Decline::Lse { uid, field, value });
                }
            }
            let last = i128::from(problem.batch - 1) * i128::from(strides[0])
                + i128::from(heads - 1) * i128::from(strides[1])
                + i128::from(problem.s_q_max - 1) * i128::from(strides[2]);
            if last >= i128::from(INDEX_LIMIT) {
                return Err(Decline::IndexOverflow {
                    uid,
                    what: "the dense stats tensor's last index",
                    elements: i64::try_from(last).unwrap_or(i64::MAX),
                });
            }
            Ok(())
        }
        LseLayout::Ragged {
            uid,
            seq_stride,
            head_stride,
            aux,
            alignment,
        } => {
            check_alignment(uid, alignment)?;
            check_multiplier(&aux)?;
            if head_stride != 1 {
                return Err(Decline::Lse {
                    uid,
                    field: "head stride (strides[2]), packed needs 1",
                    value: head_stride,
                });
            }
            if seq_stride != heads {
                return Err(Decline::Lse {
                    uid,
                    field: "seqStride (strides[1]), packed needs H_q",
                    value: seq_stride,
                });
            }
            let elements =
                i128::from(problem.batch) * i128::from(problem.s_q_max) * i128::from(seq_stride);
            if elements >= i128::from(INDEX_LIMIT) {
                return Err(Decline::IndexOverflow {
                    uid,
                    what: "B · S_q_max · H_q",
                    elements: i64::try_from(elements).unwrap_or(i64::MAX),
                });
            }
            Ok(())
        }
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

/// Decides whether the AITER engine runs `problem` on a device of architecture `arch`, and
/// with which settings. `shim_targets` is the shim's build target list (`gfx942;gfx950`).
pub fn check_applicability(
    problem: &AiterProblem,
    arch: &GpuArch,
    shim_targets: &str,
) -> Result<AiterPlan, Decline> {
    if !shim_targets
        .split([';', ',', ' '])
        .any(|t| !t.is_empty() && t.split(':').next() == Some(arch.processor()))
    {
        return Err(Decline::Arch {
            arch: arch.full().to_owned(),
            built_for: shim_targets.to_owned(),
        });
    }
    let (q, k, v, o) = (&problem.q, &problem.k, &problem.v, &problem.o);
    if !matches!(problem.dtype, DataType::F16 | DataType::BF16) {
        return Err(Decline::DataType {
            uid: q.uid,
            dtype: problem.dtype,
        });
    }
    for (field, value) in [
        ("B", problem.batch),
        ("S_q_max", problem.s_q_max),
        ("S_kv_max", problem.s_kv_max),
        ("H_q", q.heads),
        ("H_kv", k.heads),
    ] {
        if value < 1 {
            return Err(Decline::EmptyDim { field, value });
        }
    }
    if !problem.scale.is_finite() {
        return Err(Decline::Scale {
            value: problem.scale.to_string(),
        });
    }
    check_head_dim(q.uid, "D_qk", q.head_dim)?;
    check_head_dim(v.uid, "D_v", v.head_dim)?;
    check_same(q, k, "head dim", |t| t.head_dim)?;
    check_same(v, o, "head dim", |t| t.head_dim)?;
    check_same(k, v, "heads (AITER takes one KV head count)", |t| t.heads)?;
    check_same(q, o, "heads", |t| t.heads)?;
    if q.heads % k.heads != 0 {
        return Err(Decline::GqaRatio {
            heads_q: q.heads,
            heads_kv: k.heads,
        });
    }
    for t in [q, k, v, o] {
        check_alignment(t.uid, t.alignment)?;
        check_multiplier(&t.aux)?;
        check_packed(t)?;
    }
    check_shared_token_starts(q, o)?;
    check_shared_token_starts(k, v)?;
    for (t, s_max) in [
        (q, problem.s_q_max),
        (k, problem.s_kv_max),
        (v, problem.s_kv_max),
        (o, problem.s_q_max),
    ] {
        check_index_range(t, problem.batch, s_max)?;
    }
    check_mask_bound("left", problem.mask.left)?;
    check_mask_bound("right", problem.mask.right)?;
    let top_left =
        !is_unmasked(&problem.mask) && problem.mask.alignment == DiagonalAlignment::TopLeft;
    if top_left && problem.s_q_max == 1 {
        return Err(Decline::TopLeftSingleRow);
    }
    check_lse(problem)?;
    if let Some(uid) = lse_uid(&problem.lse) {
        let scratch = i128::from(q.heads) * i128::from(problem.batch) * i128::from(problem.s_q_max);
        if scratch >= i128::from(INDEX_LIMIT) {
            return Err(Decline::IndexOverflow {
                uid,
                what: "the LSE scratch H_q · B · S_q_max",
                elements: i64::try_from(scratch).unwrap_or(i64::MAX),
            });
        }
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
mod tests {
    use super::*;
    use crate::MaskBand;
    use crate::aiter::fixtures::{base_problem, operand};
    use crate::aiter::problem::IndexWidth;

    const TARGETS: &str = "gfx942;gfx950";

    fn gfx942() -> GpuArch {
        GpuArch::new("gfx942:sramecc+:xnack-")
    }

    fn decline(p: &AiterProblem) -> Decline {
        check_applicability(p, &gfx942(), TARGETS).expect_err("must decline")
    }

    #[test]
    fn bf16_128_unmasked_on_gfx942_is_taken_and_expected_on_asm() {
        let plan = check_applicability(&base_problem(), &gfx942(), TARGETS).expect("taken");
        assert!(plan.use_asm_v3);
        assert_eq!(plan.expected_path, ExpectedPath::AsmV3);
    }

    #[test]
    fn fp16_is_taken_on_ck() {
        let p = AiterProblem {
            dtype: DataType::F16,
            ..base_problem()
        };
        let plan = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
        assert_eq!(plan.expected_path, ExpectedPath::CkTile);
        assert!(plan.use_asm_v3, "AITER is left to fall back by itself");
    }

    #[test]
    fn top_left_masks_never_use_asm() {
        let p = AiterProblem {
            mask: MaskBand {
                left: None,
                right: Some(0),
                alignment: DiagonalAlignment::TopLeft,
            },
            ..base_problem()
        };
        let plan = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
        assert!(
            !plan.use_asm_v3,
            "pitfall 2: asm treats top-left as bottom-right"
        );
        assert_eq!(plan.expected_path, ExpectedPath::CkTile);
    }

    #[test]
    fn bottom_right_causal_stays_on_asm_but_a_window_goes_to_ck() {
        let causal = AiterProblem {
            mask: MaskBand {
                left: None,
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight,
            },
            ..base_problem()
        };
        let plan = check_applicability(&causal, &gfx942(), TARGETS).expect("taken");
        assert_eq!(
            (plan.use_asm_v3, plan.expected_path),
            (true, ExpectedPath::AsmV3)
        );
        let window = AiterProblem {
            mask: MaskBand {
                left: Some(3),
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight,
            },
            ..base_problem()
        };
        let plan = check_applicability(&window, &gfx942(), TARGETS).expect("taken");
        assert_eq!(plan.expected_path, ExpectedPath::CkTile);
    }

    fn d192_128() -> AiterProblem {
        let mut p = base_problem();
        p.q = operand(1, 4, 192, 10);
        p.k = operand(2, 2, 192, 11);
        // Q/O and K/V share offsets in token units: multiplier = seqStride keeps them equal.
        p.q.aux.multiplier = 4 * 192;
        p.o.aux.multiplier = 4 * 128;
        p.k.aux.multiplier = 2 * 192;
        p.v.aux.multiplier = 2 * 128;
        p
    }

    #[test]
    fn d192_128_uses_asm_on_gfx950_only() {
        let p = d192_128();
        let on_950 = check_applicability(&p, &GpuArch::new("gfx950"), TARGETS).expect("taken");
        assert_eq!(
            (on_950.use_asm_v3, on_950.expected_path),
            (true, ExpectedPath::AsmV3)
        );
        let on_942 = check_applicability(&p, &gfx942(), TARGETS).expect("taken");
        assert_eq!(
            (on_942.use_asm_v3, on_942.expected_path),
            (false, ExpectedPath::CkTile)
        );
    }

    #[test]
    fn q_and_o_of_different_head_dims_share_token_starts_through_multipliers() {
        let mut p = d192_128();
        p.o.aux.multiplier = 4 * 192;
        let d = decline(&p);
        assert!(
            d.to_string()
                .contains("multiplier/seqStride differ (768/768 vs 768/512)"),
            "{d}"
        );
    }

    #[test]
    fn padded_queries_with_stats_stay_off_asm() {
        use crate::aiter::problem::SeqLens;
        let seq_len_q = Some(SeqLens {
            uid: 30,
            width: IndexWidth::I32,
        });
        let dense = LseLayout::Dense {
            uid: 9,
            strides: [32, 8, 1, 1],
            alignment: 16,
        };
        let padded = AiterProblem {
            seq_len_q,
            ..base_problem()
        };
        let plan = check_applicability(&padded, &gfx942(), TARGETS).expect("taken");
        assert!(
            plan.use_asm_v3,
            "no stats: the LSE index question does not arise"
        );
        let with_stats = AiterProblem {
            lse: dense,
            ..padded
        };
        let plan = check_applicability(&with_stats, &gfx942(), TARGETS).expect("taken");
        assert_eq!(
            (plan.use_asm_v3, plan.expected_path),
            (false, ExpectedPath::CkTile)
        );
    }

    #[test]
    fn fp32_is_declined_naming_q() {
        let p = AiterProblem {
            dtype: DataType::F32,
            ..base_problem()
        };
        assert_eq!(
            decline(&p).to_string(),
            "tensor uid 1: data type FLOAT has no AITER FMHA kernel (HALF and BFLOAT16 only)"
        );
    }

    #[test]
    fn head_dims_outside_ck_are_declined() {
        for d in [264, 100, 0] {
            let mut p = base_problem();
            p.v = operand(3, 2, d, 11);
            p.o = operand(4, 4, d, 10);
            let text = decline(&p).to_string();
            assert!(
                text.starts_with(&format!("tensor uid 3: D_v = {d}:")),
                "{text}"
            );
        }
    }

    #[test]
    fn gqa_and_kv_head_rules() {
        let mut p = base_problem();
        p.q = operand(1, 3, 128, 10);
        p.o = operand(4, 3, 128, 10);
        assert_eq!(
            decline(&p),
            Decline::GqaRatio {
                heads_q: 3,
                heads_kv: 2
            }
        );
        let mut p = base_problem();
        p.v = operand(3, 1, 128, 11);
        assert!(
            decline(&p).to_string().starts_with(
                "tensor uid 2 has heads (AITER takes one KV head count) = 2 but tensor uid 3 has 1"
            ),
            "pitfall 15"
        );
    }

    #[test]
    fn unpacked_layouts_are_declined_with_the_stride() {
        let mut p = base_problem();
        p.k.head_stride = 256;
        assert_eq!(
            decline(&p).to_string(),
            "tensor uid 2: head stride (strides[2]) = 256, packed BSHD needs 128"
        );
        let mut p = base_problem();
        p.o.seq_stride = 1024;
        assert!(
            decline(&p)
                .to_string()
                .contains("seqStride (strides[1]) = 1024, packed BSHD needs 512")
        );
    }

    #[test]
    fn q_and_o_on_different_offset_tensors_are_declined() {
        let mut p = base_problem();
        p.o.aux.uid = 12;
        assert_eq!(
            decline(&p).to_string(),
            "tensors uid 1 and uid 4 must share token starts: they use different offset tensors (uid 10 and uid 12)"
        );
    }

    #[test]
    fn multiplier_and_alignment_rules() {
        let mut p = base_problem();
        p.k.aux.multiplier = 0;
        p.v.aux.multiplier = 0;
        assert_eq!(
            decline(&p).to_string(),
            "offset tensor uid 11: ragged_offset_multiplier = 0, must be at least 1"
        );
        let mut p = base_problem();
        p.v.alignment = 8;
        assert_eq!(
            decline(&p).to_string(),
            "tensor uid 3: alignment = 8, GPU engines need a positive multiple of 16"
        );
    }

    #[test]
    fn element_indices_reaching_2_pow_31_are_declined() {
        let mut p = base_problem();
        p.batch = 4096;
        p.s_kv_max = 1024; // 4096 · 1024 · 256 = 2^30: fine
        assert!(check_applicability(&p, &gfx942(), TARGETS).is_ok());
        p.s_kv_max = 2048; // 2^31
        assert_eq!(
            decline(&p),
            Decline::IndexOverflow {
                uid: 2,
                what: "B · S_max · seqStride",
                elements: 1 << 31
            }
        );
    }

    #[test]
    fn top_left_with_one_query_row_is_declined() {
        let p = AiterProblem {
            s_q_max: 1,
            mask: MaskBand {
                left: None,
                right: Some(0),
                alignment: DiagonalAlignment::TopLeft,
            },
            ..base_problem()
        };
        assert_eq!(decline(&p), Decline::TopLeftSingleRow);
        let br = AiterProblem {
            mask: MaskBand {
                alignment: DiagonalAlignment::BottomRight,
                ..p.mask
            },
            ..p
        };
        assert!(check_applicability(&br, &gfx942(), TARGETS).is_ok());
    }

    #[test]
    fn negative_mask_bounds_are_declined() {
        let p = AiterProblem {
            mask: MaskBand {
                left: Some(-2),
                right: None,
                alignment: DiagonalAlignment::BottomRight,
            },
            ..base_problem()
        };
        assert_eq!(
            decline(&p).to_string(),
            "mask left bound = -2: must be between 0 and 2^31 - 1 (unbounded is None)"
        );
    }

    #[test]
    fn stats_layouts() {
        let dense = AiterProblem {
            lse: LseLayout::Dense {
                uid: 9,
                strides: [32, 8, 1, 1],
                alignment: 16,
            },
            ..base_problem()
        };
        let plan = check_applicability(&dense, &gfx942(), TARGETS).expect("taken");
        assert!(plan.workspace.lse_scratch.is_some());
        let ragged = |seq_stride, head_stride| AiterProblem {
            lse: LseLayout::Ragged {
                uid: 9,
                seq_stride,
                head_stride,
                aux: RaggedAux {
                    uid: 13,
                    width: IndexWidth::I64,
                    multiplier: 1,
                },
                alignment: 16,
            },
            ..base_problem()
        };
        assert!(check_applicability(&ragged(4, 1), &gfx942(), TARGETS).is_ok());
        assert_eq!(
            decline(&ragged(4, 8)).to_string(),
            "stats tensor uid 9: head stride (strides[2]), packed needs 1 = 8 is not supported"
        );
        let negative = AiterProblem {
            lse: LseLayout::Dense {
                uid: 9,
                strides: [32, -8, 1, 1],
                alignment: 16,
            },
            ..base_problem()
        };
        assert_eq!(
            decline(&negative),
            Decline::Lse {
                uid: 9,
                field: "strides[1]",
                value: -8
            }
        );
    }

    #[test]
    fn an_arch_the_shim_was_not_built_for_is_declined() {
        let d = check_applicability(&base_problem(), &GpuArch::new("gfx90a:xnack-"), TARGETS)
            .expect_err("not built");
        assert_eq!(
            d.to_string(),
            "device architecture gfx90a:xnack- is not among the AITER shim's build targets (gfx942;gfx950)"
        );
    }

    #[test]
    fn empty_dims_and_bad_scales_are_declined() {
        let p = AiterProblem {
            batch: 0,
            ..base_problem()
        };
        assert_eq!(decline(&p).to_string(), "B = 0: must be at least 1");
        let p = AiterProblem {
            scale: f32::NAN,
            ..base_problem()
        };
        assert_eq!(decline(&p).to_string(), "attention scale NaN is not finite");
    }
}
