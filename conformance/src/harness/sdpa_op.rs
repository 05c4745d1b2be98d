//! What the harness needs to know about the graph's SDPA node: the uid of each role, the resolved
//! parameters for the CPU reference, and which output positions a correct engine writes
//! (ragged-sdpa.md §2 and §5: rows below `Lq(b)`), which is what coverage validation checks.

use std::collections::BTreeSet;

use ragged_kernels::sdpa::{DiagonalAlignment as KernelAlignment, MaskBand, SdpaParams};
use ragged_kernels::tensor::{Tensor, TensorExt};
use ragged_schema::model::{DiagonalAlignment, Graph, SdpaAttributes};

use crate::error::ConformanceError;

use super::bundle::Bundle;

/// The SDPA node's tensor roles.
#[derive(Debug, Clone)]
pub struct SdpaRoles {
    pub attrs: SdpaAttributes,
    pub outputs: BTreeSet<i64>,
}

impl SdpaRoles {
    pub fn of(graph: &Graph) -> Result<SdpaRoles, ConformanceError> {
        let [node] = graph.nodes.as_slice() else {
            return Err(ConformanceError::Harness(format!(
                "graph '{}' has {} nodes; the harness runs single-node SDPA graphs",
                graph.name,
                graph.nodes.len()
            )));
        };
        let attrs = node.attributes.as_sdpa().cloned().ok_or_else(|| {
            ConformanceError::Harness(format!(
                "node '{}' of graph '{}' is not SdpaAttributes",
                node.name, graph.name
            ))
        })?;
        let mut outputs = BTreeSet::from([attrs.o_tensor_uid]);
        outputs.extend(attrs.stats_tensor_uid);
        Ok(SdpaRoles { attrs, outputs })
    }

    /// Scale and mask as the plugin must resolve them (schema.md §6.1–§6.2): scale tensor's
    /// baked value, else `attn_scale_value`, else 1.0.
    pub fn params(&self, graph: &Graph, bundle: &Bundle) -> Result<SdpaParams, ConformanceError> {
        let scale = match self.attrs.scale_tensor_uid {
            Some(uid) => match graph.tensor(uid).and_then(|t| t.value) {
                Some(value) => value.as_f64() as f32,
                None => ragged_kernels::read_scalar_f32(bundle.get(uid)?).map_err(|e| {
                    ConformanceError::Harness(format!("reading scale tensor uid {uid}: {e}"))
                })?,
            },
            None => self.attrs.attn_scale_value.unwrap_or(1.0),
        };
        let band = self.attrs.resolve_diagonal_band().map_err(|e| {
            ConformanceError::Harness(format!("resolving the mask of the SDPA node: {e}"))
        })?;
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
    pub fn query_lengths(&self, bundle: &Bundle) -> Result<Vec<usize>, ConformanceError> {
        let q = bundle.get(self.attrs.q_tensor_uid)?;
        let batch = usize::try_from(q.dims().first().copied().unwrap_or(0)).unwrap_or(0);
        let extents: Vec<i64> = match q.ragged_iteration_info() {
            Some(info) => (0..info.batch_count()).map(|b| info.extent(b)).collect(),
            None => vec![q.dims().get(2).copied().unwrap_or(0); batch],
        };
        match self.attrs.seq_len_q_tensor_uid {
            None => Ok(extents.iter().map(|e| *e as usize).collect()),
            Some(uid) => {
                let lens = bundle.get(uid)?;
                (0..batch)
                    .map(|b| {
                        let v = read_index(lens, b)?;
                        let extent = extents[b];
                        if v < 0 || v > extent {
                            return Err(ConformanceError::Harness(format!(
                                "seq_len_q (uid {uid}) [{b}] = {v} is outside [0, extent {extent}]"
                            )));
                        }
                        Ok(v as usize)
                    })
                    .collect()
            }
        }
    }

    /// The buffer positions of output `uid` that a correct engine writes: every element of rows
    /// `s < Lq(b)`. O is `[B, S, H, D]` ragged or `[B, H, S, D]` dense; LSE likewise with D = 1.
    pub fn written_positions(
        &self,
        uid: i64,
        bundle: &Bundle,
    ) -> Result<BTreeSet<usize>, ConformanceError> {
        let lq = self.query_lengths(bundle)?;
        let t = bundle.get(uid)?;
        let dims = t.dims().to_vec();
        if dims.len() != 4 {
            return Err(ConformanceError::Harness(format!(
                "output uid {uid} has rank {}, expected 4",
                dims.len()
            )));
        }
        let ragged = t.ragged_iteration_info().is_some();
        let (heads, last) = if ragged {
            (dims[2], dims[3])
        } else {
            (dims[1], dims[3])
        };
        let mut out = BTreeSet::new();
        for (b, &rows) in lq.iter().enumerate() {
            for s in 0..rows as i64 {
                for h in 0..heads {
                    for d in 0..last {
                        let index = if ragged {
                            [b as i64, s, h, d]
                        } else {
                            [b as i64, h, s, d]
                        };
                        let position = t.get_index(&index).map_err(|e| {
                            ConformanceError::Harness(format!(
                                "output uid {uid} index {index:?}: {e}"
                            ))
                        })?;
                        out.insert(position);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Element `b` of a `[B, 1, 1, 1]` integer tensor.
fn read_index(t: &dyn Tensor, b: usize) -> Result<i64, ConformanceError> {
    let index = [b as i64, 0, 0, 0];
    let value = match t.host_data() {
        ragged_kernels::HostData::I32(_) => t.get::<i32>(&index).map(i64::from),
        ragged_kernels::HostData::I64(_) => t.get::<i64>(&index),
        other => {
            return Err(ConformanceError::Harness(format!(
                "seq_lens tensor has element type {}, expected i32 or i64",
                other.data_type()
            )));
        }
    };
    value.map_err(|e| ConformanceError::Harness(format!("reading seq_lens[{b}]: {e}")))
}
