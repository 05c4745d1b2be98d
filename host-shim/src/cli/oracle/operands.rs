//! Where each operand's elements live for the oracle (ragged-sdpa.md §1, §4; paged pools through
//! their tables, paged-kv-and-sinks.md §2.5), and the bundle's index and float inputs read exactly.

use hipdnn_shim::harness::Bundle;
use ragged_core::HostData;
use ragged_core::tensor::Tensor;
use ragged_schema::model::Graph;

/// Where element (b, s, h, d) of one operand lives.
#[derive(Debug, Clone)]
pub(super) struct Geometry {
    pub(super) uid: i64,
    pub(super) heads: usize,
    pub(super) width: usize,
    pub(super) seq_stride: i64,
    pub(super) head_stride: i64,
    pub(super) elem_stride: i64,
    /// Per batch: first element and sequence extent (rows).
    pub(super) base: Vec<i64>,
    pub(super) extent: Vec<i64>,
    pub(super) len: usize,
}

impl Geometry {
    pub(super) fn position(&self, b: usize, s: usize, h: usize, d: usize) -> Result<usize, String> {
        let at = self.base[b]
            + s as i64 * self.seq_stride
            + h as i64 * self.head_stride
            + d as i64 * self.elem_stride;
        usize::try_from(at)
            .ok()
            .filter(|&p| p < self.len)
            .ok_or_else(|| {
                format!(
                    "tensor uid {}: element (b {b}, s {s}, h {h}, d {d}) is at {at}, outside its {} elements",
                    self.uid, self.len
                )
            })
    }
}

/// Where key `j` of sequence `b`, KV head `g`, dim `d` of K or V lives: a per-sequence operand,
/// or a page pool `[P, H_kv, ps, D]` read through a page table (paged-kv-and-sinks.md §2.5).
pub(super) enum Keys {
    Plain(Geometry),
    Paged {
        uid: i64,
        /// The pool's dims and strides.
        dims: Vec<i64>,
        strides: Vec<i64>,
        /// `table[b][i]`, every entry of the table.
        table: Vec<Vec<i64>>,
        table_uid: i64,
        len: usize,
    },
}

impl Keys {
    pub(super) fn heads(&self) -> usize {
        match self {
            Keys::Plain(g) => g.heads,
            Keys::Paged { dims, .. } => dims[1] as usize,
        }
    }

    pub(super) fn width(&self) -> usize {
        match self {
            Keys::Plain(g) => g.width,
            Keys::Paged { dims, .. } => dims[3] as usize,
        }
    }

    pub(super) fn uid(&self) -> i64 {
        match self {
            Keys::Plain(g) => g.uid,
            Keys::Paged { uid, .. } => *uid,
        }
    }

    pub(super) fn position(&self, b: usize, j: usize, g: usize, d: usize) -> Result<usize, String> {
        let (uid, dims, strides, table, table_uid, len) = match self {
            Keys::Plain(geometry) => return geometry.position(b, j, g, d),
            Keys::Paged {
                uid,
                dims,
                strides,
                table,
                table_uid,
                len,
            } => (uid, dims, strides, table, table_uid, len),
        };
        let page_size = dims[2] as usize;
        let entry = j / page_size;
        let page = *table
            .get(b)
            .and_then(|row| row.get(entry))
            .ok_or_else(|| format!("page table uid {table_uid} has no entry [{b}][{entry}]"))?;
        if !(0..dims[0]).contains(&page) {
            return Err(format!(
                "page table uid {table_uid} [{b}][{entry}] = {page} is outside the {} pages of \
                 uid {uid}",
                dims[0]
            ));
        }
        let at = page * strides[0]
            + g as i64 * strides[1]
            + (j % page_size) as i64 * strides[2]
            + d as i64 * strides[3];
        usize::try_from(at)
            .ok()
            .filter(|&p| p < *len)
            .ok_or_else(|| format!("tensor uid {uid}: pool element {at} outside its {len}"))
    }
}

/// A page table as rows of page ids: `[B, MP]` or `[B, 1, MP, 1]`, any strides.
pub(super) fn page_table(
    graph: &Graph,
    bundle: &Bundle,
    uid: i64,
) -> Result<Vec<Vec<i64>>, String> {
    let attrs = graph
        .tensor(uid)
        .ok_or_else(|| format!("page table uid {uid} is not in the graph"))?;
    let (rows, columns, row_stride, column_stride) = match (&attrs.dims[..], &attrs.strides[..]) {
        ([b, mp], [sb, si]) => (*b, *mp, *sb, *si),
        ([b, 1, mp, 1], [sb, _, si, _]) => (*b, *mp, *sb, *si),
        (dims, _) => return Err(format!("page table uid {uid} has dims {dims:?}")),
    };
    let values = integers(tensor(bundle, uid)?, uid)?;
    (0..rows)
        .map(|b| {
            (0..columns)
                .map(|i| {
                    usize::try_from(b * row_stride + i * column_stride)
                        .ok()
                        .and_then(|p| values.get(p).copied())
                        .ok_or_else(|| format!("page table uid {uid} [{b}][{i}] is outside it"))
                })
                .collect()
        })
        .collect()
}

/// Packed rows (upstream's paged bundles): a dense `[1, H, T, D]` whose sequence `b` starts at
/// row `Σ_{c<b} lens[c]` becomes one batch per sequence.
pub(super) fn packed(g: Geometry, lens: &[usize]) -> Result<Geometry, String> {
    let rows = g.extent.first().copied().unwrap_or(0);
    let total: usize = lens.iter().sum();
    if total as i64 > rows {
        return Err(format!(
            "tensor uid {}: the lengths add up to {total} rows, above its {rows}",
            g.uid
        ));
    }
    let mut base = Vec::with_capacity(lens.len());
    let mut row = 0i64;
    for &len in lens {
        base.push(g.base[0] + row * g.seq_stride);
        row += len as i64;
    }
    Ok(Geometry {
        base,
        extent: lens.iter().map(|&l| l as i64).collect(),
        ..g
    })
}

/// One sink logit per query head: `[H]` or `[1, H, 1, 1]`, FLOAT.
pub(super) fn sink_logits(
    graph: &Graph,
    bundle: &Bundle,
    uid: i64,
    heads: usize,
) -> Result<Vec<f64>, String> {
    let attrs = graph
        .tensor(uid)
        .ok_or_else(|| format!("sink tensor uid {uid} is not in the graph"))?;
    let stride = match (&attrs.dims[..], &attrs.strides[..]) {
        ([h], [s]) if *h == heads as i64 => *s,
        ([1, h, 1, 1], [_, s, _, _]) if *h == heads as i64 => *s,
        (dims, _) => return Err(format!("sink tensor uid {uid} has dims {dims:?}")),
    };
    let values = floats(tensor(bundle, uid)?, uid)?;
    (0..heads as i64)
        .map(|h| {
            usize::try_from(h * stride)
                .ok()
                .and_then(|p| values.get(p).copied())
                .ok_or_else(|| format!("sink tensor uid {uid}: head {h} is outside it"))
        })
        .collect()
}

/// Which of axes 1 and 2 is the sequence axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum SeqAxis {
    One,
    Two,
}

/// The larger middle stride is the sequence axis; equal strides (one head) go by the larger dim.
pub(super) fn seq_axis_from_strides(dims: &[i64], strides: &[i64]) -> SeqAxis {
    match strides[1].cmp(&strides[2]) {
        std::cmp::Ordering::Greater => SeqAxis::One,
        std::cmp::Ordering::Less => SeqAxis::Two,
        std::cmp::Ordering::Equal if dims[2] > dims[1] => SeqAxis::Two,
        std::cmp::Ordering::Equal => SeqAxis::One,
    }
}

pub(super) fn tensor(bundle: &Bundle, uid: i64) -> Result<&dyn Tensor, String> {
    bundle.get(uid).map_err(|e| e.to_string())
}

/// Every element of an index tensor, widened.
pub(super) fn integers(t: &dyn Tensor, uid: i64) -> Result<Vec<i64>, String> {
    match t.host_data() {
        HostData::I32(s) => Ok(s.iter().map(|&v| i64::from(v)).collect()),
        HostData::I64(s) => Ok(s.to_vec()),
        other => Err(format!(
            "tensor uid {uid} holds {}; an index tensor must be INT32 or INT64",
            other.data_type()
        )),
    }
}

/// Every element of a floating-point tensor, exactly widened.
pub(super) fn floats(t: &dyn Tensor, uid: i64) -> Result<Vec<f64>, String> {
    match t.host_data() {
        HostData::F32(s) => Ok(s.iter().map(|&v| f64::from(v)).collect()),
        HostData::F16(s) => Ok(s.iter().map(|&v| f64::from(v)).collect()),
        HostData::BF16(s) => Ok(s.iter().map(|&v| f64::from(v)).collect()),
        HostData::Fp8(format, s) => {
            let table = super::fp8::Fp8Table::new(format);
            Ok(s.iter().map(|&c| table.value(c)).collect())
        }
        other => Err(format!(
            "tensor uid {uid} holds {}; SDPA operands are floating point",
            other.data_type()
        )),
    }
}

pub(super) fn geometry(
    graph: &Graph,
    bundle: &Bundle,
    uid: i64,
    dense_axis: SeqAxis,
) -> Result<Geometry, String> {
    let attrs = graph
        .tensor(uid)
        .ok_or_else(|| format!("tensor uid {uid} is not in the graph"))?;
    let (dims, strides) = (&attrs.dims, &attrs.strides);
    if dims.len() != 4 || strides.len() != 4 || dims.iter().any(|&d| d < 0) {
        return Err(format!(
            "tensor uid {uid}: dims {dims:?} / strides {strides:?} are not four non-negative axes"
        ));
    }
    let batch = dims[0] as usize;
    let (axis, base, extent) = match attrs.ragged_offset_tensor_uid {
        Some(aux) => {
            let axis = seq_axis_from_strides(dims, strides);
            let seq_stride = strides[if axis == SeqAxis::One { 1 } else { 2 }];
            let stored = integers(tensor(bundle, aux)?, aux)?;
            if stored.len() != batch + 1 || seq_stride <= 0 {
                return Err(format!(
                    "tensor uid {uid}: ragged_offset uid {aux} has {} values for B = {batch}, sequence stride {seq_stride}",
                    stored.len()
                ));
            }
            let offsets = stored
                .iter()
                .map(|&o| o.checked_mul(attrs.ragged_offset_multiplier))
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| format!("tensor uid {uid}: offset × multiplier overflows"))?;
            let mut extent = Vec::with_capacity(batch);
            for b in 0..batch {
                let span = offsets[b + 1] - offsets[b];
                if span < 0 || span % seq_stride != 0 {
                    return Err(format!(
                        "tensor uid {uid}: batch {b} spans {span} elements, not whole rows of {seq_stride}"
                    ));
                }
                extent.push(span / seq_stride);
            }
            (axis, offsets[..batch].to_vec(), extent)
        }
        None => {
            let seq_dim = dims[if dense_axis == SeqAxis::One { 1 } else { 2 }];
            let base = (0..batch as i64).map(|b| b * strides[0]).collect();
            (dense_axis, base, vec![seq_dim; batch])
        }
    };
    let (s, h) = if axis == SeqAxis::One { (1, 2) } else { (2, 1) };
    Ok(Geometry {
        uid,
        heads: dims[h] as usize,
        width: dims[3] as usize,
        seq_stride: strides[s],
        head_stride: strides[h],
        elem_stride: strides[3],
        base,
        extent,
        len: tensor(bundle, uid)?.host_data().len(),
    })
}

/// `seq_lens[b]` when the node names the tensor, else the extent; always inside `[0, extent]`.
pub(super) fn lengths(
    bundle: &Bundle,
    of: &Geometry,
    seq_lens: Option<i64>,
) -> Result<Vec<usize>, String> {
    let given = match seq_lens {
        Some(uid) => Some((uid, integers(tensor(bundle, uid)?, uid)?)),
        None => None,
    };
    (0..of.extent.len())
        .map(|b| {
            let extent = of.extent[b];
            let length = match &given {
                Some((uid, values)) => *values
                    .get(b)
                    .ok_or_else(|| format!("seq_lens uid {uid} has no value for batch {b}"))?,
                None => extent,
            };
            if !(0..=extent).contains(&length) {
                return Err(format!(
                    "batch {b}: length {length} is outside [0, {extent}] of tensor uid {}",
                    of.uid
                ));
            }
            Ok(length as usize)
        })
        .collect()
}

/// The LSE's geometry: a dense one is head-major or token-major by which dims match Q's.
pub(super) fn stats_geometry(
    graph: &Graph,
    bundle: &Bundle,
    uid: i64,
    q: &Geometry,
    s_q_max: i64,
) -> Result<Geometry, String> {
    let attrs = graph
        .tensor(uid)
        .ok_or_else(|| format!("stats tensor uid {uid} is not in the graph"))?;
    let dims = &attrs.dims;
    let heads = q.heads as i64;
    let order = if dims.len() == 4 && dims[1] == s_q_max && dims[2] == heads && heads != s_q_max {
        SeqAxis::One
    } else {
        SeqAxis::Two
    };
    geometry(graph, bundle, uid, order)
}
