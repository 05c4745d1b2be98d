//! Paged K/V and attention sinks in the CPU reference (kernels/core/paged-kv-and-sinks.md).
//!
//! Paging changes only where rows come from: a paged K or V is a pool `[P, H_kv, ps, D]` whose
//! sequence `b` reads page `T[b][⌊j / ps⌋]`, slot `j mod ps`, which `page_map` resolves once
//! into a `PageMap` after checking every entry a sequence reads against the pool; staging then
//! gathers the logical rows through it exactly as it gathers a ragged tensor's. Packed queries
//! (upstream's `[1, H_q, T_q, D]`) become one batch per sequence in `pack_rows`.
//!
//! Sinks change only the softmax denominator, so they are applied to the finished rows
//! (`apply_sinks`) instead of inside the tile: with `L` the row's LSE over its admitted keys,
//! `L' = ln(e^s + e^L)` and every probability, hence O, scales by `e^(L − L')`.

use ragged_core::dtype::{DataType, HostData};
use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::{Tensor, TensorExt};

use super::layout::{AttnLayout, PageMap};

/// The page tables of a paged call; the pools are the call's K and V.
#[derive(Clone, Copy)]
pub struct PagedInputs<'a> {
    /// K's table: INT32 `[B, MP]` or `[B, 1, MP, 1]`.
    pub table_k: &'a dyn Tensor,
    /// V's table, of the same form.
    pub table_v: &'a dyn Tensor,
    /// `max_seq_len_kv` when the graph sets it; every `Lkv(b)` must respect it (and the tables'
    /// capacity whether it is set or not).
    pub max_seq_len_kv: Option<i64>,
}

/// What a forward may add to Q, K, V, O and the LSE.
#[derive(Clone, Copy, Default)]
pub struct ForwardExtras<'a> {
    /// Paged K/V: `k` and `v` are page pools read through these tables.
    pub paged: Option<PagedInputs<'a>>,
    /// Per-query-head sink logits, FLOAT `[H_q]` or `[1, H_q, 1, 1]`.
    pub sinks: Option<&'a dyn Tensor>,
}

fn index_error(role: Role, tensor: &dyn Tensor) -> KernelError {
    KernelError::SdpaDataType {
        role,
        dtype: tensor.data_type(),
        expected: "i32".to_owned(),
    }
}

/// `(rows, columns)` of a page table and a reader of entry `(b, i)`.
fn table_shape(role: Role, table: &dyn Tensor) -> Result<(usize, usize), KernelError> {
    if table.data_type() != DataType::I32 {
        return Err(index_error(role, table));
    }
    let dims = table.dims();
    let shape = match dims {
        [b, mp] => Some((*b, *mp)),
        [b, 1, mp, 1] => Some((*b, *mp)),
        _ => None,
    };
    let to_usize = |x: i64| usize::try_from(x).ok();
    shape
        .and_then(|(b, mp)| Some((to_usize(b)?, to_usize(mp)?)))
        .ok_or_else(|| KernelError::SdpaDim {
            role,
            field: "dims",
            value: dims.len() as i64,
            expected: format!("[B, MP] or [B, 1, MP, 1] with non-negative dims, got {dims:?}"),
        })
}

fn table_entry(role: Role, table: &dyn Tensor, b: usize, i: usize) -> Result<i64, KernelError> {
    let index: Vec<i64> = if table.dims().len() == 2 {
        vec![b as i64, i as i64]
    } else {
        vec![b as i64, 0, i as i64, 0]
    };
    let position = table.get_index(&index)?;
    match table.host_data() {
        HostData::I32(s) => Ok(i64::from(s[position])),
        _ => Err(index_error(role, table)),
    }
}

/// Every element of a `[B]` or `[B, 1, 1, 1]` length tensor, checked non-negative.
pub(crate) fn raw_lengths(role: Role, tensor: &dyn Tensor) -> Result<Vec<usize>, KernelError> {
    let batch = tensor.dims().first().copied().unwrap_or(0);
    let batch = usize::try_from(batch).map_err(|_| KernelError::SdpaDim {
        role,
        field: "dims[0]",
        value: batch,
        expected: "non-negative".to_owned(),
    })?;
    if tensor.element_count() != batch {
        return Err(KernelError::SdpaDim {
            role,
            field: "element count",
            value: tensor.element_count() as i64,
            expected: format!("B = {batch} as dims [B, 1, 1, 1] or [B]"),
        });
    }
    let mut index = vec![0i64; tensor.dims().len()];
    (0..batch)
        .map(|b| {
            index[0] = b as i64;
            let position = tensor.get_index(&index)?;
            let value = match tensor.host_data() {
                HostData::I32(s) => i64::from(s[position]),
                HostData::I64(s) => s[position],
                other => {
                    return Err(KernelError::SdpaDataType {
                        role,
                        dtype: other.data_type(),
                        expected: "i32 or i64".to_owned(),
                    });
                }
            };
            usize::try_from(value).map_err(|_| KernelError::SeqLenOutOfRange {
                role,
                batch: b,
                value,
                extent: i64::MAX,
            })
        })
        .collect()
}

/// The pool layout `pool` (batch = pages, extent = page size) turned into the layout of the
/// sequences that read it through `table`: every entry a sequence of `lens` reads is checked to
/// name a page of the pool before the map exists, and every length against the table's reach
/// and `max_seq_len_kv`.
pub(crate) fn page_map(
    role: Role,
    table: &dyn Tensor,
    pool: &AttnLayout,
    lens: &[usize],
    max_seq_len_kv: Option<i64>,
) -> Result<AttnLayout, KernelError> {
    let (rows, columns) = table_shape(role, table)?;
    if rows != lens.len() {
        return Err(KernelError::SdpaDim {
            role,
            field: "rows (dims[0])",
            value: rows as i64,
            expected: format!("B = {}, one per sequence", lens.len()),
        });
    }
    let page_size = pool.extent.first().copied().unwrap_or(0);
    let pages = pool.batch;
    // In i128: a table's reach (columns × page size) need not fit i64.
    let capacity = columns as i128 * page_size as i128;
    let (max, why) = match max_seq_len_kv.map(i128::from) {
        Some(m) if m < capacity => (m, "max_seq_len_kv"),
        _ => (capacity, "the page table's columns × page size"),
    };
    let mut first = Vec::with_capacity(lens.len());
    let mut page_base = Vec::new();
    for (b, &len) in lens.iter().enumerate() {
        if len as i128 > max {
            return Err(KernelError::PagedLengthAboveMax {
                role: Role::SeqLenKv,
                batch: b,
                value: len as i64,
                max: i64::try_from(max).unwrap_or(i64::MAX),
                why: why.to_owned(),
            });
        }
        first.push(page_base.len());
        for i in 0..len.div_ceil(page_size.max(1)) {
            let value = table_entry(role, table, b, i)?;
            let page = usize::try_from(value).ok().filter(|&p| p < pages).ok_or(
                KernelError::PageIdOutOfRange {
                    role,
                    batch: b,
                    entry: i,
                    value,
                    pages: pages as i64,
                },
            )?;
            page_base.push(pool.base[page]);
        }
    }
    Ok(AttnLayout {
        ragged: false,
        batch: lens.len(),
        base: vec![0; lens.len()],
        extent: lens.to_vec(),
        pages: Some(PageMap {
            page_size,
            first,
            page_base,
        }),
        ..pool.clone()
    })
}

/// A dense `[1, H, T, D]` operand whose rows hold every sequence back to back, as one batch per
/// sequence: sequence `b` starts at row `Σ_{c<b} lens[c]` and has `lens[b]` rows.
pub(crate) fn pack_rows(
    layout: &AttnLayout,
    lens: &[usize],
    length_role: Role,
) -> Result<AttnLayout, KernelError> {
    let total = layout.extent.first().copied().unwrap_or(0);
    let mut base = Vec::with_capacity(lens.len());
    let mut row = 0usize;
    for (b, &len) in lens.iter().enumerate() {
        base.push(layout.base[0] + row * layout.stride_s);
        row = row.saturating_add(len);
        if row > total {
            return Err(KernelError::PackedRowsBeyondExtent {
                role: length_role,
                batch: b,
                rows: row as i64,
                extent: total as i64,
            });
        }
    }
    Ok(AttnLayout {
        batch: lens.len(),
        base,
        extent: lens.to_vec(),
        ..layout.clone()
    })
}

/// One FLOAT logit per query head.
pub(crate) fn read_sinks(tensor: &dyn Tensor, heads: usize) -> Result<Vec<f32>, KernelError> {
    let role = Role::Sinks;
    if tensor.data_type() != DataType::F32 {
        return Err(KernelError::SdpaDataType {
            role,
            dtype: tensor.data_type(),
            expected: "f32".to_owned(),
        });
    }
    let rank4 = match tensor.dims() {
        [h] if *h == heads as i64 => false,
        [1, h, 1, 1] if *h == heads as i64 => true,
        dims => {
            return Err(KernelError::SdpaDim {
                role,
                field: "dims",
                value: dims.len() as i64,
                expected: format!("[{heads}] or [1, {heads}, 1, 1] (H_q), got {dims:?}"),
            });
        }
    };
    let HostData::F32(values) = tensor.host_data() else {
        return Err(KernelError::SdpaDataType {
            role,
            dtype: tensor.data_type(),
            expected: "f32".to_owned(),
        });
    };
    (0..heads as i64)
        .map(|h| {
            let index = if rank4 { vec![0, h, 0, 0] } else { vec![h] };
            Ok(values[tensor.get_index(&index)?])
        })
        .collect()
}

/// `ln(e^a + e^b)` with both infinities and NaN handled: NaN propagates, two −∞ stay −∞.
fn log_add_exp(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let m = a.max(b);
    if m.is_infinite() {
        return m;
    }
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// Folds a head's sink into one finished row: the LSE becomes `ln(e^s + e^L)` and O scales by
/// `e^(L − L')` (paged-kv-and-sinks.md §6.2–§6.4; an empty row keeps O = 0 and gets LSE = s).
pub(crate) fn fold_sink(o: &mut [f32], lse: &mut f32, sink: f32) {
    let old = f64::from(*lse);
    let new = log_add_exp(f64::from(sink), old);
    let factor = if old == f64::NEG_INFINITY || new == f64::INFINITY {
        // No admitted key (O is already 0), or a sink that takes every weight.
        0.0
    } else {
        (old - new).exp()
    };
    let factor = if new.is_nan() { f64::NAN } else { factor } as f32;
    for x in o {
        *x *= factor;
    }
    *lse = new as f32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_add_exp_edges() {
        assert_eq!(
            log_add_exp(f64::NEG_INFINITY, f64::NEG_INFINITY),
            f64::NEG_INFINITY
        );
        assert_eq!(log_add_exp(2.0, f64::NEG_INFINITY), 2.0);
        assert_eq!(log_add_exp(f64::INFINITY, 1.0), f64::INFINITY);
        assert!(log_add_exp(f64::NAN, 1.0).is_nan());
        assert!((log_add_exp(0.0, 0.0) - 2f64.ln()).abs() < 1e-15);
    }
}
