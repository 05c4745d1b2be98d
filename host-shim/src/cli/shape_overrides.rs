//! `run --override-*`: the shapes of one `ExecuteOpGraphWithOverrides` call (RFC 0008,
//! plugin-abi.md §4). The plan is compiled for the graph file; the call's overrides are every
//! tensor whose dims or strides differ in the *target* graph built here, and the shim allocates,
//! fills and verifies the target's buffers — what a user of a compiled plan serving a new batch
//! size B and a new S_max does.
//!
//! `--override-batch` / `--override-seq-q` / `--override-seq-kv` resize a single-SDPA graph:
//! B of every tensor with a batch axis (auxes become `[B+1, 1, 1, 1]`), S_max of Q, O and LSE,
//! or of K and V; strides are repacked in each tensor's own stride order, so BSHD memory stays
//! BSHD in either dims order. `--override-shape UID:DIMS[:STRIDES]` sets one tensor exactly
//! (comma-separated, strides packed row-major when omitted), after the resizing.

use ragged_schema::model::{Graph, TensorAttributes};

use crate::error::ShimError;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverrideArgs {
    pub batch: Option<i64>,
    pub seq_q: Option<i64>,
    pub seq_kv: Option<i64>,
    pub shapes: Vec<String>,
}

fn bad(message: String) -> ShimError {
    ShimError::Override(message)
}

/// Strides packed over `dims` in the order of `like`'s strides (largest stride outermost; ties
/// keep the axis order).
fn repack(dims: &[i64], like: &[i64]) -> Vec<i64> {
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by(|&a, &b| like[b].cmp(&like[a]).then(a.cmp(&b)));
    let mut strides = vec![0; dims.len()];
    let mut step = 1;
    for &axis in order.iter().rev() {
        strides[axis] = step;
        step *= dims[axis].max(1);
    }
    strides
}

/// The sequence axis of an SDPA operand: a ragged one's larger middle stride, a dense one's 2
/// (hipDNN's `[B, H, S, D]`); an LSE's by which middle dim is S_max.
fn seq_axis(t: &TensorAttributes, s_max: Option<i64>, heads: Option<i64>) -> usize {
    if t.is_ragged() {
        return 3 - t.sdpa_head_axis();
    }
    match (s_max, heads) {
        (Some(s), Some(h)) if t.dims.len() == 4 && t.dims[1] == s && t.dims[2] == h && h != s => 1,
        _ => 2,
    }
}

fn resize(t: &mut TensorAttributes, batch: Option<i64>, seq: Option<(usize, i64)>) {
    if t.dims.len() != t.strides.len() || t.dims.is_empty() {
        return;
    }
    let mut dims = t.dims.clone();
    if let Some(b) = batch {
        dims[0] = b;
    }
    if let Some((axis, s)) = seq
        && axis < dims.len()
    {
        dims[axis] = s;
    }
    if dims != t.dims {
        t.strides = repack(&dims, &t.strides);
        t.dims = dims;
    }
}

fn list(text: &str, what: &str, spec: &str) -> Result<Vec<i64>, ShimError> {
    text.split(',')
        .map(|v| {
            v.trim().parse::<i64>().map_err(|_| {
                bad(format!(
                    "--override-shape '{spec}': {what} entry '{v}' is not an integer"
                ))
            })
        })
        .collect()
}

impl OverrideArgs {
    pub fn is_empty(&self) -> bool {
        *self == OverrideArgs::default()
    }

    /// The graph whose shapes this call runs with.
    pub fn target(&self, compiled: &Graph) -> Result<Graph, ShimError> {
        let mut graph = compiled.clone();
        if self.batch.is_some() || self.seq_q.is_some() || self.seq_kv.is_some() {
            self.resize_sdpa(&mut graph)?;
        }
        for spec in &self.shapes {
            let mut parts = spec.split(':');
            let (Some(uid), Some(dims)) = (parts.next(), parts.next()) else {
                return Err(bad(format!(
                    "--override-shape '{spec}': expected UID:DIMS[:STRIDES]"
                )));
            };
            let uid: i64 = uid
                .parse()
                .map_err(|_| bad(format!("--override-shape '{spec}': uid '{uid}'")))?;
            let dims = list(dims, "dims", spec)?;
            let strides = match parts.next() {
                Some(s) => list(s, "strides", spec)?,
                None => TensorAttributes::packed_strides(&dims),
            };
            let t = graph
                .tensors
                .iter_mut()
                .find(|t| t.uid == uid)
                .ok_or_else(|| {
                    bad(format!(
                        "--override-shape '{spec}': no tensor uid {uid} in the graph"
                    ))
                })?;
            t.dims = dims;
            t.strides = strides;
        }
        Ok(graph)
    }

    fn resize_sdpa(&self, graph: &mut Graph) -> Result<(), ShimError> {
        let [node] = graph.nodes.as_slice() else {
            return Err(bad(format!(
                "--override-batch/--override-seq-*: graph '{}' has {} nodes; they resize a single SDPA node (use --override-shape)",
                graph.name,
                graph.nodes.len()
            )));
        };
        let a = node.attributes.as_sdpa().cloned().ok_or_else(|| {
            bad("--override-batch/--override-seq-*: the node is not SdpaAttributes".to_owned())
        })?;
        let q = graph
            .tensor(a.q_tensor_uid)
            .cloned()
            .ok_or_else(|| bad(format!("Q uid {} is not in the graph", a.q_tensor_uid)))?;
        let (q_seq, q_heads) = (seq_axis(&q, None, None), 3 - seq_axis(&q, None, None));
        let (s_q, h_q) = (q.dims.get(q_seq).copied(), q.dims.get(q_heads).copied());
        let query_side = [
            Some(a.q_tensor_uid),
            Some(a.o_tensor_uid),
            a.stats_tensor_uid,
        ];
        let key_side = [a.k_tensor_uid, a.v_tensor_uid];
        let lengths = [a.seq_len_q_tensor_uid, a.seq_len_kv_tensor_uid];
        let auxes: Vec<i64> = graph
            .tensors
            .iter()
            .filter_map(|t| t.ragged_offset_tensor_uid)
            .collect();
        for t in &mut graph.tensors {
            let uid = Some(t.uid);
            if query_side.contains(&uid) {
                let axis = seq_axis(t, s_q, h_q);
                resize(t, self.batch, self.seq_q.map(|s| (axis, s)));
            } else if key_side.contains(&t.uid) {
                let axis = seq_axis(t, None, None);
                resize(t, self.batch, self.seq_kv.map(|s| (axis, s)));
            } else if lengths.contains(&uid) {
                resize(t, self.batch, None);
            } else if auxes.contains(&t.uid) {
                resize(t, self.batch.map(|b| b + 1), None);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::graphs::{RaggedSdpaSpec, uid};

    use super::*;

    #[test]
    fn resizing_a_graph_gives_the_graph_built_for_the_new_shapes() {
        for bhsd_dims in [false, true] {
            let spec = |q: &[i64], kv: &[i64]| RaggedSdpaSpec {
                bhsd_dims,
                heads_q: 4,
                heads_kv: 2,
                seq_len_kv: Some(vec![1; q.len()]),
                ..RaggedSdpaSpec::packed("r", q, kv)
            };
            let compiled = spec(&[3, 2], &[4, 4]).graph();
            let wanted = spec(&[1, 5, 2], &[2, 6, 1]).graph();
            let args = OverrideArgs {
                batch: Some(3),
                seq_q: Some(5),
                seq_kv: Some(6),
                shapes: vec![],
            };
            let target = args.target(&compiled).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(target, wanted, "bhsd_dims {bhsd_dims}");
        }
    }

    #[test]
    fn an_explicit_shape_sets_one_tensor_and_bad_text_is_named() {
        let compiled = RaggedSdpaSpec::packed("r", &[3, 2], &[4, 4]).graph();
        let args = |s: &str| OverrideArgs {
            shapes: vec![s.to_owned()],
            ..OverrideArgs::default()
        };
        let target = args("5:4,1,1,1")
            .target(&compiled)
            .unwrap_or_else(|e| panic!("{e}"));
        let aux = target
            .tensor(uid::OFFSET_Q)
            .map(|t| (t.dims.clone(), t.strides.clone()));
        assert_eq!(aux, Some((vec![4, 1, 1, 1], vec![1, 1, 1, 1])));
        let err = |s: &str| args(s).target(&compiled).err().map(|e| e.to_string());
        assert_eq!(
            err("99:1").as_deref(),
            Some("shape override: --override-shape '99:1': no tensor uid 99 in the graph")
        );
        assert_eq!(
            err("5:4,x").as_deref(),
            Some("shape override: --override-shape '5:4,x': dims entry 'x' is not an integer")
        );
    }

    #[test]
    fn repacking_keeps_each_tensors_memory_order() {
        // [B, H, S, D] dims over BSHD memory: S outermost after B, then H, then D.
        assert_eq!(repack(&[2, 4, 5, 8], &[96, 8, 32, 1]), vec![160, 8, 32, 1]);
        assert_eq!(repack(&[2, 5, 4, 8], &[96, 32, 8, 1]), vec![160, 32, 8, 1]);
    }
}
