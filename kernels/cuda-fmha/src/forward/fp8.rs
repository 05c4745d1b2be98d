//! The FP8 forward's plan (kernels/core/fp8-attention.md, `cuda/fmha/fp8_sm90.cuh`): which FP8
//! graphs the e4m3 entry points run, their scalars in the kernel's order, O's type, and the
//! workspace the transposed V and the amax partials take after the pre-pass's records.
//!
//! What runs: Q, K, V in FP8_E4M3 with head dim 64, 128 or 256 (Q/K and V/O alike); O BFLOAT16 or HALF
//! (no `scale_o`) or FP8_E4M3 with `scale_o`; descales baked, pass-by-value or device tensors;
//! with or without `scale_s`/`descale_s`; `amax_s` and `amax_o`. Declined, naming the field: the
//! other formats, FLOAT or FP8_E5M2 O, and other head dims. amax_s is the normalized maximum of P,
//! `p_top / l` of the row with the smallest `l` (`p_top` its largest weight): exactly 1 where some
//! row admits a single key (every causal graph with a sequence of equal query and key lengths), else
//! within `l`'s f32 rounding.

use super::device_abi::{self, Fp8OutputKind};
use super::geometry::{WORKSPACE_ALIGNMENT, WorkspaceLayout};
use ragged_core::contract::Decline;
use ragged_core::problem::{Fp8Forward, Fp8OutputPlan, RaggedSdpaProblem, ScalePlan};
use ragged_core::{DataType, Fp8Format};

/// Bytes of the pre-pass's counters region (`geometry::COUNTER_BYTES`), after which the FP8
/// regions start.
const COUNTER_BYTES: u64 = 48;

/// CUDA's largest grid y and z extents.
const MAX_GRID_YZ: i64 = 65_535;

/// Index of each scalar in [`Fp8Plan::scalars`], the order of `RAGGED_FP8_PARAMS`.
pub const DESCALE_Q: usize = 0;
/// `descale_k`.
pub const DESCALE_K: usize = 1;
/// `descale_v`.
pub const DESCALE_V: usize = 2;
/// `descale_s`.
pub const DESCALE_S: usize = 3;
/// `scale_s`.
pub const SCALE_S: usize = 4;
/// `scale_o`.
pub const SCALE_O: usize = 5;

/// Where the FP8 path's regions lie in the (aligned-up) workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8Workspace {
    /// The transposed V: `[D][H_kv · B · vt_blocks][vt_keys]` e4m3 codes.
    pub vt: u64,
    /// Its size in bytes.
    pub vt_bytes: u64,
    /// The amax partials (u32 each, [`device_abi::FP8_AMAX_PARTIALS`] for amax_o, then as many
    /// for amax_s), when either amax is requested.
    pub amax: Option<u64>,
}

/// The FP8 side of a forward plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Plan {
    /// O's element type.
    pub output: Fp8OutputKind,
    /// Each scalar's source, in the kernel's order ([`DESCALE_Q`] …); `None` where the graph has
    /// none (the kernel does not read it).
    pub scalars: [Option<ScalePlan>; 6],
    /// Each scalar's value where it is passed by value: baked values at plan time, pass-by-value
    /// scalars filled in per execute; ignored where the scalar is a device pointer.
    pub values: [f32; 6],
    /// Whether P is quantized with `scale_s` (both softmax scalars present).
    pub p_scaled: bool,
    /// `amax_o_tensor_uid`.
    pub amax_o: Option<i64>,
    /// `amax_s_tensor_uid`.
    pub amax_s: Option<i64>,
    /// Keys per transposed block: the entry point's BN ([`device_abi::fp8_vt_keys`]).
    pub vt_keys: i64,
    /// Transposed key blocks per (KV head, batch): ceil(S_kv_max / vt_keys).
    pub vt_blocks: i32,
    /// The regions of the workspace.
    pub workspace: Fp8Workspace,
}

/// Checks the FP8 side of `problem` against what the e4m3 entry points run; on success, the FP8
/// plan for the workspace `base` (the pre-pass's layout), whose `total_bytes` it extends.
pub(crate) fn plan_fp8(
    problem: &RaggedSdpaProblem,
    fp8: &Fp8Forward,
    base: &mut WorkspaceLayout,
) -> Result<Fp8Plan, Decline> {
    let RaggedSdpaProblem { q, k, v, o, .. } = problem;
    if fp8.input != Fp8Format::E4M3 {
        return Err(Decline::new(
            q.uid,
            format!("{} data type", q.role),
            format!("FP8 ({})", fp8.input),
            "FP8_E4M3 (the CUDA engine's FP8 forward: Hopper's e4m3 warpgroup MMA)",
        ));
    }
    let d = q.head_dim();
    let d_v = v.head_dim();
    if device_abi::ForwardKernel::select_fp8(d).is_none() || d_v != d {
        let dims: Vec<String> = device_abi::FP8_FORWARD_KERNELS
            .iter()
            .map(|(dim, _)| dim.to_string())
            .collect();
        let dims = match dims.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => dims.concat(),
        };
        let (t, value) = if d_v != d { (v, d_v) } else { (q, d) };
        return Err(Decline::new(
            t.uid,
            format!("{} head dim", t.role),
            value,
            format!("{dims} for Q, K, V and O (the compiled CUDA FP8 kernels)"),
        ));
    }
    let output = match (o.dtype, &fp8.output) {
        (DataType::BF16, Fp8OutputPlan::Wide) => Fp8OutputKind::Bf16,
        (DataType::F16, Fp8OutputPlan::Wide) => Fp8OutputKind::F16,
        (
            DataType::Fp8(Fp8Format::E4M3),
            Fp8OutputPlan::Fp8 {
                format: Fp8Format::E4M3,
                ..
            },
        ) => Fp8OutputKind::E4m3,
        (dtype, _) => {
            return Err(Decline::new(
                o.uid,
                format!("{} data type", o.role),
                format!("{dtype:?}"),
                "BFLOAT16, HALF, or FP8_E4M3 with scale_o (the CUDA FP8 forward's outputs)",
            ));
        }
    };
    let mut scalars = [None; 6];
    scalars[DESCALE_Q] = Some(fp8.descale_q.plan);
    scalars[DESCALE_K] = Some(fp8.descale_k.plan);
    scalars[DESCALE_V] = Some(fp8.descale_v.plan);
    if let Some(softmax) = &fp8.softmax {
        scalars[DESCALE_S] = Some(softmax.descale_s.plan);
        scalars[SCALE_S] = Some(softmax.scale_s.plan);
    }
    if let Fp8OutputPlan::Fp8 { scale_o, .. } = &fp8.output {
        scalars[SCALE_O] = Some(scale_o.plan);
    }
    let mut values = [1.0f32; 6];
    for (value, scalar) in values.iter_mut().zip(&scalars) {
        if let Some(ScalePlan::Fixed(baked)) = scalar {
            *value = *baked;
        }
    }

    // The transposed V: D rows of (H_kv · B · blocks) blocks of the entry point's BN keys. The
    // kernel indexes a block as an int and the tensor map's middle extent is 32-bit.
    let [b, _, _, _] = q.bshd();
    let [_, s_kv, h_kv, _] = k.bshd();
    let vt_keys = device_abi::fp8_vt_keys(d);
    let vt_blocks = (s_kv + vt_keys - 1) / vt_keys;
    let blocks = i128::from(h_kv) * i128::from(b) * i128::from(vt_blocks);
    let too_many = || {
        Decline::new(
            k.uid,
            format!("{} H_kv · B · ceil(S_max / {vt_keys})", k.role),
            blocks,
            format!("at most {} (the transposed V's block index)", i32::MAX),
        )
    };
    let blocks = i32::try_from(blocks).map_err(|_| too_many())?;
    // The transposition's grid is (key blocks, B, H_kv): y and z stop at 65535.
    for (t, what, value) in [(q, "batch B", b), (k, "heads", h_kv)] {
        if value > MAX_GRID_YZ {
            return Err(Decline::new(
                t.uid,
                format!("{} {what}", t.role),
                value,
                format!("at most {MAX_GRID_YZ} (the CUDA FP8 forward's transposition grid)"),
            ));
        }
    }
    let vt_blocks = i32::try_from(vt_blocks).map_err(|_| too_many())?;
    let align = |x: u64| x.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
    let vt = align(base.tile_count + COUNTER_BYTES);
    let vt_bytes = d.unsigned_abs() * blocks as u64 * vt_keys.unsigned_abs();
    let end = align(vt + vt_bytes);
    let amax_o = fp8.amax_o.map(|a| a.uid);
    let amax_s = fp8.amax_s.map(|a| a.uid);
    let (amax, end) = if amax_o.is_some() || amax_s.is_some() {
        (Some(end), end + 2 * device_abi::FP8_AMAX_PARTIALS * 4)
    } else {
        (None, end)
    };
    base.total_bytes = end + WORKSPACE_ALIGNMENT;
    Ok(Fp8Plan {
        output,
        scalars,
        values,
        p_scaled: fp8.softmax.is_some(),
        amax_o,
        amax_s,
        vt_keys,
        vt_blocks,
        workspace: Fp8Workspace { vt, vt_bytes, amax },
    })
}

#[cfg(test)]
#[path = "fp8_tests.rs"]
mod tests;
