//! Plan-time checks and launch arguments of the CUDA SDPA backward.
//!
//! Q, K, V, O and the LSE are planned exactly as the forward plans them ([`crate::forward::plan()`]:
//! the GPU contract, packed ragged memory in either dims order, offsets and seq_lens read on the
//! device, the stats layouts the forward writes), so a backward reads its forward's tensors the
//! way the forward wrote them. The gradients must be packed ragged like their primals and share
//! their primal's token starts (one token-start array for Q, O, dO, dQ and one for K, V, dK, dV);
//! the backward kernels exist for bf16 and fp16 at every head dim pair the forward runs
//! ([`device_abi::HEAD_DIMS`]: 64, 96, 128 and 256 with D_qk = D_v, and D_qk 192 with D_v 128).
//!
//! [`DqForm`] says how dQ is summed: [`plan()`] gives the deterministic form (the engine
//! `RAGGED_SDPA_CUDA_FMHA`), [`plan_with_form`] also the unordered one (its non-deterministic
//! twin), which accepts exactly the same problems and reserves a larger workspace.

use super::device_abi::{self, BackwardKernels, MIN_DQ_BLOCK_M};
use super::fused_abi::{FUSED_BLOCK_M, blob_stride_floats};
use crate::forward::device_abi::{RAGGED_BATCH_BYTES, TILE_ENTRY_BYTES};
use crate::forward::geometry::WORKSPACE_ALIGNMENT;
use crate::forward::plan::{FmhaPlan, RowStrides};
use ragged_core::DataType;
use ragged_core::contract::{self, Decline};
#[cfg(test)]
use ragged_core::problem::Offsets;
use ragged_core::problem::{Operand, RaggedSdpaProblem, ScalePlan};

/// The gradient operands of a backward node: dO (input) and dQ, dK, dV (outputs).
#[derive(Debug, Clone, Copy)]
pub struct Gradients<'a> {
    /// The gradient flowing into O.
    pub d_o: &'a Operand,
    /// The gradient of Q.
    pub dq: &'a Operand,
    /// The gradient of K.
    pub dk: &'a Operand,
    /// The gradient of V.
    pub dv: &'a Operand,
}

/// Byte offsets of the backward's scratch inside the (aligned-up) workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardWorkspace {
    /// `RaggedBatch[B]` (the forward pre-pass's records).
    pub batches: u64,
    /// The dQ kernel's tile list, `int2[B · ceil(S_q_max / BM)]`.
    pub tiles: u64,
    /// `int tile_count`.
    pub tile_count: u64,
    /// `u32 err_flag`.
    pub error_flag: u64,
    /// Di, `f32[B · H_q · di_rows]`, row `i` of (batch `b`, query head `h`) at
    /// `(b · H_q + h) · di_rows + i`.
    pub di: u64,
    /// The LSE times log2(e) in Di's layout, right after Di (`di + 4 · B · H_q · di_rows`: the
    /// kernels derive it from Di's address), written by the Di pass for the TMA dK/dV kernel.
    pub lse2: u64,
    /// Rows of Di and of the scaled LSE per (batch, query head): S_q_max rounded up to
    /// [`DI_ROW_BLOCK`].
    pub di_rows: i32,
    /// The fused kernels' f32 dQ accumulator, one blob of [`blob_stride_floats`] per (query head,
    /// batch, block of `FUSED_BLOCK_M` query rows), then one i32 turn counter per blob (the
    /// ordered kernel's), all zeroed by the Di pass of every call. Both forms have it: the plan
    /// does not know whether the target runs a fused kernel or the pair, which leaves it unused.
    pub dq_acc: u64,
    /// Bytes to request, including slack for aligning the base pointer.
    pub total_bytes: u64,
}

/// How an execute sums each query row's dQ over the key tiles that reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DqForm {
    /// The same inputs give the same bits on every call: on sm_90a the fused kernel adding the
    /// contributions to each block of dQ in a fixed order of key tiles, elsewhere the dK/dV kernel
    /// and a separate dQ kernel, each output row written by one block.
    Deterministic,
    /// On sm_90a, the fused dK/dV/dQ kernel adding each key tile's dQ contribution into an f32
    /// workspace accumulator in whatever order the blocks get there, then a convert pass writes
    /// dQ: not bitwise reproducible. Other targets have no fused kernel and run the deterministic
    /// pair.
    Unordered,
}

/// Everything an execute needs, derived from the graph once.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardPlan {
    /// The forward's plan of Q, K, V, O and the LSE (offsets, seq_lens, band, scale); always
    /// with an LSE.
    pub forward: FmhaPlan,
    /// The entry points.
    pub kernels: BackwardKernels,
    /// Row strides of dO.
    pub d_o: RowStrides,
    /// Row strides of dQ.
    pub dq: RowStrides,
    /// Row strides of dK.
    pub dk: RowStrides,
    /// Row strides of dV.
    pub dv: RowStrides,
    /// uids of dO, dQ, dK, dV for pointer errors.
    pub gradient_uids: [i64; 4],
    /// How dQ is summed.
    pub dq_form: DqForm,
    /// Scratch layout.
    pub workspace: BackwardWorkspace,
}

impl BackwardPlan {
    /// Bytes of workspace the caller must provide.
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.total_bytes
    }
}

/// Checks a backward problem against the GPU contract and what the backward kernels support,
/// and derives the launch arguments of the deterministic form; every refusal names uid, field,
/// value and need.
pub fn plan(forward: &RaggedSdpaProblem, g: Gradients<'_>) -> Result<BackwardPlan, Decline> {
    plan_with_form(forward, g, DqForm::Deterministic)
}

/// [`plan()`] for either [`DqForm`]: the same checks and declines, the form's workspace.
pub fn plan_with_form(
    forward: &RaggedSdpaProblem,
    g: Gradients<'_>,
    dq_form: DqForm,
) -> Result<BackwardPlan, Decline> {
    let fwd = crate::forward::plan(forward)?;
    let q = &forward.q;
    let [b, s_q, h_q, d_qk] = q.bshd();
    let kernels = backward_kernels(forward)?;
    if fwd.lse.is_none() {
        return Err(Decline::graph(
            "stats_tensor_uid",
            "unset",
            "the forward's LSE: the backward recomputes P from it",
        ));
    }
    // The gradients as a forward problem's Q, K, V, O: the same contract (ragged, packed, aligned,
    // shapes, dO/dQ and dK/dV sharing token starts), with nothing else to check.
    let carrier = RaggedSdpaProblem {
        q: *g.dq,
        k: *g.dk,
        v: *g.dv,
        o: *g.d_o,
        stats: None,
        seq_len_q: None,
        seq_len_kv: None,
        scale: ScalePlan::Fixed(1.0),
        mask: forward.mask,
        paged: None,
        sinks: None,
        fp8: None,
    };
    for (primal, gradient) in [
        (q, g.dq),
        (q, g.d_o),
        (&forward.k, g.dk),
        (&forward.k, g.dv),
    ] {
        same_token_starts(primal, gradient)?;
    }
    contract::check_gpu(&carrier)?;
    for (primal, gradient) in [
        (q, g.dq),
        (&forward.o, g.d_o),
        (&forward.k, g.dk),
        (&forward.v, g.dv),
    ] {
        if gradient.dtype != primal.dtype || gradient.bshd() != primal.bshd() {
            return Err(Decline::new(
                gradient.uid,
                format!("{} data type and [B, S, H, D]", gradient.role),
                format!("{:?} {:?}", gradient.dtype, gradient.bshd()),
                format!(
                    "{:?} {:?}, as {} uid {}",
                    primal.dtype,
                    primal.bshd(),
                    primal.role,
                    primal.uid
                ),
            ));
        }
    }
    let workspace = workspace(b, s_q, h_q, d_qk).ok_or_else(|| {
        Decline::new(
            q.uid,
            format!("{} backward workspace (B · H_q · S_max)", q.role),
            format!("{b} · {h_q} · {s_q}"),
            "a workspace size that fits in 64 bits, S_max rounded up to 64 below 2^31",
        )
    })?;
    let strides = |t: &Operand| RowStrides {
        seq: t.seq_stride(),
        head: t.head_stride(),
    };
    Ok(BackwardPlan {
        forward: fwd,
        kernels,
        d_o: strides(g.d_o),
        dq: strides(g.dq),
        dk: strides(g.dk),
        dv: strides(g.dv),
        gradient_uids: [g.d_o.uid, g.dq.uid, g.dk.uid, g.dv.uid],
        dq_form,
        workspace,
    })
}

/// The compiled kernels for the problem's data type and head dims; a refusal names Q for its data
/// type or a Q/K head dim without kernels, V for a V/O head dim that none pairs with Q's.
fn backward_kernels(forward: &RaggedSdpaProblem) -> Result<BackwardKernels, Decline> {
    let (q, v) = (&forward.q, &forward.v);
    let (d, d_v) = (q.head_dim(), v.head_dim());
    if let Some(kernels) = device_abi::kernels(q.dtype, d, d_v) {
        return Ok(kernels);
    }
    if !matches!(q.dtype, DataType::BF16 | DataType::F16) {
        return Err(Decline::new(
            q.uid,
            format!("{} data type", q.role),
            format!("{:?}", q.dtype),
            "BF16 or F16 (the compiled CUDA backward kernels)",
        ));
    }
    let (uid, role, value) = if device_abi::HEAD_DIMS.iter().any(|&(dq, _)| dq == d) {
        (v.uid, v.role, d_v)
    } else {
        (q.uid, q.role, d)
    };
    Err(Decline::new(
        uid,
        format!("{role} head dim"),
        value,
        HEAD_DIMS_NEED,
    ))
}

/// What a head dim refusal asks for: the pairs of [`device_abi::HEAD_DIMS`].
const HEAD_DIMS_NEED: &str = "64, 96, 128 or 256 with Q, K, V and O alike, or Q/K 192 with \
     V/O 128 (the compiled CUDA backward kernels)";

/// A gradient is addressed through its primal's token starts: the same offsets tensor and the
/// same `multiplier / seqStride`.
fn same_token_starts(primal: &Operand, gradient: &Operand) -> Result<(), Decline> {
    let (Some(p), Some(g)) = (primal.ragged, gradient.ragged) else {
        return Ok(()); // the contract declined dense operands already
    };
    if p.uid != g.uid {
        return Err(Decline::new(
            gradient.uid,
            format!("{} ragged_offset_tensor_uid", gradient.role),
            g.uid,
            format!(
                "{}'s offsets uid {} (the backward reads a gradient through its primal's token starts)",
                primal.role, p.uid
            ),
        ));
    }
    if i128::from(p.multiplier.get()) * i128::from(gradient.seq_stride())
        != i128::from(g.multiplier.get()) * i128::from(primal.seq_stride())
    {
        return Err(Decline::new(
            gradient.uid,
            format!("{} multiplier/seqStride", gradient.role),
            format!("{}/{}", g.multiplier, gradient.seq_stride()),
            format!(
                "{}'s {}/{} (identical token starts)",
                primal.role,
                p.multiplier,
                primal.seq_stride()
            ),
        ));
    }
    Ok(())
}

/// Di and the scaled LSE keep S_q_max rounded up to this many rows per (batch, query head), the
/// TMA dK/dV kernel's query tile of 64 rows (`RAGGED_BWD_DI_ROWS`): each of its tiles is then one bulk copy
/// of each array, 16-byte aligned, the rows past a batch's Lq zeros written by the Di pass (a
/// 128-row tile copies the one or two blocks of 64 that hold rows < Lq).
pub const DI_ROW_BLOCK: u64 = 64;
// Di's size is then a multiple of the region alignment, so the scaled LSE follows it with no gap.
const _: () = assert!((DI_ROW_BLOCK * 4).is_multiple_of(WORKSPACE_ALIGNMENT));

/// The scratch layout for B batches of at most `s_q` query rows, `h_q` heads and Q/K head dim
/// `d_qk`, with the pre-pass's tile list sized for the smallest dQ tile and the dQ accumulator (a
/// blob of [`blob_stride_floats`] f32 and a turn counter per head and block of 64 query rows of
/// each batch); `None` if it overflows.
pub fn workspace(b: i64, s_q: i64, h_q: i64, d_qk: i64) -> Option<BackwardWorkspace> {
    let (b, s_q, h_q) = (b.max(0) as u64, s_q.max(0) as u64, h_q.max(0) as u64);
    let align = |x: u64| x.checked_next_multiple_of(WORKSPACE_ALIGNMENT);
    let tiles_per_batch = s_q.div_ceil(MIN_DQ_BLOCK_M as u64);
    let tiles = align(b.checked_mul(RAGGED_BATCH_BYTES)?)?;
    let counters = align(
        tiles.checked_add(
            b.checked_mul(tiles_per_batch)?
                .checked_mul(TILE_ENTRY_BYTES)?,
        )?,
    )?;
    let di = align(counters + 8)?;
    let di_rows = s_q.checked_next_multiple_of(DI_ROW_BLOCK)?;
    let di_bytes = b.checked_mul(h_q)?.checked_mul(di_rows)?.checked_mul(4)?;
    let lse2 = di.checked_add(di_bytes)?;
    let di_end = lse2.checked_add(di_bytes)?;
    let blobs = h_q
        .checked_mul(b)?
        .checked_mul(s_q.div_ceil(FUSED_BLOCK_M as u64))?;
    let acc = align(di_end)?;
    let end = acc.checked_add(blobs.checked_mul(blob_stride_floats(d_qk) * 4 + 4)?)?;
    Some(BackwardWorkspace {
        batches: 0,
        tiles,
        tile_count: counters,
        error_flag: counters + 4,
        di,
        lse2,
        di_rows: i32::try_from(di_rows).ok()?,
        dq_acc: acc,
        total_bytes: end.checked_add(WORKSPACE_ALIGNMENT)?,
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
