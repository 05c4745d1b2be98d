//! The rules every GPU engine shares (ragged-sdpa.md §1, §4), written once.
//!
//! A GPU engine reads hipDNN's packed memory directly and computes one token start per batch for
//! a pair of tensors, so before any engine-specific limit (head dims, data types, architecture,
//! index width) the graph must satisfy the same layout contract: ragged Q, K, V, O (packed BSHD
//! with whole-token multipliers ≥ 1 by construction); pointers aligned to 16 bytes; Q and O (K
//! and V) yielding identical token starts; a stats tensor the fix-up can write; a host-readable scale; a band that fits int32.
//! Each engine's `plan()` calls [`check_gpu`] first and adds only its own limits.
//!
//! Shared token starts follow ragged-sdpa.md §4: the same aux uid **and** equal
//! `multiplier / seqStride` (compared by cross-multiplication). That settles an old difference
//! between the engines: CUDA asked for equal multipliers, AITER for proportional ones. The §4 rule
//! is AITER's; for CUDA, whose O has Q's dims and V K's, the two rules agree.
//!
//! Every failure is one [`Decline`] naming the tensor uid, the field, its value and what is
//! needed; its text is what the plugin logs at INFO and reports as NOT_APPLICABLE.

use std::fmt;

use crate::DataType;
use crate::problem::{Offsets, Operand, RaggedSdpaProblem, ScalePlan};

/// Byte alignment GPU engines require of every tensor (16-byte vector loads and stores).
pub const GPU_ALIGNMENT: i64 = 16;

/// Why a graph is not run: one tensor (or the graph itself), one field, its value, and the
/// need. The one decline type of the project: the plugin's graph checks, this contract and every
/// engine's own limits all answer with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decline {
    /// The offending tensor's uid; `None` when the field belongs to the graph, its node or the
    /// process (versions, node count, an engine that is not available).
    pub uid: Option<i64>,
    /// The field (with the SDPA role where it helps): `q_tensor_uid head stride (strides[2])`.
    pub field: String,
    /// Its value, as written in the graph.
    pub value: String,
    /// What would be accepted.
    pub need: String,
}

impl Decline {
    /// A decline of `field` of tensor `uid`.
    pub fn new(
        uid: i64,
        field: impl Into<String>,
        value: impl fmt::Display,
        need: impl Into<String>,
    ) -> Self {
        Self {
            uid: Some(uid),
            field: field.into(),
            value: value.to_string(),
            need: need.into(),
        }
    }

    /// A decline of a field of the graph, its node or the process, which no tensor owns.
    pub fn graph(
        field: impl Into<String>,
        value: impl fmt::Display,
        need: impl Into<String>,
    ) -> Self {
        Self {
            uid: None,
            ..Self::new(0, field, value, need)
        }
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(uid) = self.uid {
            write!(f, "tensor uid {uid}: ")?;
        }
        write!(f, "{} = {}, need {}", self.field, self.value, self.need)
    }
}

impl std::error::Error for Decline {}

/// Checks the shared GPU contract (module docs).
pub fn check_gpu(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    check_no_fp8(p)?;
    check_gpu_admitting_fp8(p)
}

/// [`check_gpu`] for an engine that runs some FP8 forwards itself (AITER's `fp8bf16` kernels):
/// the same layout rules, with an FP8 problem's element types left to the plugin, which checked
/// them when it built the problem (Q, K, V in one format, O in its family or 16/32-bit;
/// fp8-attention.md §1). Which FP8 problems the engine takes is its own decision.
pub fn check_gpu_admitting_fp8(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    check_no_serving_features(p)?;
    check_scale(&p.scale)?;
    for t in p.primaries() {
        ragged(t)?;
        check_alignment(t)?;
    }
    // Ragged operands are BSHD-packed with whole-token multipliers by construction (the
    // plugin's conversion of the graph is where those rules are checked).
    match p.fp8 {
        None => check_shapes(&p.q, &p.k, &p.v, &p.o)?,
        Some(_) => check_dims(&p.q, &p.k, &p.v, &p.o)?,
    }
    check_shared_token_starts(&p.q, &p.o)?;
    check_shared_token_starts(&p.k, &p.v)?;
    if let Some(stats) = &p.stats {
        check_stats(stats, &p.q)?;
    }
    check_band(p)?;
    Ok(())
}

/// Paged K/V and sinks are not part of the ragged contract: an engine that implements them plans
/// such graphs on a path of its own before calling [`check_gpu`] (the CUDA engine's paged
/// kernels, `ragged_engine_cuda::paged`; the AITER engine's gathered route,
/// `ragged_engine_aiter::serving`, which checks the graph without its sinks); for any other path
/// each such graph is declined here naming the field, before any rule about K and V (which a
/// paged graph holds as page pools) could give a misleading reason.
pub fn check_no_serving_features(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    if let Some(paged) = &p.paged {
        return Err(Decline::new(
            paged.table_k.uid,
            paged.table_k.role,
            format!(
                "a page table (paged K/V: pools uid {} and {})",
                p.k.uid, p.v.uid
            ),
            "unset: this engine does not read paged K/V caches (the host reference engine does)",
        ));
    }
    if let Some(sinks) = &p.sinks {
        return Err(Decline::new(
            sinks.uid,
            crate::problem::SINK_ROLE,
            "per-head sink logits",
            "unset: this engine does not compute attention sinks (the host reference engine does)",
        ));
    }
    Ok(())
}

/// FP8 Q, K and V (fp8-attention.md) on an engine that runs none of them (CUDA; AITER's backward):
/// declined naming Q's uid and FP8 before any other rule (whose reason, about element sizes or
/// paged pools, would hide the real one). Every such path calls this first.
pub fn check_no_fp8(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    match &p.fp8 {
        None => Ok(()),
        Some(fp8) => Err(Decline::new(
            p.q.uid,
            format!("{} data type", p.q.role),
            format!("FP8 ({})", fp8.input),
            "FLOAT, HALF or BFLOAT16: this engine does not run FP8 attention (the host \
             reference engine does)",
        )),
    }
}

fn check_scale(scale: &ScalePlan) -> Result<(), Decline> {
    match *scale {
        ScalePlan::DeviceTensor { uid, .. } => Err(Decline::new(
            uid,
            "scale_tensor_uid residency",
            "a device-resident tensor (no baked value, not runtime pass-by-value)",
            "a baked value or a runtime pass-by-value host scalar: GPU engines take the scale \
             as a host float",
        )),
        ScalePlan::Fixed(_) | ScalePlan::RuntimeHostScalar { .. } => Ok(()),
    }
}

fn ragged(t: &Operand) -> Result<&Offsets, Decline> {
    t.ragged.as_ref().ok_or_else(|| {
        Decline::new(
            t.uid,
            format!("{} layout", t.role),
            format!("dense (dims {:?})", t.dims),
            "ragged Q, K, V, O (GPU engines read hipDNN's packed ragged memory)",
        )
    })
}

/// Offsets count elements (multiplier 1) or whole tokens (multiplier a multiple of the sequence
/// stride, upstream's token-unit "AITER form"). Any other multiplier scales stored values to
/// element offsets that fall between rows: upstream sometimes writes `strides[1]`, which in the
/// `[B, H, S, D]` dims order is D, not the token stride H·D (ragged-sdpa.md §1, Units). A rule
/// of every engine, checked without reading the offsets, once: where the graph's ragged tensor
/// becomes an [`Operand`].
pub fn check_whole_tokens(t: &Operand, offsets: &Offsets) -> Result<(), Decline> {
    let seq_stride = t.seq_stride();
    let multiplier = offsets.multiplier.get();
    if multiplier == 1 || (seq_stride > 0 && multiplier % seq_stride == 0) {
        return Ok(());
    }
    Err(Decline::new(
        t.uid,
        format!(
            "{} ragged_offset_multiplier (sequence stride {seq_stride}, dims {:?}, strides {:?})",
            t.role, t.dims, t.strides
        ),
        offsets.multiplier,
        format!(
            "1 (element offsets) or a multiple of the sequence stride {seq_stride} (token \
             offsets); other multipliers do not make whole tokens"
        ),
    ))
}

fn check_alignment(t: &Operand) -> Result<(), Decline> {
    check_declared_alignment(t.uid, t.role, t.alignment, GPU_ALIGNMENT)
}

/// A tensor's declared pointer alignment is a positive multiple of `need` bytes (what a kernel's
/// loads of it assume), else a decline naming its uid and `<role> alignment`.
pub fn check_declared_alignment(
    uid: i64,
    role: &str,
    alignment: i64,
    need: i64,
) -> Result<(), Decline> {
    if alignment < need || alignment % need != 0 {
        return Err(Decline::new(
            uid,
            format!("{role} alignment"),
            alignment,
            format!("a positive multiple of {need}"),
        ));
    }
    Ok(())
}

/// Shape agreement of Q, K, V, O (ragged-sdpa.md §4: GQA, batch), a rule of every engine: the
/// plugin checks it when it builds the problem, and the GPU contract again for problems built by
/// hand.
pub fn check_shapes(q: &Operand, k: &Operand, v: &Operand, o: &Operand) -> Result<(), Decline> {
    check_dims(q, k, v, o)?;
    for t in [k, v, o] {
        if t.dtype != q.dtype {
            return Err(Decline::new(
                t.uid,
                format!("{} data type", t.role),
                format!("{:?}", t.dtype),
                format!("Q's {:?}", q.dtype),
            ));
        }
    }
    Ok(())
}

/// [`check_shapes`] without the element types: an FP8 forward's O may differ from Q's type
/// (fp8-attention.md §1.4), which the plugin checks on its own.
pub fn check_dims(q: &Operand, k: &Operand, v: &Operand, o: &Operand) -> Result<(), Decline> {
    let [b, s_q, h_q, d_qk] = q.bshd();
    let [_, s_kv, h_kv, _] = k.bshd();
    let d_v = v.head_dim();
    for (t, value, field) in [
        (q, b, "batch B"),
        (q, s_q, "S_max"),
        (k, s_kv, "S_max"),
        (q, h_q, "heads"),
        (k, h_kv, "heads"),
        (q, d_qk, "head dim"),
        (v, d_v, "head dim"),
    ] {
        if value < 1 {
            return Err(Decline::new(
                t.uid,
                format!("{} {field}", t.role),
                value,
                "at least 1",
            ));
        }
    }
    let expected = [
        (k, [b, s_kv, h_kv, d_qk], "Q's B and head dim"),
        (v, [b, s_kv, h_kv, d_v], "K's B, S_max and heads"),
        (
            o,
            [b, s_q, h_q, d_v],
            "Q's B, S_max, heads and V's head dim",
        ),
    ];
    for (t, want, why) in expected {
        if t.bshd() != want {
            return Err(Decline::new(
                t.uid,
                format!("{} [B, S, H, D]", t.role),
                format!("{:?}", t.bshd()),
                format!("{want:?} ({why})"),
            ));
        }
    }
    if h_q % h_kv != 0 {
        return Err(Decline::new(
            k.uid,
            format!("{} heads", k.role),
            h_kv,
            format!("a divisor of Q's {h_q} heads (GQA)"),
        ));
    }
    Ok(())
}

/// Packed BSHD: head-dim stride 1, head stride D, seqStride H·D (the batch stride is ignored).
/// Q and O (K and V) are addressed through one token-start array, so their offsets must describe
/// the same token boundaries: the same aux tensor and the same `multiplier / seqStride`.
fn check_shared_token_starts(a: &Operand, b: &Operand) -> Result<(), Decline> {
    let (Some(oa), Some(ob)) = (a.ragged, b.ragged) else {
        return Ok(());
    };
    if oa.uid != ob.uid {
        return Err(Decline::new(
            b.uid,
            format!("{} ragged_offset_tensor_uid", b.role),
            ob.uid,
            format!(
                "{}'s offsets uid {} (one token-start array per pair)",
                a.role, oa.uid
            ),
        ));
    }
    if i128::from(oa.multiplier.get()) * i128::from(b.seq_stride())
        != i128::from(ob.multiplier.get()) * i128::from(a.seq_stride())
    {
        return Err(Decline::new(
            b.uid,
            format!("{} multiplier/seqStride", b.role),
            format!("{}/{}", ob.multiplier, b.seq_stride()),
            format!(
                "{}'s {}/{} (identical token starts)",
                a.role,
                oa.multiplier,
                a.seq_stride()
            ),
        ));
    }
    Ok(())
}

/// The stats tensor: FLOAT, `[B, S_q_max, H_q, 1]` in its own order; dense with non-negative
/// strides, or ragged token-major packed (seqStride H_q, head stride 1) with its own offsets.
fn check_stats(stats: &Operand, q: &Operand) -> Result<(), Decline> {
    let field = |name: &str| format!("{} {name}", stats.role);
    if stats.dtype != DataType::F32 {
        return Err(Decline::new(
            stats.uid,
            field("data type"),
            format!("{:?}", stats.dtype),
            "FLOAT",
        ));
    }
    let want = [q.batch(), q.seq_max(), q.heads(), 1];
    if stats.bshd() != want {
        return Err(Decline::new(
            stats.uid,
            field("[B, S, H, 1]"),
            format!("{:?}", stats.bshd()),
            format!("{want:?} (Q's B, S_max and heads)"),
        ));
    }
    check_alignment(stats)?;
    match &stats.ragged {
        None => {
            if let Some(s) = stats.strides.iter().find(|s| **s < 0) {
                return Err(Decline::new(
                    stats.uid,
                    field(&format!("stride (strides {:?})", stats.strides)),
                    s,
                    "non-negative",
                ));
            }
        }
        Some(_) => {
            for (name, value, want) in [
                ("head stride", stats.head_stride(), 1),
                ("seqStride", stats.seq_stride(), q.heads()),
            ] {
                if value != want {
                    return Err(Decline::new(
                        stats.uid,
                        field(name),
                        value,
                        format!("{want} (packed token-major ragged stats)"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Band bounds go to the kernels as int32; a non-negative bound must fit.
fn check_band(p: &RaggedSdpaProblem) -> Result<(), Decline> {
    for (name, bound) in [("left", p.mask.left), ("right", p.mask.right)] {
        if let Some(value) = bound.filter(|v| *v > i64::from(i32::MAX)) {
            return Err(Decline::new(
                p.q.uid,
                format!("mask {name} bound"),
                value,
                "at most 2^31 - 1 (the kernels take int32 bounds)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::test_support::{dense_stats, problem, ragged};
    use crate::problem::{IndexWidth, Multiplier};

    fn declined(p: &RaggedSdpaProblem, uid: i64, field: &str) -> String {
        let text = check_gpu(p).expect_err("declined").to_string();
        assert!(text.starts_with(&format!("tensor uid {uid}: ")), "{text}");
        assert!(text.contains(field), "{text}");
        text
    }

    #[test]
    fn a_packed_problem_meets_the_contract() {
        assert_eq!(check_gpu(&problem()), Ok(()));
    }

    /// FP8 Q/K/V with a BFLOAT16 O: declined by [`check_gpu`] naming FP8, passed by the variant
    /// that leaves FP8 to the engine, which still applies every layout rule.
    #[test]
    fn fp8_is_left_to_the_engine_only_by_the_admitting_variant() {
        let p = crate::problem::test_support::fp8(2, (4, 2), (4, 2), 64);
        declined(&p, 1, "q_tensor_uid data type");
        assert_eq!(check_gpu_admitting_fp8(&p), Ok(()));
        let mut misaligned = p;
        misaligned.v.alignment = 8;
        let text = check_gpu_admitting_fp8(&misaligned)
            .expect_err("declined")
            .to_string();
        assert!(
            text.starts_with("tensor uid 3: v_tensor_uid alignment"),
            "{text}"
        );
        let mut wide = problem();
        wide.o.dtype = DataType::F16;
        let text = check_gpu_admitting_fp8(&wide)
            .expect_err("a 16-bit problem still needs one element type")
            .to_string();
        assert!(text.contains("o_tensor_uid data type"), "{text}");
    }

    #[test]
    fn the_text_names_uid_field_value_and_need() {
        let d = Decline::new(7, "q_tensor_uid alignment", 8, "a positive multiple of 16");
        assert_eq!(
            d.to_string(),
            "tensor uid 7: q_tensor_uid alignment = 8, need a positive multiple of 16"
        );
        let d = Decline::graph("nodes", 2, "exactly one SdpaAttributes node");
        assert_eq!(
            d.to_string(),
            "nodes = 2, need exactly one SdpaAttributes node"
        );
    }

    #[test]
    fn dense_primaries_and_device_scales_are_declined() {
        let mut p = problem();
        p.k.ragged = None;
        declined(&p, 2, "k_tensor_uid layout");
        let mut p = problem();
        p.scale = ScalePlan::DeviceTensor {
            uid: 30,
            data_type: crate::problem::ScalarType::Float,
        };
        let text = declined(&p, 30, "scale_tensor_uid residency");
        assert!(text.contains("device-resident"), "{text}");
    }

    #[test]
    fn alignment_must_be_a_positive_multiple_of_16() {
        for a in [0, 8, 24, -16] {
            let mut p = problem();
            p.k.alignment = a;
            let text = declined(&p, 2, "alignment");
            assert!(text.contains(&format!("= {a},")), "{text}");
        }
        let mut p = problem();
        p.k.alignment = 256;
        assert_eq!(check_gpu(&p), Ok(()));
    }

    #[test]
    fn cudnns_bhsd_dims_order_over_bshd_memory_meets_the_contract() {
        let mut p = problem();
        for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
            let [b, s, h, d] = t.dims;
            t.dims = [b, h, s, d];
            t.strides = [s * h * d, d, h * d, 1];
        }
        assert_eq!(check_gpu(&p), Ok(()));
        assert_eq!(p.q.bshd(), [3, 200, 8, 128]);
        assert_eq!(p.k.bshd(), [3, 300, 2, 128]);
    }

    #[test]
    fn token_offsets_must_be_whole_tokens() {
        // Upstream's `strides[1]` as multiplier: D = 128 in the [B, H, S, D] order, not H·D.
        let mut p = problem();
        let [b, s, h, d] = p.q.dims;
        p.q.dims = [b, h, s, d];
        p.q.strides = [s * h * d, d, h * d, 1];
        let whole = |multiplier: i64| {
            let offsets = Offsets {
                multiplier: m(multiplier),
                ..p.q.ragged.expect("ragged Q")
            };
            check_whole_tokens(&p.q, &offsets).map_err(|d| d.to_string())
        };
        let text = whole(p.q.strides[1]).err().unwrap_or_default();
        assert!(
            text.starts_with(
                "tensor uid 1: q_tensor_uid ragged_offset_multiplier (sequence stride 1024, dims \
                 [3, 8, 200, 128]"
            ),
            "{text}"
        );
        assert!(text.contains("= 128, need 1 (element offsets)"), "{text}");
        assert_eq!(whole(2048), Ok(()));
        assert_eq!(whole(1), Ok(()));
    }

    #[test]
    fn multipliers_below_1_cannot_be_made() {
        assert_eq!(Multiplier::new(0), None);
        assert_eq!(Multiplier::new(-3), None);
        assert_eq!(Multiplier::new(1), Some(Multiplier::ONE));
    }

    fn m(value: i64) -> Multiplier {
        Multiplier::new(value).expect("a test multiplier is at least 1")
    }

    #[test]
    fn o_and_v_share_the_offsets_of_q_and_k() {
        let mut p = problem();
        if let Some(o) = p.o.ragged.as_mut() {
            o.uid = 12;
        }
        let text = declined(&p, 4, "ragged_offset_tensor_uid");
        assert!(
            text.contains("= 12, need q_tensor_uid's offsets uid 10"),
            "{text}"
        );
        let mut p = problem();
        if let Some(o) = p.v.ragged.as_mut() {
            o.multiplier = m(256);
        }
        let text = declined(&p, 3, "multiplier/seqStride");
        assert!(
            text.contains("= 256/256, need k_tensor_uid's 1/256"),
            "{text}"
        );
    }

    #[test]
    fn proportional_multipliers_share_token_starts() {
        // Token-unit offsets (upstream's "AITER form"): multiplier = seqStride for Q and O.
        let mut p = problem();
        let tokens = |t: &mut Operand| {
            let stride = t.seq_stride();
            if let Some(o) = t.ragged.as_mut() {
                o.multiplier = m(stride);
            }
        };
        tokens(&mut p.q);
        tokens(&mut p.o);
        assert_eq!(check_gpu(&p), Ok(()));
        if let Some(o) = p.o.ragged.as_mut() {
            o.multiplier = m(1);
        }
        declined(&p, 4, "multiplier/seqStride");
    }

    #[test]
    fn shapes_must_agree() {
        let mut p = problem();
        p.v.dims = [3, 300, 1, 128];
        p.v.strides = [300 * 128, 128, 128, 1];
        declined(&p, 3, "[B, S, H, D]");
        let mut p = problem();
        for t in [&mut p.k, &mut p.v] {
            *t = ragged(t.role, t.uid, [3, 300, 3, 128], 11);
        }
        let text = declined(&p, 2, "heads");
        assert!(text.contains("GQA"), "{text}");
        let mut p = problem();
        p.k.dims[1] = 0;
        p.v.dims[1] = 0;
        declined(&p, 2, "S_max");
        let mut p = problem();
        p.v.dtype = DataType::F16;
        declined(&p, 3, "data type");
    }

    fn stats(ragged_stats: bool) -> Operand {
        if ragged_stats {
            let mut t = ragged("stats_tensor_uid", 9, [3, 200, 8, 1], 13);
            t.dtype = DataType::F32;
            if let Some(o) = t.ragged.as_mut() {
                o.width = IndexWidth::I64;
                o.multiplier = m(8);
            }
            t
        } else {
            dense_stats(9, [3, 8, 200, 1], [1600, 200, 1, 1])
        }
    }

    #[test]
    fn stats_layouts() {
        for r in [false, true] {
            let mut p = problem();
            p.stats = Some(stats(r));
            assert_eq!(check_gpu(&p), Ok(()));
        }
        let mut p = problem();
        p.stats = Some(Operand {
            dtype: DataType::BF16,
            ..stats(true)
        });
        declined(&p, 9, "data type");
        let mut p = problem();
        p.stats = Some(Operand {
            dims: [3, 200, 8, 1],
            ..stats(false)
        });
        declined(&p, 9, "[B, S, H, 1]");
        let mut p = problem();
        p.stats = Some(Operand {
            strides: [1600, -200, 1, 1],
            ..stats(false)
        });
        declined(&p, 9, "stride");
        let mut p = problem();
        let mut s = stats(true);
        s.strides = [1600, 64, 8, 1];
        if let Some(o) = s.ragged.as_mut() {
            o.multiplier = m(64);
        }
        p.stats = Some(s);
        declined(&p, 9, "head stride");
    }

    #[test]
    fn band_bounds_must_fit_int32() {
        let mut p = problem();
        p.mask.right = Some(i64::from(i32::MAX) + 1);
        declined(&p, 1, "mask right bound");
        p.mask.right = Some(i64::from(i32::MAX));
        assert_eq!(check_gpu(&p), Ok(()));
    }

    #[test]
    fn fp8_problems_are_declined_naming_q_and_fp8_before_anything_else() {
        let mut p = crate::problem::test_support::fp8(2, (4, 2), (4, 2), 64);
        p.sinks = Some(crate::problem::Sinks {
            uid: 30,
            heads: 2,
            stride: 1,
            rank4: false,
            alignment: 4,
        });
        let decline = check_gpu(&p).unwrap_err();
        assert_eq!(decline.uid, Some(p.q.uid));
        assert_eq!(
            decline.to_string(),
            "tensor uid 1: q_tensor_uid data type = FP8 (fp8_e4m3), need FLOAT, HALF or \
             BFLOAT16: this engine does not run FP8 attention (the host reference engine does)"
        );
    }
}
