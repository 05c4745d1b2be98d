//! Paged K/V and attention sinks of the graph's SDPA node → the problem's [`PagedKv`] and
//! [`Sinks`] (paged-kv-and-sinks.md §1–§3, §5.1, §6): the planning rules, each decline naming the
//! uid or field and its value.

use ragged_core::problem::{Operand, PageTable, PagedKv, QueryForm, SINK_ROLE, Sinks};
use ragged_schema::{DataType, Graph, SdpaAttributes};

use ragged_core::contract::Decline;

use super::{refuse, refuse_attribute, tensor_attributes};

/// Shape agreement when K and V are page pools `[P, H_kv, ps, D]` (paged-kv-and-sinks.md §1):
/// dense pools of positive extents and strides, K's and V's heads equal and dividing H_q, K's
/// head dim Q's, and O Q's shape with V's head dim. The batch lives in the page tables.
pub(super) fn check_paged_shapes(
    q: &Operand,
    k: &Operand,
    v: &Operand,
    o: &Operand,
) -> Result<(), Decline> {
    for pool in [k, v] {
        if let Some(r) = pool.ragged {
            return refuse(
                pool.uid,
                format!("{} ragged_offset_tensor_uid", pool.role),
                r.uid,
                "unset: a page pool carries no ragged offsets, its page table delimits the \
                 sequences (paged-kv-and-sinks.md §1.8)",
            );
        }
        if pool.dims.iter().any(|&d| d < 1) || pool.strides.iter().any(|&s| s < 1) {
            return refuse(
                pool.uid,
                format!("{} page pool dims / strides", pool.role),
                format!("{:?} / {:?}", pool.dims, pool.strides),
                "[pages, KV heads, page size, head dim], every dim and stride at least 1",
            );
        }
    }
    let [_, _, h_q, d_qk] = q.bshd();
    let (h_kv, d_k) = (k.dims[1], k.dims[3]);
    for (t, value, field) in [(q, h_q, "heads"), (q, d_qk, "head dim")] {
        if value < 1 {
            return refuse(t.uid, format!("{} {field}", t.role), value, "at least 1");
        }
    }
    if v.dims[1] != h_kv {
        return refuse(
            v.uid,
            "v_tensor_uid pool heads (dims[1])",
            v.dims[1],
            format!("{h_kv}, K's pool heads"),
        );
    }
    if h_q % h_kv != 0 {
        return refuse(
            k.uid,
            "k_tensor_uid pool heads (dims[1])",
            h_kv,
            format!("a divisor of H_q = {h_q}"),
        );
    }
    if d_k != d_qk {
        return refuse(
            k.uid,
            "k_tensor_uid pool head dim (dims[3])",
            d_k,
            format!("{d_qk}, Q's head dim"),
        );
    }
    if o.ragged.is_some() != q.ragged.is_some() {
        return refuse(
            o.uid,
            "o_tensor_uid layout",
            if o.ragged.is_some() {
                "ragged"
            } else {
                "dense"
            },
            "Q's layout (both ragged or both dense)",
        );
    }
    let want = [q.batch(), q.seq_max(), h_q, v.dims[3]];
    if o.bshd() != want {
        return refuse(
            o.uid,
            "o_tensor_uid dims",
            format!("{:?}", o.dims),
            format!("[B, S, H, D] = {want:?}: Q's batch, rows and heads and V's head dim"),
        );
    }
    Ok(())
}

/// The page tables, `max_seq_len_kv` and Q's form of a paged graph (paged-kv-and-sinks.md §2,
/// §3). The batch B is the tables' row count, which schema validation has already matched
/// against the lengths.
pub(super) fn paged_kv(
    graph: &Graph,
    sdpa: &SdpaAttributes,
    (k_uid, v_uid): (i64, i64),
    q: &Operand,
    k: &Operand,
    v: &Operand,
) -> Result<PagedKv, Decline> {
    let table_k = page_table(graph, "page_table_k_tensor_uid", k_uid)?;
    let table_v = page_table(graph, "page_table_v_tensor_uid", v_uid)?;
    let batch = table_k.rows;
    if table_v.rows != batch {
        return refuse(
            v_uid,
            "page_table_v_tensor_uid rows (dims[0])",
            table_v.rows,
            format!("{batch}, the rows of page_table_k_tensor_uid (one per sequence)"),
        );
    }
    let capacity = |table: &PageTable, pool: &Operand| table.columns.checked_mul(pool.dims[2]);
    let (Some(cap_k), Some(cap_v)) = (capacity(&table_k, k), capacity(&table_v, v)) else {
        return refuse(
            k_uid,
            "page table capacity (columns × page size)",
            "beyond int64",
            "a capacity that fits int64",
        );
    };
    let capacity = cap_k.min(cap_v);
    let max_seq_len_kv = match sdpa.max_seq_len_kv {
        None => capacity,
        Some(m) if m > 0 && i64::from(m) <= capacity => i64::from(m),
        Some(m) => {
            return refuse_attribute(
                "max_seq_len_kv",
                m,
                format!(
                    "1..={capacity}: at most what each page table reaches (K {} × {}, V {} × {})",
                    table_k.columns, k.dims[2], table_v.columns, v.dims[2]
                ),
            );
        }
    };
    let query = match (q.ragged, q.dims[0]) {
        (Some(_), b) if b == batch => QueryForm::Ragged,
        (None, 1) => QueryForm::Packed,
        (None, b) if b == batch => QueryForm::Padded,
        (_, b) => {
            return refuse(
                q.uid,
                "q_tensor_uid dims[0] on a paged graph",
                b,
                format!(
                    "1 (every sequence's rows packed, dense) or B = {batch} (the page tables' rows)"
                ),
            );
        }
    };
    Ok(PagedKv {
        table_k,
        table_v,
        max_seq_len_kv,
        query,
    })
}

/// A page table: dense INT32 `[B, MP]` or `[B, 1, MP, 1]`, positive dims and strides.
fn page_table(graph: &Graph, role: &'static str, uid: i64) -> Result<PageTable, Decline> {
    let t = tensor_attributes(graph, role, uid)?;
    if t.data_type != DataType::Int32 {
        return refuse(uid, format!("{role} data type"), t.data_type, "INT32");
    }
    if t.is_virtual {
        return refuse(uid, format!("{role} is_virtual"), true, "false");
    }
    if t.ragged_offset_tensor_uid.is_some() {
        return refuse(
            uid,
            format!("{role} ragged_offset_tensor_uid"),
            format!("{:?}", t.ragged_offset_tensor_uid),
            "unset: a page table is dense",
        );
    }
    let shape = |need: &str| {
        refuse(
            uid,
            format!("{role} dims / strides"),
            format!("{:?} / {:?}", t.dims, t.strides),
            format!("{need} (paged-kv-and-sinks.md §2.1)"),
        )
    };
    let positive = t.dims.iter().chain(&t.strides).all(|&x| x >= 1);
    let (rows, columns, row_stride, column_stride, rank4) = match (&t.dims[..], &t.strides[..]) {
        ([b, mp], [sb, si]) if positive => (*b, *mp, *sb, *si, false),
        ([b, 1, mp, 1], [sb, _, si, _]) if positive => (*b, *mp, *sb, *si, true),
        _ => {
            return shape("[B, MP] or [B, 1, MP, 1], every dim and stride at least 1");
        }
    };
    if t.alignment < 1 {
        return refuse(uid, format!("{role} alignment"), t.alignment, "at least 1");
    }
    Ok(PageTable {
        role,
        uid,
        rows,
        columns,
        row_stride,
        column_stride,
        rank4,
        alignment: t.alignment,
    })
}

/// Sinks: FLOAT, one logit per query head, `[H_q]` or `[1, H_q, 1, 1]` (paged-kv-and-sinks.md
/// §6.1), on paged and non-paged graphs alike.
pub(super) fn sinks_plan(graph: &Graph, uid: i64, q: &Operand) -> Result<Sinks, Decline> {
    let t = tensor_attributes(graph, SINK_ROLE, uid)?;
    if t.data_type != DataType::Float {
        return refuse(uid, "sink_token_tensor_uid data type", t.data_type, "FLOAT");
    }
    if t.is_virtual {
        return refuse(uid, "sink_token_tensor_uid is_virtual", true, "false");
    }
    let heads = q.heads();
    let (stride, rank4) = match (&t.dims[..], &t.strides[..]) {
        ([h], [s]) if *h == heads && *s >= 1 => (*s, false),
        ([1, h, 1, 1], [_, s, _, _]) if *h == heads && *s >= 1 => (*s, true),
        _ => {
            return refuse(
                uid,
                "sink_token_tensor_uid dims / strides",
                format!("{:?} / {:?}", t.dims, t.strides),
                format!("[{heads}] or [1, {heads}, 1, 1]: one logit per query head, strides ≥ 1"),
            );
        }
    };
    Ok(Sinks {
        uid,
        heads,
        stride,
        rank4,
        alignment: t.alignment,
    })
}
