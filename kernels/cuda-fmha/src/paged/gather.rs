//! The gathered prefill route (`cuda/decode/gather.cuh`): a paged prefill's K and V pages copied
//! into contiguous ragged buffers in the workspace, then the ragged forward over them.
//!
//! The split kernel walks 16 query rows against 16-key tiles on `mma.sync`: right for decode, where
//! the K/V stream is the cost, but a prefill reads every key once per query tile and is compute
//! bound there. Copying the pages once costs one pass over the K/V bytes at memory speed, after
//! which the forward's tensor-core kernels (wgmma and TMA on sm_90) run the prefill as they run any
//! ragged batch. The route is chosen here, from the graph alone ([`route`]); the forward's plan is
//! built directly (no second graph), its offsets being the token starts the starts kernel writes.

use std::ffi::OsStr;

use super::plan::RowStrides as PagedRows;
use crate::forward::device_abi::{ForwardKernel, MIN_BLOCK_M};
use crate::forward::geometry::{WORKSPACE_ALIGNMENT, grid_and_workspace};
use crate::forward::plan::{FmhaPlan, LseArgs, OffsetsArgs, RowStrides};
use ragged_core::DataType;
use ragged_core::problem::QueryForm;

/// `RAGGED_GATHER_ROWS`: keys one gather block copies.
pub const GATHER_ROWS: i64 = 64;
/// `RAGGED_GATHER_FINISH_ROWS`: query rows one finish block takes.
pub const FINISH_ROWS: i64 = 16;
/// A paged problem takes the gathered route when its sequences average at least this many query
/// rows: the forward's query tiles are 64 or 128 rows, and below that the split kernel, which
/// reads the pages in place, does not pay for a copy of the whole context.
pub const MIN_ROWS_PER_SEQUENCE: i64 = 64;
/// The gathered K and V, sized for every sequence at `max_seq_len_kv`, stay within this many bytes;
/// a larger bound keeps the split kernel. The bound costs workspace, not time: only the keys the
/// lengths cover are copied (32 sequences at an 8k-key table capacity, H_kv 8, D 128, need 1 GiB).
pub const MAX_GATHER_BYTES: u64 = 4 << 30;
/// Environment variable: `0` keeps the split kernel for every paged problem (for A/B measurements
/// of the two routes); any other value, or none, lets the plan choose. Read at each plan.
pub const GATHER_ENV: &str = "RAGGED_SDPA_CUDA_PAGED_GATHER";

/// Byte offsets inside the (aligned-up) workspace of the gathered route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherWorkspace {
    /// `int q_start[B + 1]`.
    pub q_start: u64,
    /// `int lq[B]`.
    pub lq: u64,
    /// `int kv_start[B + 1]`.
    pub kv_start: u64,
    /// `int invalid[B]`.
    pub invalid: u64,
    /// The gathered K, `[B · max_seq_len_kv, H_kv, D_qk]`.
    pub k: u64,
    /// The gathered V, `[B · max_seq_len_kv, H_kv, D_v]`.
    pub v: u64,
    /// With sinks and no LSE in the graph: the forward's LSE, f32 `[rows, H_q]`, which the finish
    /// kernel needs to fold the sinks in.
    pub lse: Option<u64>,
    /// The forward's own workspace.
    pub forward: u64,
    /// Bytes to request, including slack for aligning the caller's pointer.
    pub total_bytes: u64,
}

/// The gathered route of one paged problem.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherPlan {
    /// The forward over Q, the gathered K and V, and O (its scale is replaced per execute).
    pub forward: FmhaPlan,
    /// Workspace layout.
    pub workspace: GatherWorkspace,
    /// Blocks of the gather launch along keys: ceil(max_seq_len_kv / [`GATHER_ROWS`]).
    pub key_blocks: u32,
    /// Where the forward writes the LSE and the finish kernel reads it back (with sinks): the
    /// graph's LSE, or the workspace's ([`GatherWorkspace::lse`]); `None` without either.
    pub lse: Option<PagedRows>,
    /// Blocks of the finish launch: ceil(workspace rows / [`FINISH_ROWS`]).
    pub finish_blocks: u32,
    /// O is bfloat16 (else half), and its quiet NaN, for the finish kernel.
    pub bf16: bool,
    pub nan_bits: i32,
}

/// What the route needs of a paged problem that the plan already checked.
#[derive(Debug, Clone, Copy)]
pub struct PagedShape {
    pub dtype: DataType,
    pub query: QueryForm,
    pub batch: i64,
    /// T_q (packed) or S_q (padded).
    pub q_rows: i64,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub d_qk: i64,
    pub d_v: i64,
    pub max_kv: i64,
    pub q: PagedRows,
    pub o: PagedRows,
    /// The LSE (uid, strides), if written.
    pub lse: Option<(i64, PagedRows)>,
    pub has_sinks: bool,
    /// uids of Q, K's pool, V's pool, O and `seq_len_q`, for the forward's messages.
    pub uids: [i64; 5],
    pub scale: f32,
    pub mask_left: i32,
    pub mask_right: i32,
    pub bottom_right: i32,
}

/// Whether [`GATHER_ENV`] lets the plan choose the gathered route.
pub fn enabled() -> bool {
    setting(std::env::var_os(GATHER_ENV).as_deref())
}

fn setting(value: Option<&OsStr>) -> bool {
    value.and_then(OsStr::to_str) != Some("0")
}

/// The gathered route for `s`, or `None` where the split kernel stays: decode-sized rows, padded
/// Q or O whose sequences are not back to back (the forward addresses a sequence by one token
/// start shared by Q and O), a gathered size above [`MAX_GATHER_BYTES`] or int32 key starts, or a
/// launch the forward cannot plan. Sinks are folded in by the finish kernel, from the LSE.
pub fn route(s: &PagedShape) -> Option<GatherPlan> {
    if s.batch < 1 || s.batch > i64::from(u16::MAX) {
        return None;
    }
    let packed = match s.query {
        QueryForm::Packed => true,
        QueryForm::Padded => false,
        QueryForm::Ragged => return None,
    };
    let rows_per_sequence = if packed { s.q_rows / s.batch } else { s.q_rows };
    if rows_per_sequence < MIN_ROWS_PER_SEQUENCE || s.q.seq < 1 || s.o.seq < 1 {
        return None;
    }
    if !packed && (s.q.batch != s.q_rows * s.q.seq || s.o.batch != s.q_rows * s.o.seq) {
        return None;
    }
    let kernel = ForwardKernel::select(s.dtype, s.d_qk, s.d_v)?;
    let keys = s.batch.checked_mul(s.max_kv)?;
    i32::try_from(keys).ok()?;
    i32::try_from(s.batch.checked_mul(s.q_rows)?).ok()?;
    let row_bytes = |d: i64| (keys as u64) * (s.heads_kv as u64) * (d as u64) * 2;
    let (k_bytes, v_bytes) = (row_bytes(s.d_qk), row_bytes(s.d_v));
    if k_bytes.checked_add(v_bytes)? > MAX_GATHER_BYTES {
        return None;
    }
    let forward_ws = grid_and_workspace(s.batch, s.q_rows, s.heads_q, MIN_BLOCK_M)
        .ok()?
        .2;

    let align = |x: u64| x.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
    let ints = |n: i64| (n as u64) * 4;
    let q_start = 0;
    let lq = align(q_start + ints(s.batch + 1));
    let kv_start = align(lq + ints(s.batch));
    let invalid = align(kv_start + ints(s.batch + 1));
    let k = align(invalid + ints(s.batch));
    let v = align(k + k_bytes);
    let ws_rows = if packed { s.q_rows } else { s.batch * s.q_rows };
    // The sinks need the LSE; without one in the graph the forward writes it here, `[rows, H_q]`.
    let (lse_scratch, lse_rows) = match s.lse {
        Some((_, rows)) => (None, Some(rows)),
        None if s.has_sinks => {
            let rows = PagedRows {
                batch: if packed { 0 } else { s.q_rows * s.heads_q },
                seq: s.heads_q,
                head: 1,
            };
            (Some(align(v + v_bytes)), Some(rows))
        }
        None => (None, None),
    };
    let scratch_bytes = lse_scratch.map_or(0, |_| (ws_rows as u64) * (s.heads_q as u64) * 4);
    let forward = align(lse_scratch.unwrap_or(v + v_bytes) + scratch_bytes);
    let workspace = GatherWorkspace {
        q_start,
        lq,
        kv_start,
        invalid,
        k,
        v,
        lse: lse_scratch,
        forward,
        total_bytes: forward + forward_ws.total_bytes + WORKSPACE_ALIGNMENT,
    };

    let [q_uid, k_uid, v_uid, o_uid, seq_len_q_uid] = s.uids;
    let tokens = |uid: i64, multiplier: i64| OffsetsArgs {
        uid,
        bytes: 4,
        multiplier,
    };
    let lse_uid = s.lse.map_or(q_uid, |(uid, _)| uid);
    let lse = lse_rows.map(|rows| LseArgs {
        uid: lse_uid,
        // Packed: a sequence's LSE rows start at its first Q row; padded: b · batch stride.
        offsets: packed.then(|| tokens(lse_uid, rows.seq.max(1))),
        batch_stride: if packed { 0 } else { rows.batch },
        seq_stride: rows.seq,
        head_stride: rows.head,
    });
    if packed && lse_rows.is_some_and(|rows| rows.seq < 1) {
        return None;
    }
    let forward_plan = FmhaPlan {
        kernel,
        batch: s.batch as i32,
        s_q_max: i32::try_from(s.q_rows).ok()?,
        s_kv_max: i32::try_from(s.max_kv).ok()?,
        heads_q: i32::try_from(s.heads_q).ok()?,
        heads_kv: i32::try_from(s.heads_kv).ok()?,
        q_offsets: tokens(q_uid, s.q.seq),
        kv_offsets: tokens(k_uid, s.heads_kv * s.d_qk),
        seq_len_q: Some((seq_len_q_uid, 4)),
        seq_len_kv: None,
        lse,
        q: RowStrides {
            seq: s.q.seq,
            head: s.q.head,
        },
        k: RowStrides {
            seq: s.heads_kv * s.d_qk,
            head: s.d_qk,
        },
        v: RowStrides {
            seq: s.heads_kv * s.d_v,
            head: s.d_v,
        },
        o: RowStrides {
            seq: s.o.seq,
            head: s.o.head,
        },
        uids: [q_uid, k_uid, v_uid, o_uid],
        scale: s.scale,
        mask_left: s.mask_left,
        mask_right: s.mask_right,
        bottom_right: s.bottom_right,
        workspace: forward_ws,
        fp8: None,
    };
    Some(GatherPlan {
        forward: forward_plan,
        workspace,
        key_blocks: u32::try_from((s.max_kv + GATHER_ROWS - 1) / GATHER_ROWS)
            .ok()?
            .max(1),
        lse: lse_rows,
        finish_blocks: u32::try_from((ws_rows + FINISH_ROWS - 1) / FINISH_ROWS)
            .ok()?
            .max(1),
        bf16: s.dtype == DataType::BF16,
        nan_bits: match s.dtype {
            DataType::BF16 => 0x7FC0,
            _ => 0x7E00,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> PagedShape {
        // The serving benchmark's chunked prefill: 8 sequences of 1024 new rows, packed, after up
        // to 4096 keys; 32 query heads over 8 KV heads, D 128, bf16.
        let q = PagedRows {
            batch: 0,
            seq: 32 * 128,
            head: 128,
        };
        PagedShape {
            dtype: DataType::BF16,
            query: QueryForm::Packed,
            batch: 8,
            q_rows: 8 * 1024,
            heads_q: 32,
            heads_kv: 8,
            d_qk: 128,
            d_v: 128,
            max_kv: 4096,
            q,
            o: q,
            lse: None,
            has_sinks: false,
            uids: [1, 2, 3, 4, 8],
            scale: 0.088,
            mask_left: -1,
            mask_right: 0,
            bottom_right: 1,
        }
    }

    #[test]
    fn a_packed_prefill_gathers_into_a_dense_ragged_layout() {
        let g = route(&shape()).expect("gathered");
        let f = &g.forward;
        // Gathered rows are [tokens, H_kv, D]: the token stride is H_kv · D and the offsets count
        // tokens of it; Q and O keep the graph's strides, their offsets count Q rows.
        assert_eq!((f.k.seq, f.k.head, f.v.seq), (1024, 128, 1024));
        assert_eq!(f.kv_offsets.multiplier, 1024);
        assert_eq!(f.q_offsets.multiplier, 32 * 128);
        assert_eq!((f.s_q_max, f.s_kv_max, f.batch), (8192, 4096, 8));
        assert_eq!((f.mask_right, f.bottom_right), (0, 1));
        assert_eq!(f.seq_len_q, Some((8, 4)));
        assert_eq!(f.seq_len_kv, None);
        // 8 · 4096 keys · 8 heads · 128 · 2 bytes for each of K and V.
        let w = g.workspace;
        assert_eq!(w.v - w.k, 8 * 4096 * 8 * 128 * 2);
        assert!(w.forward >= w.v + 8 * 4096 * 8 * 128 * 2);
        assert!(w.total_bytes >= w.forward + f.workspace_bytes());
        assert!(
            [w.q_start, w.lq, w.kv_start, w.invalid, w.k, w.v, w.forward]
                .iter()
                .all(|o| o % WORKSPACE_ALIGNMENT == 0)
        );
        assert_eq!(g.key_blocks, 64);
        assert_eq!(g.nan_bits, 0x7FC0);
    }

    #[test]
    fn sinks_without_an_lse_in_the_graph_get_one_in_the_workspace() {
        let sinks = PagedShape {
            has_sinks: true,
            ..shape()
        };
        let g = route(&sinks).expect("gathered");
        let w = g.workspace;
        let at = w.lse.expect("an LSE region");
        // [8192 rows, 32 heads] of f32 between V and the forward's workspace.
        assert!(at >= w.v + 8 * 4096 * 8 * 128 * 2);
        assert!(w.forward >= at + 8192 * 32 * 4);
        let rows = g.lse.expect("the finish kernel's LSE");
        assert_eq!((rows.batch, rows.seq, rows.head), (0, 32, 1));
        let lse = g.forward.lse.expect("the forward writes it");
        assert_eq!(lse.offsets.map(|o| o.multiplier), Some(32));
        assert_eq!(g.finish_blocks, 8192 / 16);
        // Without sinks no LSE is written anywhere.
        let plain = route(&shape()).expect("gathered");
        assert_eq!(
            (plain.workspace.lse, plain.lse, plain.forward.lse),
            (None, None, None)
        );
    }

    #[test]
    fn decode_and_oversized_contexts_keep_the_split_kernel() {
        let decode = PagedShape {
            q_rows: 8 * 4,
            ..shape()
        };
        assert!(route(&decode).is_none());
        // 8 · 262144 keys of 8 heads · 256 · 2 bytes: 8 GiB.
        let long = PagedShape {
            max_kv: 262_144,
            ..shape()
        };
        assert!(route(&long).is_none());
        let ragged = PagedShape {
            query: QueryForm::Ragged,
            ..shape()
        };
        assert!(route(&ragged).is_none());
    }

    #[test]
    fn padded_queries_gather_only_when_sequences_lie_back_to_back() {
        let rows = |batch| PagedRows {
            batch,
            seq: 32 * 128,
            head: 128,
        };
        let bshd = PagedShape {
            query: QueryForm::Padded,
            q_rows: 1024,
            q: rows(1024 * 32 * 128),
            o: rows(1024 * 32 * 128),
            lse: Some((
                5,
                PagedRows {
                    batch: 32 * 1024,
                    seq: 1,
                    head: 1024,
                },
            )),
            ..shape()
        };
        let g = route(&bshd).expect("gathered");
        let lse = g.forward.lse.expect("lse");
        assert_eq!((lse.offsets, lse.batch_stride), (None, 32 * 1024));
        // BHSD-like Q: sequence b's rows do not start at token b · S_q.
        let bhsd = PagedShape {
            q: PagedRows {
                batch: 1024 * 32 * 128,
                seq: 128,
                head: 1024 * 128,
            },
            ..bshd
        };
        assert!(route(&bhsd).is_none());
    }

    #[test]
    fn the_packed_lse_is_addressed_through_the_row_starts() {
        let s = PagedShape {
            lse: Some((
                5,
                PagedRows {
                    batch: 0,
                    seq: 1,
                    head: 8192,
                },
            )),
            ..shape()
        };
        let lse = route(&s).expect("gathered").forward.lse.expect("lse");
        let offsets = lse.offsets.expect("row starts");
        assert_eq!((offsets.uid, offsets.multiplier, offsets.bytes), (5, 1, 4));
        assert_eq!((lse.seq_stride, lse.head_stride), (1, 8192));
    }

    #[test]
    fn the_route_can_be_switched_off() {
        assert!(setting(None));
        assert!(setting(Some(OsStr::new("1"))));
        assert!(!setting(Some(OsStr::new("0"))));
    }
}
