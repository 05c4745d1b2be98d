//! One ragged SDPA forward, as every engine sees it: plain copies of graph attributes, no schema
//! types, no pointers, no offset contents (RFC §4.10: the plan caches each ragged tensor's uid and
//! that of its `ragged_offset` aux).
//!
//! The plugin builds a [`RaggedSdpaProblem`] once from the graph; the shared GPU rules
//! ([`crate::contract`]), each engine's own plan and the CPU reference all read it. Which axis of a
//! tensor holds the sequence and which the heads is decided in exactly one function,
//! [`resolve_axes`]; everything else asks an [`Operand`] for `seq_max()`, `heads()`, `seq_stride()`
//! and never indexes `dims[1]` / `dims[2]` by position.

use std::fmt;

use crate::{DataType, MaskBand, Role};

/// Width of an integer side tensor (ragged offsets, `seq_len_*`): INT32 or INT64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexWidth {
    /// INT32.
    I32,
    /// INT64.
    I64,
}

impl IndexWidth {
    /// Bytes per element, as the device kernels take it.
    pub fn bytes(self) -> i32 {
        match self {
            Self::I32 => 4,
            Self::I64 => 8,
        }
    }

    /// The element type of the tensor.
    pub fn data_type(self) -> DataType {
        match self {
            Self::I32 => DataType::I32,
            Self::I64 => DataType::I64,
        }
    }

    /// The width of an element type, `None` for the floating-point types.
    pub fn of(data_type: DataType) -> Option<Self> {
        match data_type {
            DataType::I32 => Some(Self::I32),
            DataType::I64 => Some(Self::I64),
            _ => None,
        }
    }
}

impl fmt::Display for IndexWidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::I32 => "int32",
            Self::I64 => "int64",
        })
    }
}

/// Positions of the four logical axes inside a rank-4 `dims` / `strides` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axes {
    /// The batch axis (always 0).
    pub batch: usize,
    /// The sequence (token) axis.
    pub seq: usize,
    /// The head axis.
    pub heads: usize,
    /// The head-dim axis (always 3).
    pub dim: usize,
}

/// Sequence axis 1: `[B, S, H, D]`, the RFC's memory order for ragged tensors.
pub const SEQ_AXIS_1: Axes = Axes {
    batch: 0,
    seq: 1,
    heads: 2,
    dim: 3,
};

/// Sequence axis 2: hipDNN's logical `[B, H, S, D]` order.
pub const SEQ_AXIS_2: Axes = Axes {
    batch: 0,
    seq: 2,
    heads: 1,
    dim: 3,
};

/// The one place that decides where S and H sit (ragged-sdpa.md §1, revised 2026-12-01).
///
/// A ragged tensor's memory is BSHD-packed, but upstream writes its dims two ways: the RFC's
/// `[B, S_max, H, D]` (strides `{·, H·D, D, 1}`) and cuDNN's logical `[B, H, S_max, D]` over the
/// same memory (strides `{·, D, H·D, 1}`). Tokens are outermost within a batch, so the sequence
/// axis is the middle axis with the larger stride (upstream's data-SDK rule); with one head the
/// two strides tie and the larger dim is the sequence. The head axis is the other middle axis.
/// A dense tensor keeps hipDNN's logical `[B, H, S, D]` with any strides (a dense LSE written
/// token-major is reordered by [`dense_stats_axes`] before it reaches an [`Operand`]).
pub fn resolve_axes(dims: &[i64; 4], strides: &[i64; 4], ragged: bool) -> Axes {
    if !ragged {
        return SEQ_AXIS_2;
    }
    match strides[1].cmp(&strides[2]) {
        std::cmp::Ordering::Greater => SEQ_AXIS_1,
        std::cmp::Ordering::Less => SEQ_AXIS_2,
        std::cmp::Ordering::Equal if dims[2] > dims[1] => SEQ_AXIS_2,
        std::cmp::Ordering::Equal => SEQ_AXIS_1,
    }
}

/// The axes of a dense LSE tensor, which upstream writes head-major `[B, H_q, S_q, 1]` or
/// token-major `[B, S_q, H_q, 1]` with any strides: its strides cannot tell the two apart (a
/// head-major LSE has its largest middle stride on the head axis), so its dims are matched
/// against Q's S_max and heads. When S_max = H the dims are the same either way and hipDNN's
/// head-major reading wins; `None` when the dims match neither order.
pub fn dense_stats_axes(dims: &[i64; 4], q_seq_max: i64, q_heads: i64) -> Option<Axes> {
    if dims[3] != 1 {
        return None;
    }
    if [dims[1], dims[2]] == [q_heads, q_seq_max] {
        Some(SEQ_AXIS_2)
    } else if [dims[1], dims[2]] == [q_seq_max, q_heads] {
        Some(SEQ_AXIS_1)
    } else {
        None
    }
}

impl Axes {
    /// `values` (dims or strides, graph order) rearranged to `[B, H, S, D]`.
    pub fn to_bhsd(&self, values: &[i64; 4]) -> [i64; 4] {
        [
            values[self.batch],
            values[self.heads],
            values[self.seq],
            values[self.dim],
        ]
    }
}

/// The `ragged_offset` aux of a ragged primary: `[B + 1, 1, 1, 1]`, read per execute (never
/// cached), so each execute may bring different offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// The aux tensor's uid (`ragged_offset_tensor_uid` of the primary).
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
    /// `ragged_offset_multiplier`: element offset = stored value × multiplier.
    pub multiplier: Multiplier,
}

/// A `ragged_offset_multiplier`: at least 1. [`Multiplier::new`] is the only way to make one, so
/// no layer below the graph's conversion checks the rule again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Multiplier(i64);

impl Multiplier {
    /// Offsets that count elements.
    pub const ONE: Multiplier = Multiplier(1);

    /// `value` as a multiplier, or `None` below 1.
    pub fn new(value: i64) -> Option<Multiplier> {
        (value >= 1).then_some(Multiplier(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Multiplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The SDPA field that names the offsets aux, for messages.
pub const OFFSETS_ROLE: &str = "ragged_offset_tensor_uid";

/// One Q, K, V, O or stats tensor of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Which SDPA field named it (`q_tensor_uid`, …), for messages.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// Element type.
    pub dtype: DataType,
    /// Graph dims, in the graph's order (see [`Operand::axes`]); a dense LSE written token-major
    /// is held reordered to `[B, H, S, 1]`, its strides with it (same memory, see
    /// [`dense_stats_axes`]).
    pub dims: [i64; 4],
    /// Graph strides, in elements; a ragged tensor's batch stride is ignored.
    pub strides: [i64; 4],
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
    /// The offsets of a ragged tensor; `None` when dense.
    pub ragged: Option<Offsets>,
}

impl Operand {
    /// Where this tensor's S and H sit.
    pub fn axes(&self) -> Axes {
        resolve_axes(&self.dims, &self.strides, self.ragged.is_some())
    }

    /// B.
    pub fn batch(&self) -> i64 {
        self.dims[self.axes().batch]
    }

    /// S_max: the padded sequence length.
    pub fn seq_max(&self) -> i64 {
        self.dims[self.axes().seq]
    }

    /// H.
    pub fn heads(&self) -> i64 {
        self.dims[self.axes().heads]
    }

    /// D (1 for the stats tensor).
    pub fn head_dim(&self) -> i64 {
        self.dims[self.axes().dim]
    }

    /// Elements between batches (ignored for ragged tensors).
    pub fn batch_stride(&self) -> i64 {
        self.strides[self.axes().batch]
    }

    /// `seqStride`: elements between consecutive tokens.
    pub fn seq_stride(&self) -> i64 {
        self.strides[self.axes().seq]
    }

    /// Elements between heads.
    pub fn head_stride(&self) -> i64 {
        self.strides[self.axes().heads]
    }

    /// Elements between head-dim entries.
    pub fn dim_stride(&self) -> i64 {
        self.strides[self.axes().dim]
    }

    /// `[B, S_max, H, D]` whatever the graph's order.
    pub fn bshd(&self) -> [i64; 4] {
        [self.batch(), self.seq_max(), self.heads(), self.head_dim()]
    }
}

/// An integer input read per execute: `seq_len_q` / `seq_len_kv` (`[B, 1, 1, 1]` or `[B]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexInput {
    /// Which SDPA field named it, for messages.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// INT32 or INT64.
    pub width: IndexWidth,
}

/// The element type of a scale scalar: the floating-point graph types, double included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarType {
    /// FLOAT.
    Float,
    /// HALF.
    Half,
    /// BFLOAT16.
    BFloat16,
    /// DOUBLE.
    Double,
}

impl ScalarType {
    /// Bytes of one value.
    pub fn size(self) -> usize {
        match self {
            Self::Half | Self::BFloat16 => 2,
            Self::Float => 4,
            Self::Double => 8,
        }
    }

    /// The tensor SDK's element type; `None` for DOUBLE, which the SDK does not store.
    pub fn element(self) -> Option<DataType> {
        match self {
            Self::Float => Some(DataType::F32),
            Self::Half => Some(DataType::F16),
            Self::BFloat16 => Some(DataType::BF16),
            Self::Double => None,
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Float => "FLOAT",
            Self::Half => "HALF",
            Self::BFloat16 => "BFLOAT16",
            Self::Double => "DOUBLE",
        })
    }
}

/// Where the attention scale comes from (schema.md §6.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalePlan {
    /// Baked into the graph (tensor value, `attn_scale_value`, or the default 1.0).
    Fixed(f32),
    /// `is_runtime_pass_by_value`: the variant pack binds a host pointer to the value
    /// (plugin-abi.md §5.7), so every engine can read it at each execute.
    RuntimeHostScalar {
        /// The scale tensor's uid.
        uid: i64,
        /// Its element type.
        data_type: ScalarType,
    },
    /// A one-element tensor in the caller's memory, which may be device memory. GPU engines
    /// decline it (reading it would cost a device copy and a synchronization per execute); the
    /// host engine reads it, after staging when it lives on a device.
    DeviceTensor {
        /// The scale tensor's uid.
        uid: i64,
        /// Its element type.
        data_type: ScalarType,
    },
}

impl ScalePlan {
    /// The value a GPU plan carries: the fixed scale, or for a runtime scale a finite stand-in
    /// (1.0, so that plan-time checks of the scale pass) that every execute replaces with the
    /// value read from the variant pack before anything is launched.
    pub fn plan_value(&self) -> f32 {
        match *self {
            Self::Fixed(value) => value,
            Self::RuntimeHostScalar { .. } | Self::DeviceTensor { .. } => 1.0,
        }
    }
}

/// A page table (`page_table_k_tensor_uid` / `page_table_v_tensor_uid`): the INT32 `B × MP`
/// matrix of page ids that maps sequence `b`'s logical key `j` to pool page
/// `T[b][⌊j / ps⌋]` (paged-kv-and-sinks.md §2). Its values are read per execute and checked
/// against the pool before any pool element is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageTable {
    /// Which SDPA field named it, for messages.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// B: one row per sequence.
    pub rows: i64,
    /// MP: page ids per row.
    pub columns: i64,
    /// Elements between rows.
    pub row_stride: i64,
    /// Elements between a row's entries.
    pub column_stride: i64,
    /// Written as cuDNN's rank 4 `[B, 1, MP, 1]` rather than upstream's `[B, MP]`: the graph's
    /// own dims are what the caller's buffer is sized by.
    pub rank4: bool,
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
}

impl PageTable {
    /// The dims as the graph writes them.
    pub fn dims(&self) -> Vec<i64> {
        if self.rank4 {
            vec![self.rows, 1, self.columns, 1]
        } else {
            vec![self.rows, self.columns]
        }
    }

    /// The strides as the graph writes them (a size-1 axis's stride spans nothing: 1).
    pub fn strides(&self) -> Vec<i64> {
        if self.rank4 {
            vec![self.row_stride, 1, self.column_stride, 1]
        } else {
            vec![self.row_stride, self.column_stride]
        }
    }

    /// The element of entry `(b, i)` in the table's buffer.
    pub fn position(&self, b: i64, i: i64) -> i64 {
        b * self.row_stride + i * self.column_stride
    }
}

/// How Q and O delimit the sequences of a paged graph (paged-kv-and-sinks.md §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryForm {
    /// Q `[1, H_q, T_q, D]` holds every sequence's rows back to back: sequence `b` starts at row
    /// `Σ_{c<b} Lq(c)` (upstream's paged bundles).
    Packed,
    /// Q `[B, H_q, S_q, D]`: sequence `b` owns rows `[0, Lq(b))` of its own slice.
    Padded,
    /// Q and O carry ragged offsets, as for a non-paged graph.
    Ragged,
}

/// Paged K and V (paged-kv-and-sinks.md §1–§3): the problem's `k` and `v` are page pools
/// `[P, H_kv, ps, D]` (page, KV head, slot, dim) rather than per-sequence tensors, and the
/// per-sequence lengths come from `seq_len_kv`, which a paged problem always has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedKv {
    /// K's page table.
    pub table_k: PageTable,
    /// V's page table.
    pub table_v: PageTable,
    /// The bound every `Lkv(b)` must respect: `max_seq_len_kv` when the graph sets it, else the
    /// smaller table capacity `MP · ps`; never above either capacity.
    pub max_seq_len_kv: i64,
    /// Where Q's and O's sequences are.
    pub query: QueryForm,
}

impl PagedKv {
    /// The two tables, K's first.
    pub fn tables(&self) -> [&PageTable; 2] {
        [&self.table_k, &self.table_v]
    }
}

/// Per-head attention sinks (`sink_token_tensor_uid`, paged-kv-and-sinks.md §6): one FLOAT logit
/// per query head, added to every row's softmax denominator; O and the LSE change, nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sinks {
    /// Graph uid.
    pub uid: i64,
    /// H_q.
    pub heads: i64,
    /// Elements between heads.
    pub stride: i64,
    /// Written as `[1, H_q, 1, 1]` rather than `[H_q]`.
    pub rank4: bool,
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
}

/// The SDPA field that names the sinks, for messages.
pub const SINK_ROLE: &str = "sink_token_tensor_uid";

impl Sinks {
    /// The dims as the graph writes them.
    pub fn dims(&self) -> Vec<i64> {
        if self.rank4 {
            vec![1, self.heads, 1, 1]
        } else {
            vec![self.heads]
        }
    }

    /// The strides as the graph writes them.
    pub fn strides(&self) -> Vec<i64> {
        if self.rank4 {
            vec![self.heads * self.stride, self.stride, 1, 1]
        } else {
            vec![self.stride]
        }
    }
}

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
}
