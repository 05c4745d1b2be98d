//! Whole-call validation of the backward: every operand and every agreement between them is
//! checked before a single output element is computed or written.

use crate::dtype::{DataType, HostData};
use crate::error::{KernelError, Role};
use crate::tensor::{Tensor, TensorExt};

use super::geometry::Geometry;
use super::{BackwardInputs, BackwardOutputs};

/// A validated backward problem.
#[derive(Debug)]
pub(super) struct Problem {
    pub dtype: DataType,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub dim_qk: usize,
    pub dim_v: usize,
    /// Logical query rows Lq(b).
    pub len_q: Vec<usize>,
    /// Logical key rows Lkv(b).
    pub len_kv: Vec<usize>,
    pub q: Geometry,
    pub k: Geometry,
    pub v: Geometry,
    pub o: Geometry,
    pub d_o: Geometry,
    pub lse: Geometry,
    pub dq: Geometry,
    pub dk: Geometry,
    pub dv: Geometry,
}

fn mismatch(role: Role, field: &'static str, value: usize, expected: String) -> KernelError {
    KernelError::SdpaDim {
        role,
        field,
        value: value as i64,
        expected,
    }
}

/// `value` of `role` must equal `expected`, which is `leader`'s.
fn same(
    role: Role,
    field: &'static str,
    value: usize,
    leader: Role,
    expected: usize,
) -> Result<(), KernelError> {
    if value == expected {
        return Ok(());
    }
    Err(mismatch(
        role,
        field,
        value,
        format!("{expected} (as {leader})"),
    ))
}

/// Two ragged operands of one group split their batches into the same row counts; a dense
/// member only needs room for the logical rows (checked with the lengths).
fn same_extents(
    role: Role,
    g: &Geometry,
    leader: Role,
    lead: &Geometry,
) -> Result<(), KernelError> {
    if !(g.ragged && lead.ragged) {
        return Ok(());
    }
    match g.extent.iter().zip(&lead.extent).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(b) => Err(KernelError::ExtentMismatch {
            role,
            batch: b,
            extent: g.extent[b] as i64,
            other: leader,
            other_extent: lead.extent[b] as i64,
        }),
    }
}

fn holds_rows(role: Role, g: &Geometry, source: Role, lens: &[usize]) -> Result<(), KernelError> {
    match g.extent.iter().zip(lens).position(|(e, l)| l > e) {
        None => Ok(()),
        Some(b) => Err(KernelError::RowsBeyondExtent {
            role,
            batch: b,
            extent: g.extent[b] as i64,
            rows: lens[b] as i64,
            source_role: source,
        }),
    }
}

/// `seq_lens[b]` for every batch, each within `0..=extent[b]`; the extents when absent.
fn lengths(
    role: Role,
    seq_lens: Option<&dyn Tensor>,
    extent: &[usize],
) -> Result<Vec<usize>, KernelError> {
    let Some(t) = seq_lens else {
        return Ok(extent.to_vec());
    };
    let batch = extent.len();
    if t.dims().first() != Some(&(batch as i64)) || t.element_count() != batch {
        return Err(KernelError::SdpaDim {
            role,
            field: "element count",
            value: t.element_count() as i64,
            expected: format!("B = {batch}, dims [B] or [B, 1, 1, 1]"),
        });
    }
    let mut index = vec![0i64; t.dims().len()];
    (0..batch)
        .map(|b| {
            index[0] = b as i64;
            let at = t.get_index(&index)?;
            let value = match t.host_data() {
                HostData::I32(s) => i64::from(s[at]),
                HostData::I64(s) => s[at],
                other => {
                    return Err(KernelError::SdpaDataType {
                        role,
                        dtype: other.data_type(),
                        expected: "i32 or i64".to_owned(),
                    });
                }
            };
            usize::try_from(value)
                .ok()
                .filter(|&v| v <= extent[b])
                .ok_or(KernelError::SeqLenOutOfRange {
                    role,
                    batch: b,
                    value,
                    extent: extent[b] as i64,
                })
        })
        .collect()
}

pub(super) fn validate(
    inputs: &BackwardInputs<'_>,
    outputs: &BackwardOutputs<'_>,
) -> Result<Problem, KernelError> {
    let dtype = inputs.q.data_type();
    if !dtype.is_float() {
        return Err(KernelError::SdpaDataType {
            role: Role::Q,
            dtype,
            expected: "f32, f16 or bf16".to_owned(),
        });
    }
    let operands: [(Role, &dyn Tensor); 9] = [
        (Role::Q, inputs.q),
        (Role::K, inputs.k),
        (Role::V, inputs.v),
        (Role::O, inputs.o),
        (Role::DO, inputs.d_o),
        (Role::DQ, &*outputs.dq),
        (Role::DK, &*outputs.dk),
        (Role::DV, &*outputs.dv),
        (Role::Lse, inputs.lse),
    ];
    for &(role, t) in &operands {
        let expected = if role == Role::Lse {
            DataType::F32
        } else {
            dtype
        };
        if t.data_type() != expected {
            return Err(KernelError::SdpaDataType {
                role,
                dtype: t.data_type(),
                expected: if role == Role::Lse {
                    "f32".to_owned()
                } else {
                    format!("{dtype} (as Q)")
                },
            });
        }
    }
    let [q, k, v, o, d_o, dq, dk, dv, lse] = operands.map(|(role, t)| Geometry::of(role, t));
    let (q, k, v, o, d_o, dq, dk, dv, lse) = (q?, k?, v?, o?, d_o?, dq?, dk?, dv?, lse?);

    for (role, g) in [
        (Role::K, &k),
        (Role::V, &v),
        (Role::O, &o),
        (Role::DO, &d_o),
        (Role::DQ, &dq),
        (Role::DK, &dk),
        (Role::DV, &dv),
        (Role::Lse, &lse),
    ] {
        same(role, "batch", g.batch, Role::Q, q.batch)?;
    }
    if q.heads == 0 {
        return Err(mismatch(Role::Q, "heads", 0, "at least 1".to_owned()));
    }
    if k.heads == 0 || q.heads % k.heads != 0 {
        return Err(mismatch(
            Role::K,
            "heads",
            k.heads,
            format!("a divisor of H_q = {}", q.heads),
        ));
    }
    for (role, g, leader, lead) in [
        (Role::V, &v, Role::K, &k),
        (Role::DK, &dk, Role::K, &k),
        (Role::DV, &dv, Role::V, &v),
        (Role::O, &o, Role::Q, &q),
        (Role::DO, &d_o, Role::Q, &q),
        (Role::DQ, &dq, Role::Q, &q),
        (Role::Lse, &lse, Role::Q, &q),
    ] {
        same(role, "heads", g.heads, leader, lead.heads)?;
    }
    for (role, g) in [(Role::Q, &q), (Role::V, &v)] {
        if g.width == 0 {
            return Err(mismatch(role, "head_dim", 0, "at least 1".to_owned()));
        }
    }
    for (role, g, leader, lead) in [
        (Role::K, &k, Role::Q, &q),
        (Role::DQ, &dq, Role::Q, &q),
        (Role::DK, &dk, Role::K, &k),
        (Role::O, &o, Role::V, &v),
        (Role::DO, &d_o, Role::V, &v),
        (Role::DV, &dv, Role::V, &v),
    ] {
        same(role, "head_dim", g.width, leader, lead.width)?;
    }
    if lse.width != 1 {
        return Err(mismatch(Role::Lse, "last dim", lse.width, "1".to_owned()));
    }
    for (role, g, leader, lead) in [
        (Role::O, &o, Role::Q, &q),
        (Role::DO, &d_o, Role::Q, &q),
        (Role::DQ, &dq, Role::Q, &q),
        (Role::Lse, &lse, Role::Q, &q),
        (Role::V, &v, Role::K, &k),
        (Role::DK, &dk, Role::K, &k),
        (Role::DV, &dv, Role::K, &k),
    ] {
        same_extents(role, g, leader, lead)?;
    }
    let len_q = lengths(Role::SeqLenQ, inputs.seq_len_q, &q.extent)?;
    let len_kv = lengths(Role::SeqLenKv, inputs.seq_len_kv, &k.extent)?;
    for (role, g) in [
        (Role::O, &o),
        (Role::DO, &d_o),
        (Role::DQ, &dq),
        (Role::Lse, &lse),
    ] {
        holds_rows(role, g, Role::Q, &len_q)?;
    }
    for (role, g) in [(Role::V, &v), (Role::DK, &dk), (Role::DV, &dv)] {
        holds_rows(role, g, Role::K, &len_kv)?;
    }
    Ok(Problem {
        dtype,
        heads_q: q.heads,
        heads_kv: k.heads,
        dim_qk: q.width,
        dim_v: v.width,
        len_q,
        len_kv,
        q,
        k,
        v,
        o,
        d_o,
        lse,
        dq,
        dk,
        dv,
    })
}
