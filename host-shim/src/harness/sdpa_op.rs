//! What the harness needs to know about the graph's SDPA node: the uid of each role, the resolved
//! parameters for the CPU reference, and which output positions a correct engine writes
//! (ragged-sdpa.md §2 and §5: rows below `Lq(b)`), which is what coverage validation checks.

use std::collections::BTreeSet;

use ragged_core::problem::dense_stats_axes;
use ragged_core::tensor::{Tensor, TensorExt};
use ragged_reference::sdpa::{DiagonalAlignment as KernelAlignment, MaskBand, SdpaParams};
use ragged_schema::model::{DiagonalAlignment, Graph, SdpaAttributes};

use crate::host_error::HostError;

use super::bundle::Bundle;

/// The SDPA node's tensor roles.
#[derive(Debug, Clone)]
pub struct SdpaRoles {
    pub attrs: SdpaAttributes,
    pub outputs: BTreeSet<i64>,
}

impl SdpaRoles {
    pub fn of(graph: &Graph) -> Result<SdpaRoles, HostError> {
        let [node] = graph.nodes.as_slice() else {
            return Err(HostError::Harness(format!(
                "graph '{}' has {} nodes; the harness runs single-node SDPA graphs",
                graph.name,
                graph.nodes.len()
            )));
        };
        let attrs = node.attributes.as_sdpa().ok_or_else(|| {
            HostError::Harness(format!(
                "node '{}' of graph '{}' is not SdpaAttributes",
                node.name, graph.name
            ))
        })?;
        Ok(SdpaRoles::of_node(attrs))
    }

    /// The roles of one SDPA node of a (possibly multi-node) graph.
    pub fn of_node(attrs: &SdpaAttributes) -> SdpaRoles {
        let mut outputs = BTreeSet::from([attrs.o_tensor_uid]);
        outputs.extend(attrs.stats_tensor_uid);
        outputs.extend(attrs.amax_s_tensor_uid);
        outputs.extend(attrs.amax_o_tensor_uid);
        SdpaRoles {
            attrs: attrs.clone(),
            outputs,
        }
    }

    /// Scale and mask as the plugin must resolve them (schema.md §6.1–§6.2): scale tensor's
    /// baked value, else `attn_scale_value`, else 1.0.
    pub fn params(&self, graph: &Graph, bundle: &Bundle) -> Result<SdpaParams, HostError> {
        let scale = match self.attrs.scale_tensor_uid {
            Some(uid) => match graph.tensor(uid).and_then(|t| t.value) {
                Some(value) => value.as_f64() as f32,
                None => ragged_core::read_scalar_f32(bundle.get(uid)?).map_err(|e| {
                    HostError::Harness(format!("reading scale tensor uid {uid}: {e}"))
                })?,
            },
            None => self.attrs.attn_scale_value.unwrap_or(1.0),
        };
        let band = self
            .attrs
            .resolve_diagonal_band()
            .map_err(|e| HostError::Harness(format!("resolving the mask of the SDPA node: {e}")))?;
        Ok(SdpaParams {
            scale,
            band: MaskBand::window(
                band.left,
                band.right,
                match band.alignment {
                    DiagonalAlignment::BottomRight => KernelAlignment::BottomRight,
                    _ => KernelAlignment::TopLeft,
                },
            ),
        })
    }

    /// `Lq(b)` for every batch: `seq_len_q[b]` when present, else Q's extent (ragged) or its
    /// sequence dim (dense `[B, H, S, D]`).
    pub fn query_lengths(&self, bundle: &Bundle) -> Result<Vec<usize>, HostError> {
        if self.is_paged() {
            return paged_lengths(bundle, self.attrs.seq_len_q_tensor_uid, "seq_len_q");
        }
        logical_lengths(
            bundle,
            self.attrs.q_tensor_uid,
            self.attrs.seq_len_q_tensor_uid,
            "seq_len_q",
        )
    }

    /// `Lkv(b)` for every batch, from K and `seq_len_kv` as [`SdpaRoles::query_lengths`] does.
    pub fn key_lengths(&self, bundle: &Bundle) -> Result<Vec<usize>, HostError> {
        if self.is_paged() {
            return paged_lengths(bundle, self.attrs.seq_len_kv_tensor_uid, "seq_len_kv");
        }
        logical_lengths(
            bundle,
            self.attrs.k_tensor_uid,
            self.attrs.seq_len_kv_tensor_uid,
            "seq_len_kv",
        )
    }

    /// The positions of O whose rows admit no key (`Lkv(b) = 0`, or a band that misses every
    /// key): ragged-sdpa.md §8 wants them exactly 0, which a tolerance alone would not enforce.
    pub fn exact_zero_positions(&self, bundle: &Bundle) -> Result<BTreeSet<usize>, HostError> {
        let band = self
            .attrs
            .resolve_diagonal_band()
            .map_err(|e| HostError::Harness(format!("resolving the mask of the SDPA node: {e}")))?;
        let band = MaskBand::window(
            band.left,
            band.right,
            match band.alignment {
                DiagonalAlignment::BottomRight => KernelAlignment::BottomRight,
                _ => KernelAlignment::TopLeft,
            },
        );
        let lkv = self.key_lengths(bundle)?;
        let rows = self
            .query_lengths(bundle)?
            .iter()
            .zip(&lkv)
            .map(|(&lq, &lkv)| {
                (0..lq)
                    .filter(|&i| band.admitted(i, lq, lkv).is_empty())
                    .collect()
            })
            .collect::<Vec<Vec<usize>>>();
        self.row_positions(self.attrs.o_tensor_uid, bundle, |b| {
            rows.get(b).map_or(&[][..], Vec::as_slice).iter().copied()
        })
    }

    /// The buffer positions of output `uid` that a correct engine writes: every element of rows
    /// `s < Lq(b)`. O is `[B, S, H, D]` ragged or `[B, H, S, D]` dense; LSE likewise with D = 1.
    pub fn written_positions(
        &self,
        uid: i64,
        bundle: &Bundle,
    ) -> Result<BTreeSet<usize>, HostError> {
        if super::fp8::is_amax(&self.attrs, uid) {
            // One element, written whatever the lengths (0 when no row sees a key).
            let t = bundle.get(uid)?;
            let position = t
                .get_index(&vec![0; t.dims().len()])
                .map_err(|e| HostError::Harness(format!("amax uid {uid}: {e}")))?;
            return Ok(BTreeSet::from([position]));
        }
        let lq = self.query_lengths(bundle)?;
        self.row_positions(uid, bundle, |b| 0..lq.get(b).copied().unwrap_or(0))
    }

    /// Whether K and V are page pools (paged-kv-and-sinks.md): the lengths are then the
    /// sequences' own, not bounded by K's dims.
    fn is_paged(&self) -> bool {
        self.attrs.page_table_k_tensor_uid.is_some()
    }

    /// Per sequence: the output batch its rows are in and the row they start at. A paged graph's
    /// dense Q of one row holds every sequence back to back (paged-kv-and-sinks.md §3.3).
    fn sequence_starts(&self, bundle: &Bundle) -> Result<Vec<(usize, usize)>, HostError> {
        let lq = self.query_lengths(bundle)?;
        let q = bundle.get(self.attrs.q_tensor_uid)?;
        let packed = self.is_paged()
            && q.ragged_iteration_info().is_none()
            && q.dims().first() == Some(&1)
            && lq.len() != 1;
        if !packed {
            return Ok((0..lq.len()).map(|b| (b, 0)).collect());
        }
        let mut row = 0;
        Ok(lq
            .iter()
            .map(|&len| {
                let start = (0, row);
                row += len;
                start
            })
            .collect())
    }

    /// The sequence axis of output `uid` (1 or 2): a ragged tensor's own, a dense O's 2 (hipDNN's
    /// `[B, H, S, D]`), a dense LSE's by matching its dims against Q's S_max and heads
    /// (ragged-sdpa.md §4: either order, any strides).
    fn seq_axis(&self, t: &dyn Tensor, uid: i64, bundle: &Bundle) -> Result<usize, HostError> {
        if let Some(info) = t.ragged_iteration_info() {
            return Ok(info.seq_axis);
        }
        if Some(uid) != self.attrs.stats_tensor_uid {
            return Ok(2);
        }
        let q = bundle.get(self.attrs.q_tensor_uid)?;
        let q_seq = q.ragged_iteration_info().map_or(2, |i| i.seq_axis);
        let (q_dims, dims) = (q.dims(), t.dims());
        let four = |d: &[i64]| <[i64; 4]>::try_from(d).ok();
        let (Some(q_dims), Some(dims)) = (four(q_dims), four(dims)) else {
            return Err(HostError::Harness(format!(
                "LSE uid {uid} or Q has a rank other than 4"
            )));
        };
        dense_stats_axes(&dims, q_dims[q_seq], q_dims[3 - q_seq])
            .map(|axes| axes.seq)
            .ok_or_else(|| {
                HostError::Harness(format!(
                    "LSE uid {uid} dims {dims:?} match neither order of Q's dims {q_dims:?}"
                ))
            })
    }

    /// Every element of the rows `rows(b)` of output `uid`, for every batch and head.
    fn row_positions<I: Iterator<Item = usize>>(
        &self,
        uid: i64,
        bundle: &Bundle,
        rows: impl Fn(usize) -> I,
    ) -> Result<BTreeSet<usize>, HostError> {
        let t = bundle.get(uid)?;
        let dims = t.dims().to_vec();
        if dims.len() != 4 {
            return Err(HostError::Harness(format!(
                "output uid {uid} has rank {}, expected 4",
                dims.len()
            )));
        }
        let seq_axis = self.seq_axis(t, uid, bundle)?;
        let (heads, last) = (dims[3 - seq_axis], dims[3]);
        let batch = usize::try_from(dims[0]).unwrap_or(0);
        let starts = if self.is_paged() {
            self.sequence_starts(bundle)?
        } else {
            (0..batch).map(|b| (b, 0)).collect()
        };
        let mut out = BTreeSet::new();
        for (b, &(tensor_batch, first)) in starts.iter().enumerate() {
            for s in rows(b) {
                let s = (first + s) as i64;
                for h in 0..heads {
                    for d in 0..last {
                        let mut index = [tensor_batch as i64, 0, 0, d];
                        index[seq_axis] = s;
                        index[3 - seq_axis] = h;
                        let position = t.get_index(&index).map_err(|e| {
                            HostError::Harness(format!("output uid {uid} index {index:?}: {e}"))
                        })?;
                        out.insert(position);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Logical lengths of `primary`'s batches: `seq_lens[b]` when the node names a seq_lens tensor
/// (checked against the extents), else the extents (ragged) or the sequence dim (dense).
fn logical_lengths(
    bundle: &Bundle,
    primary: i64,
    seq_lens_uid: Option<i64>,
    field: &str,
) -> Result<Vec<usize>, HostError> {
    let t = bundle.get(primary)?;
    let batch = usize::try_from(t.dims().first().copied().unwrap_or(0)).unwrap_or(0);
    let extents: Vec<i64> = match t.ragged_iteration_info() {
        Some(info) => (0..info.batch_count()).map(|b| info.extent(b)).collect(),
        // A dense primary is hipDNN's [B, H, S, D].
        None => vec![t.dims().get(2).copied().unwrap_or(0); batch],
    };
    match seq_lens_uid {
        None => Ok(extents.iter().map(|e| *e as usize).collect()),
        Some(uid) => {
            let lens = bundle.get(uid)?;
            (0..batch)
                .map(|b| {
                    let v = read_index(lens, uid, b)?;
                    let extent = extents[b];
                    if v < 0 || v > extent {
                        return Err(HostError::Harness(format!(
                            "{field} (uid {uid}) [{b}] = {v} is outside [0, extent {extent}]"
                        )));
                    }
                    Ok(v as usize)
                })
                .collect()
        }
    }
}

/// A paged graph's lengths: every entry of its `[B]` or `[B, 1, 1, 1]` tensor, which bounds
/// nothing else the harness reads (the page tables and `max_seq_len_kv` bound `seq_len_kv`).
fn paged_lengths(
    bundle: &Bundle,
    seq_lens_uid: Option<i64>,
    field: &str,
) -> Result<Vec<usize>, HostError> {
    let uid = seq_lens_uid
        .ok_or_else(|| HostError::Harness(format!("a paged SDPA node without {field}")))?;
    let lens = bundle.get(uid)?;
    let batch = usize::try_from(lens.dims().first().copied().unwrap_or(0)).unwrap_or(0);
    (0..batch)
        .map(|b| {
            let v = read_index(lens, uid, b)?;
            usize::try_from(v)
                .map_err(|_| HostError::Harness(format!("{field} (uid {uid}) [{b}] = {v}")))
        })
        .collect()
}

/// Element `b` of a `[B, 1, 1, 1]` or `[B]` integer tensor.
fn read_index(t: &dyn Tensor, uid: i64, b: usize) -> Result<i64, HostError> {
    let mut index = vec![0; t.dims().len().max(1)];
    index[0] = b as i64;
    let value = match t.host_data() {
        ragged_core::HostData::I32(_) => t.get::<i32>(&index).map(i64::from),
        ragged_core::HostData::I64(_) => t.get::<i64>(&index),
        other => {
            return Err(HostError::Harness(format!(
                "seq_lens tensor uid {uid} has element type {}, expected i32 or i64",
                other.data_type()
            )));
        }
    };
    value.map_err(|e| HostError::Harness(format!("reading seq_lens tensor uid {uid} [{b}]: {e}")))
}
