//! Serving inputs of a forward: paged K/V (page tables, pools, the length bound) and per-head
//! attention sinks (paged-kv-and-sinks.md).

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

/// A page table as a GPU kernel reads it: int32 page ids at these element strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageTableStrides {
    /// Graph uid.
    pub uid: i64,
    /// Elements between rows (sequences).
    pub row: i64,
    /// Elements between a row's entries.
    pub column: i64,
}

impl PageTable {
    /// Its strides for a kernel that loads the ids as int32, once the declared alignment allows
    /// those loads (a positive multiple of 4 bytes).
    pub fn int32_strides(&self) -> Result<PageTableStrides, crate::Decline> {
        crate::contract::check_declared_alignment(self.uid, self.role, self.alignment, 4)?;
        Ok(PageTableStrides {
            uid: self.uid,
            row: self.row_stride,
            column: self.column_stride,
        })
    }

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
