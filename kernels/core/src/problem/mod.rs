//! One ragged SDPA forward, as every engine sees it: plain copies of graph attributes, no schema
//! types, no pointers, no offset contents (RFC §4.10: the plan caches each ragged tensor's uid and
//! that of its `ragged_offset` aux).
//!
//! The plugin builds a [`RaggedSdpaProblem`] once from the graph; the shared GPU rules
//! ([`crate::contract`]), each engine's own plan and the CPU reference all read it. Which axis of a
//! tensor holds the sequence and which the heads is decided in exactly one function,
//! [`resolve_axes`]; everything else asks an [`Operand`] for `seq_max()`, `heads()`, `seq_stride()`
//! and never indexes `dims[1]` / `dims[2]` by position.

mod axes;
mod fp8;
mod operand;
mod scale;
mod serving;

pub use axes::{Axes, SEQ_AXIS_1, SEQ_AXIS_2, dense_stats_axes, resolve_axes};
pub use fp8::{Amax, Fp8Forward, Fp8OutputPlan, Fp8Scalar, Fp8Softmax};
pub use operand::{IndexInput, IndexWidth, Multiplier, OFFSETS_ROLE, Offsets, Operand};
pub use scale::{ScalarType, ScalePlan};
pub use serving::{PageTable, PageTableStrides, PagedKv, QueryForm, SINK_ROLE, Sinks};

use crate::{DataType, MaskBand, Role};

/// One single-node ragged SDPA forward graph.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaggedSdpaProblem {
    /// Queries.
    pub q: Operand,
    /// Keys.
    pub k: Operand,
    /// Values.
    pub v: Operand,
    /// Output.
    pub o: Operand,
    /// The optional LSE output (`stats_tensor_uid`), FLOAT, dense or ragged token-major.
    pub stats: Option<Operand>,
    /// `seq_len_q_tensor_uid` (configuration 2).
    pub seq_len_q: Option<IndexInput>,
    /// `seq_len_kv_tensor_uid`.
    pub seq_len_kv: Option<IndexInput>,
    /// The attention scale.
    pub scale: ScalePlan,
    /// The resolved diagonal band (schema.md §6.1).
    pub mask: MaskBand,
    /// Paged K/V: `k` and `v` are page pools addressed through page tables.
    pub paged: Option<PagedKv>,
    /// Per-head sink logits.
    pub sinks: Option<Sinks>,
    /// FP8 Q, K and V: their scalars, O's scale and the amax outputs (fp8-attention.md).
    pub fp8: Option<Fp8Forward>,
}

impl RaggedSdpaProblem {
    /// B: Q's batch, or the page tables' rows for a paged problem (whose Q may be one packed
    /// row of every sequence).
    pub fn batch(&self) -> i64 {
        match &self.paged {
            Some(paged) => paged.table_k.rows,
            None => self.q.batch(),
        }
    }

    /// Q, K, V, O in that order.
    pub fn primaries(&self) -> [&Operand; 4] {
        [&self.q, &self.k, &self.v, &self.o]
    }

    /// Q, K, V, O and the stats tensor when present.
    pub fn tensors(&self) -> impl Iterator<Item = &Operand> {
        self.primaries().into_iter().chain(self.stats.as_ref())
    }

    /// The two optional seq_len inputs that are present.
    pub fn seq_lens(&self) -> impl Iterator<Item = &IndexInput> {
        self.seq_len_q.iter().chain(self.seq_len_kv.iter())
    }

    /// The role of the tensor with `uid` among the problem's tensors and index inputs.
    pub fn role_of(&self, uid: i64) -> Option<&'static str> {
        self.tensors()
            .find(|t| t.uid == uid)
            .map(|t| t.role)
            .or_else(|| self.seq_lens().find(|s| s.uid == uid).map(|s| s.role))
            .or_else(|| {
                let tables = self.paged.iter().flat_map(|p| [p.table_k, p.table_v]);
                tables.into_iter().find(|t| t.uid == uid).map(|t| t.role)
            })
            .or_else(|| self.sinks.filter(|s| s.uid == uid).map(|_| SINK_ROLE))
            .or_else(|| self.fp8.as_ref().and_then(|f| f.role_of(uid)))
    }
}

/// What an accepted backward graph binds, all copies of the graph's data.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardProblem {
    /// Q, K, V, O, the LSE (always present), seq_lens, scale and band, by the forward's rules.
    pub forward: RaggedSdpaProblem,
    /// The forward's LSE (`stats_tensor_uid`), also `forward.stats`.
    pub lse: Operand,
    /// The gradient flowing into O: O's dims, type and layout.
    pub d_o: Operand,
    /// The gradient of Q.
    pub dq: Operand,
    /// The gradient of K (summed over each GQA group's query heads).
    pub dk: Operand,
    /// The gradient of V.
    pub dv: Operand,
}

impl BackwardProblem {
    /// Everything the backward reads: Q, K, V, O, dO and the LSE.
    pub fn inputs(&self) -> [&Operand; 6] {
        let f = &self.forward;
        [&f.q, &f.k, &f.v, &f.o, &self.d_o, &self.lse]
    }

    /// Everything it writes: dQ, dK, dV.
    pub fn outputs(&self) -> [&Operand; 3] {
        [&self.dq, &self.dk, &self.dv]
    }

    /// dO, dQ, dK, dV in the forward problem's slots (O, Q, K, V), with no stats, lengths or
    /// scale tensor: lets the per-tensor helpers written for a forward problem (byte extents,
    /// ragged offset spans) cover the gradients too.
    pub fn gradient_carrier(&self) -> RaggedSdpaProblem {
        RaggedSdpaProblem {
            q: self.dq,
            k: self.dk,
            v: self.dv,
            o: self.d_o,
            stats: None,
            seq_len_q: None,
            seq_len_kv: None,
            scale: ScalePlan::Fixed(1.0),
            mask: self.forward.mask,
            paged: None,
            sinks: None,
            fp8: None,
        }
    }

    /// The uid bound for a kernel role, for naming the tensor of an execute-time error.
    pub fn uid_of(&self, role: Role) -> Option<i64> {
        let f = &self.forward;
        match role {
            Role::Q => Some(f.q.uid),
            Role::K => Some(f.k.uid),
            Role::V => Some(f.v.uid),
            Role::O => Some(f.o.uid),
            Role::Lse => Some(self.lse.uid),
            Role::DO => Some(self.d_o.uid),
            Role::DQ => Some(self.dq.uid),
            Role::DK => Some(self.dk.uid),
            Role::DV => Some(self.dv.uid),
            Role::SeqLenQ => f.seq_len_q.map(|s| s.uid),
            Role::SeqLenKv => f.seq_len_kv.map(|s| s.uid),
            Role::Scalar | Role::PageTableK | Role::PageTableV | Role::Sinks => None,
        }
    }
}

/// Problem builders for unit tests, here and in the crates above (the engines, the plugin).
#[doc(hidden)]
pub mod test_support {
    use super::*;

    /// A packed ragged `[B, S, H, D]` operand with int32 offsets ×1.
    pub fn ragged(role: &'static str, uid: i64, bshd: [i64; 4], aux: i64) -> Operand {
        let [_, s, h, d] = bshd;
        Operand {
            role,
            uid,
            dtype: DataType::BF16,
            dims: bshd,
            strides: [s * h * d, h * d, d, 1],
            alignment: 16,
            ragged: Some(Offsets {
                uid: aux,
                width: IndexWidth::I32,
                multiplier: Multiplier::ONE,
            }),
        }
    }

    /// A packed bf16 problem `[B, S_q, H_q, D]` / `[B, S_kv, H_kv, D]`: uids 1..=4, Q/O offsets
    /// uid 10 and K/V offsets uid 11 (int32 ×1), scale 0.125, no mask, no stats.
    pub fn packed(
        b: i64,
        (s_q, h_q): (i64, i64),
        (s_kv, h_kv): (i64, i64),
        d: i64,
    ) -> RaggedSdpaProblem {
        RaggedSdpaProblem {
            q: ragged("q_tensor_uid", 1, [b, s_q, h_q, d], 10),
            k: ragged("k_tensor_uid", 2, [b, s_kv, h_kv, d], 11),
            v: ragged("v_tensor_uid", 3, [b, s_kv, h_kv, d], 11),
            o: ragged("o_tensor_uid", 4, [b, s_q, h_q, d], 10),
            stats: None,
            seq_len_q: None,
            seq_len_kv: None,
            scale: ScalePlan::Fixed(0.125),
            mask: MaskBand::none(),
            paged: None,
            sinks: None,
            fp8: None,
        }
    }

    /// Rewrites every ragged tensor of `p` in cuDNN's `[B, H, S, D]` dims order over the same
    /// BSHD memory (dims and strides of axes 1 and 2 swapped), as upstream's
    /// `RaggedSdpaTestUtils.hpp` writes them.
    pub fn in_bhsd_order(p: &mut RaggedSdpaProblem) {
        let (q, k, v, o) = (&mut p.q, &mut p.k, &mut p.v, &mut p.o);
        for t in [q, k, v, o].into_iter().chain(p.stats.as_mut()) {
            if t.ragged.is_some() {
                t.dims.swap(1, 2);
                t.strides.swap(1, 2);
            }
        }
    }

    /// [`packed`] with FP8_E4M3 Q, K, V, a bf16 O and baked descales (upstream's shape), with
    /// and without paged K/V.
    pub fn fp8(
        b: i64,
        (s_q, h_q): (i64, i64),
        (s_kv, h_kv): (i64, i64),
        d: i64,
    ) -> RaggedSdpaProblem {
        let mut p = packed(b, (s_q, h_q), (s_kv, h_kv), d);
        let e4m3 = DataType::Fp8(crate::Fp8Format::E4M3);
        for t in [&mut p.q, &mut p.k, &mut p.v] {
            t.dtype = e4m3;
        }
        let baked = |role| Fp8Scalar {
            role,
            plan: ScalePlan::Fixed(1.0),
        };
        p.fp8 = Some(Fp8Forward {
            input: crate::Fp8Format::E4M3,
            descale_q: baked("descale_q_tensor_uid"),
            descale_k: baked("descale_k_tensor_uid"),
            descale_v: baked("descale_v_tensor_uid"),
            softmax: None,
            output: Fp8OutputPlan::Wide,
            amax_s: None,
            amax_o: None,
        });
        p
    }

    /// B = 3, S_q = 200, H_q = 8, S_kv = 300, H_kv = 2, D = 128.
    pub fn problem() -> RaggedSdpaProblem {
        packed(3, (200, 8), (300, 2), 128)
    }

    /// A dense FLOAT stats tensor `[B, H, S, 1]` with the given strides.
    pub fn dense_stats(uid: i64, dims: [i64; 4], strides: [i64; 4]) -> Operand {
        Operand {
            role: "stats_tensor_uid",
            uid,
            dtype: DataType::F32,
            dims,
            strides,
            alignment: 16,
            ragged: None,
        }
    }

    #[test]
    fn ragged_operands_read_s_and_h_from_axes_1_and_2() {
        // Q of shared/testdata/wire/graph.json: dims [2, 3, 2, 16], strides [96, 32, 16, 1].
        let mut q = ragged("q_tensor_uid", 1, [2, 3, 2, 16], 5);
        assert_eq!(q.bshd(), [2, 3, 2, 16]);
        assert_eq!(
            (q.seq_stride(), q.head_stride(), q.dim_stride()),
            (32, 16, 1)
        );
        // The golden graph's dense stats [B, H, S, 1], strides [6, 3, 1, 1].
        q.ragged = None;
        q.dims = [2, 2, 3, 1];
        q.strides = [6, 3, 1, 1];
        assert_eq!(q.bshd(), [2, 3, 2, 1]);
        assert_eq!(
            (q.batch_stride(), q.seq_stride(), q.head_stride()),
            (6, 1, 3)
        );
    }

    /// The same packed memory described in both upstream dims orders.
    #[cfg(test)]
    fn both_forms(b: i64, s: i64, h: i64, d: i64) -> (Operand, Operand) {
        let a = ragged("q_tensor_uid", 1, [b, s, h, d], 5);
        let mut bhsd = a;
        bhsd.dims = [b, h, s, d];
        bhsd.strides = [s * h * d, d, h * d, 1];
        (a, bhsd)
    }

    #[test]
    fn both_ragged_dims_orders_resolve_to_the_same_geometry() {
        for (s, h) in [(3, 2), (2, 3), (5, 1), (1, 4), (4, 4)] {
            let (a, b) = both_forms(2, s, h, 16);
            assert_eq!(a.axes(), SEQ_AXIS_1, "s {s} h {h}");
            assert_eq!(b.axes(), SEQ_AXIS_2, "s {s} h {h}");
            assert_eq!(a.bshd(), b.bshd(), "s {s} h {h}");
            assert_eq!(
                (a.seq_stride(), a.head_stride(), a.dim_stride()),
                (b.seq_stride(), b.head_stride(), b.dim_stride()),
                "s {s} h {h}"
            );
        }
    }

    #[test]
    fn one_head_ties_the_middle_strides_and_the_larger_dim_is_the_sequence() {
        let (a, b) = both_forms(2, 7, 1, 8);
        assert_eq!(a.strides[1], a.strides[2]);
        assert_eq!((a.seq_max(), a.heads()), (7, 1));
        assert_eq!((b.seq_max(), b.heads()), (7, 1));
    }

    #[test]
    fn dense_stats_match_either_order_of_q() {
        assert_eq!(dense_stats_axes(&[2, 4, 6, 1], 6, 4), Some(SEQ_AXIS_2));
        assert_eq!(dense_stats_axes(&[2, 6, 4, 1], 6, 4), Some(SEQ_AXIS_1));
        assert_eq!(dense_stats_axes(&[2, 5, 5, 1], 5, 5), Some(SEQ_AXIS_2));
        assert_eq!(dense_stats_axes(&[2, 6, 3, 1], 6, 4), None);
        assert_eq!(dense_stats_axes(&[2, 6, 4, 2], 6, 4), None);
        // Token-major [B, S, H, 1] strides {S·H, H, 1, 1} reordered to [B, H, S, 1].
        assert_eq!(SEQ_AXIS_1.to_bhsd(&[24, 4, 1, 1]), [24, 1, 4, 1]);
        assert_eq!(SEQ_AXIS_1.to_bhsd(&[2, 6, 4, 1]), [2, 4, 6, 1]);
    }

    #[test]
    fn roles_are_found_by_uid() {
        let p = problem();
        assert_eq!(p.role_of(3), Some("v_tensor_uid"));
        assert_eq!(p.role_of(10), None);
        assert_eq!(p.tensors().count(), 4);
    }

    /// A dense bf16 operand with the given dims and strides, 16-byte aligned.
    pub fn dense(role: &'static str, uid: i64, dims: [i64; 4], strides: [i64; 4]) -> Operand {
        Operand {
            role,
            uid,
            dtype: DataType::BF16,
            dims,
            strides,
            alignment: 16,
            ragged: None,
        }
    }

    /// A row-major `[rows, columns]` page table, 16-byte aligned.
    pub fn page_table(role: &'static str, uid: i64, rows: i64, columns: i64) -> PageTable {
        PageTable {
            role,
            uid,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
            rank4: false,
            alignment: 16,
        }
    }

    /// Upstream's packed paged form: Q/O `[1, H_q, T_q, D]` token-major, NHD pools of `pages`
    /// pages of `ps` tokens (uids 2 and 3), tables `[B, mp]` (uids 6 and 7), int32 lengths (uids 8
    /// and 9), bf16, scale 0.125, no mask.
    pub fn paged_packed(
        batch: i64,
        (hq, hkv, d): (i64, i64, i64),
        t_q: i64,
        (pages, ps, mp): (i64, i64, i64),
    ) -> RaggedSdpaProblem {
        let q_strides = [t_q * hq * d, d, hq * d, 1];
        let pool = [pages, hkv, ps, d];
        let pool_strides = [ps * hkv * d, d, hkv * d, 1];
        let index = |role, uid| IndexInput {
            role,
            uid,
            width: IndexWidth::I32,
        };
        RaggedSdpaProblem {
            q: dense("q_tensor_uid", 1, [1, hq, t_q, d], q_strides),
            k: dense("k_tensor_uid", 2, pool, pool_strides),
            v: dense("v_tensor_uid", 3, pool, pool_strides),
            o: dense("o_tensor_uid", 4, [1, hq, t_q, d], q_strides),
            stats: None,
            seq_len_q: Some(index("seq_len_q_tensor_uid", 8)),
            seq_len_kv: Some(index("seq_len_kv_tensor_uid", 9)),
            scale: ScalePlan::Fixed(0.125),
            mask: MaskBand::none(),
            paged: Some(PagedKv {
                table_k: page_table("page_table_k_tensor_uid", 6, batch, mp),
                table_v: page_table("page_table_v_tensor_uid", 7, batch, mp),
                max_seq_len_kv: mp * ps,
                query: QueryForm::Packed,
            }),
            sinks: None,
            fp8: None,
        }
    }
}
