//! Whole-operation validation: everything is checked before anything is computed or written.

use ragged_core::dtype::{DataType, HostData};
use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::{Tensor, TensorExt};

use super::layout::AttnLayout;
use super::paged::{self, PagedInputs};

/// A validated SDPA forward problem.
#[derive(Debug)]
pub(crate) struct Problem {
    pub dtype: DataType,
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub dim_qk: usize,
    pub dim_v: usize,
    /// Logical query rows Lq(b).
    pub len_q: Vec<usize>,
    /// Logical key rows Lkv(b).
    pub len_kv: Vec<usize>,
    pub q: AttnLayout,
    pub k: AttnLayout,
    pub v: AttnLayout,
    pub o: AttnLayout,
    pub lse: Option<AttnLayout>,
    /// One sink logit per query head.
    pub sinks: Option<Vec<f32>>,
}

/// The operands of one call, by role.
pub(crate) struct Operands<'a> {
    pub q: &'a dyn Tensor,
    pub k: &'a dyn Tensor,
    pub v: &'a dyn Tensor,
    pub o: &'a dyn Tensor,
    pub lse: Option<&'a dyn Tensor>,
    pub seq_len_q: Option<&'a dyn Tensor>,
    pub seq_len_kv: Option<&'a dyn Tensor>,
    pub paged: Option<PagedInputs<'a>>,
    pub sinks: Option<&'a dyn Tensor>,
}

pub(crate) fn dim_error(
    role: Role,
    field: &'static str,
    value: usize,
    expected: String,
) -> KernelError {
    KernelError::SdpaDim {
        role,
        field,
        value: value as i64,
        expected,
    }
}

pub(crate) fn expect_equal(
    role: Role,
    field: &'static str,
    value: usize,
    other: Role,
    expected: usize,
) -> Result<(), KernelError> {
    if value == expected {
        Ok(())
    } else {
        Err(dim_error(
            role,
            field,
            value,
            format!("{expected} (as {other})"),
        ))
    }
}

/// Ragged pairs (Q/O, K/V, Q/LSE) must split their batches identically (ragged-sdpa.md §3); a
/// dense partner only needs room for the logical rows, see [`expect_rows`].
pub(crate) fn expect_extents(
    role: Role,
    layout: &AttnLayout,
    other: Role,
    reference: &AttnLayout,
) -> Result<(), KernelError> {
    if !(layout.ragged && reference.ragged) {
        return Ok(());
    }
    for (b, (&extent, &other_extent)) in layout.extent.iter().zip(&reference.extent).enumerate() {
        if extent != other_extent {
            return Err(KernelError::ExtentMismatch {
                role,
                batch: b,
                extent: extent as i64,
                other,
                other_extent: other_extent as i64,
            });
        }
    }
    Ok(())
}

/// Every logical row `< lens[b]` must exist in `layout`'s batch b.
pub(crate) fn expect_rows(
    role: Role,
    layout: &AttnLayout,
    source_role: Role,
    lens: &[usize],
) -> Result<(), KernelError> {
    for (b, (&extent, &rows)) in layout.extent.iter().zip(lens).enumerate() {
        if rows > extent {
            return Err(KernelError::RowsBeyondExtent {
                role,
                batch: b,
                extent: extent as i64,
                rows: rows as i64,
                source_role,
            });
        }
    }
    Ok(())
}

/// Logical lengths: `seq_lens[b]` when given (checked against the extents), else the extents.
pub(crate) fn logical_lengths(
    role: Role,
    seq_lens: Option<&dyn Tensor>,
    extent: &[usize],
) -> Result<Vec<usize>, KernelError> {
    let Some(tensor) = seq_lens else {
        return Ok(extent.to_vec());
    };
    let batch = extent.len();
    let dtype = tensor.data_type();
    if !matches!(dtype, DataType::I32 | DataType::I64) {
        return Err(KernelError::SdpaDataType {
            role,
            dtype,
            expected: "i32 or i64".to_owned(),
        });
    }
    let dims = tensor.dims();
    if dims.first().copied() != Some(batch as i64) || tensor.element_count() != batch {
        return Err(KernelError::SdpaDim {
            role,
            field: "element count",
            value: tensor.element_count() as i64,
            expected: format!("B = {batch} as dims [B, 1, 1, 1] or [B]"),
        });
    }
    let mut index = vec![0i64; dims.len()];
    let mut read = |b: usize| -> Result<i64, KernelError> {
        index[0] = b as i64;
        let position = tensor.get_index(&index)?;
        match tensor.host_data() {
            HostData::I32(s) => Ok(i64::from(s[position])),
            HostData::I64(s) => Ok(s[position]),
            other => Err(KernelError::SdpaDataType {
                role,
                dtype: other.data_type(),
                expected: "i32 or i64".to_owned(),
            }),
        }
    };
    (0..batch)
        .map(|b| {
            let value = read(b)?;
            if value < 0 || value > extent[b] as i64 {
                return Err(KernelError::SeqLenOutOfRange {
                    role,
                    batch: b,
                    value,
                    extent: extent[b] as i64,
                });
            }
            Ok(value as usize)
        })
        .collect()
}

/// Validates every operand and their agreement (ragged-sdpa.md §3, §4).
pub(crate) fn validate(ops: &Operands<'_>) -> Result<Problem, KernelError> {
    let dtype = ops.q.data_type();
    if !dtype.is_float() {
        return Err(KernelError::SdpaDataType {
            role: Role::Q,
            dtype,
            expected: "f32, f16 or bf16".to_owned(),
        });
    }
    for (role, tensor) in [(Role::K, ops.k), (Role::V, ops.v), (Role::O, ops.o)] {
        if tensor.data_type() != dtype {
            return Err(KernelError::SdpaDataType {
                role,
                dtype: tensor.data_type(),
                expected: format!("{dtype} (as Q)"),
            });
        }
    }
    validate_geometry(ops, dtype)
}

/// Everything [`validate`] checks except Q's, K's, V's and O's element types, which the caller
/// has checked (the FP8 forward: FP8 Q, K, V and an O of another type); `dtype` is Q's.
pub(crate) fn validate_geometry(
    ops: &Operands<'_>,
    dtype: DataType,
) -> Result<Problem, KernelError> {
    if let Some(lse) = ops.lse
        && lse.data_type() != DataType::F32
    {
        return Err(KernelError::SdpaDataType {
            role: Role::Lse,
            dtype: lse.data_type(),
            expected: "f32".to_owned(),
        });
    }
    let q = AttnLayout::resolve(Role::Q, ops.q)?;
    let k = AttnLayout::resolve(Role::K, ops.k)?;
    let v = AttnLayout::resolve(Role::V, ops.v)?;
    let o = AttnLayout::resolve(Role::O, ops.o)?;
    let lse = ops
        .lse
        .map(|t| AttnLayout::resolve(Role::Lse, t))
        .transpose()?;

    let batch = q.batch;
    let pools = [(Role::K, &k), (Role::V, &v)];
    let batched = if ops.paged.is_some() {
        &[][..]
    } else {
        &pools[..]
    };
    for &(role, layout) in batched.iter().chain([(Role::O, &o)].iter()) {
        expect_equal(role, "batch", layout.batch, Role::Q, batch)?;
    }
    if q.heads == 0 {
        return Err(dim_error(Role::Q, "heads", 0, "at least 1".to_owned()));
    }
    if k.heads == 0 || q.heads % k.heads != 0 {
        return Err(dim_error(
            Role::K,
            "heads",
            k.heads,
            format!("a divisor of H_q = {}", q.heads),
        ));
    }
    expect_equal(Role::V, "heads", v.heads, Role::K, k.heads)?;
    for (role, layout) in [(Role::Q, &q), (Role::V, &v)] {
        if layout.head_dim == 0 {
            return Err(dim_error(role, "head_dim", 0, "at least 1".to_owned()));
        }
    }
    expect_equal(Role::O, "heads", o.heads, Role::Q, q.heads)?;
    expect_equal(Role::K, "head_dim", k.head_dim, Role::Q, q.head_dim)?;
    expect_equal(Role::O, "head_dim", o.head_dim, Role::V, v.head_dim)?;
    expect_extents(Role::O, &o, Role::Q, &q)?;
    expect_extents(Role::V, &v, Role::K, &k)?;
    if let Some(lse) = &lse {
        expect_extents(Role::Lse, lse, Role::Q, &q)?;
    }
    if let Some(lse) = &lse {
        expect_equal(Role::Lse, "batch", lse.batch, Role::Q, batch)?;
        expect_equal(Role::Lse, "heads", lse.heads, Role::Q, q.heads)?;
        if lse.head_dim != 1 {
            return Err(dim_error(
                Role::Lse,
                "last dim",
                lse.head_dim,
                "1".to_owned(),
            ));
        }
    }
    let sinks = ops
        .sinks
        .map(|t| paged::read_sinks(t, q.heads))
        .transpose()?;
    if let Some(paged) = &ops.paged {
        return validate_paged(ops, paged, dtype, [q, k, v, o], lse, sinks);
    }
    let len_q = logical_lengths(Role::SeqLenQ, ops.seq_len_q, &q.extent)?;
    let len_kv = logical_lengths(Role::SeqLenKv, ops.seq_len_kv, &k.extent)?;
    expect_rows(Role::O, &o, Role::Q, &len_q)?;
    expect_rows(Role::V, &v, Role::K, &len_kv)?;
    if let Some(lse) = &lse {
        expect_rows(Role::Lse, lse, Role::Q, &len_q)?;
    }
    Ok(Problem {
        dtype,
        batch,
        heads_q: q.heads,
        heads_kv: k.heads,
        dim_qk: q.head_dim,
        dim_v: v.head_dim,
        len_q,
        len_kv,
        q,
        k,
        v,
        o,
        lse,
        sinks,
    })
}

/// The paged part of [`validate`] (paged-kv-and-sinks.md §3, §5.2): B is the lengths' count, Q
/// (and O, LSE) is packed, padded or ragged, and K and V are pools read through page maps built
/// only after every length and every entry read has been checked.
fn validate_paged(
    ops: &Operands<'_>,
    paged: &PagedInputs<'_>,
    dtype: DataType,
    [q, k, v, o]: [AttnLayout; 4],
    lse: Option<AttnLayout>,
    sinks: Option<Vec<f32>>,
) -> Result<Problem, KernelError> {
    let missing = |role: Role| {
        dim_error(
            role,
            "presence",
            0,
            "a length tensor: a paged call delimits its sequences with seq_len_q and seq_len_kv"
                .to_owned(),
        )
    };
    let seq_len_q = ops.seq_len_q.ok_or_else(|| missing(Role::SeqLenQ))?;
    let seq_len_kv = ops.seq_len_kv.ok_or_else(|| missing(Role::SeqLenKv))?;
    let lens_q = paged::raw_lengths(Role::SeqLenQ, seq_len_q)?;
    let lens_kv = paged::raw_lengths(Role::SeqLenKv, seq_len_kv)?;
    let batch = lens_kv.len();
    expect_equal(
        Role::SeqLenQ,
        "element count",
        lens_q.len(),
        Role::SeqLenKv,
        batch,
    )?;
    let packed = !q.ragged && q.batch == 1 && batch != 1;
    let (q, o, lse) = if packed {
        let pack = |layout: &AttnLayout| paged::pack_rows(layout, &lens_q, Role::SeqLenQ);
        (pack(&q)?, pack(&o)?, lse.as_ref().map(pack).transpose()?)
    } else {
        expect_equal(Role::Q, "batch", q.batch, Role::SeqLenKv, batch)?;
        (q, o, lse)
    };
    let len_q = logical_lengths(Role::SeqLenQ, Some(seq_len_q), &q.extent)?;
    expect_rows(Role::O, &o, Role::Q, &len_q)?;
    if let Some(lse) = &lse {
        expect_equal(Role::Lse, "batch", lse.batch, Role::Q, q.batch)?;
        expect_rows(Role::Lse, lse, Role::Q, &len_q)?;
    }
    let k = paged::page_map(
        Role::PageTableK,
        paged.table_k,
        &k,
        &lens_kv,
        paged.max_seq_len_kv,
    )?;
    let v = paged::page_map(
        Role::PageTableV,
        paged.table_v,
        &v,
        &lens_kv,
        paged.max_seq_len_kv,
    )?;
    Ok(Problem {
        dtype,
        batch,
        heads_q: q.heads,
        heads_kv: k.heads,
        dim_qk: q.head_dim,
        dim_v: v.head_dim,
        len_q,
        len_kv: lens_kv,
        q,
        k,
        v,
        o,
        lse,
        sinks,
    })
}
