//! The RFC §4.11 harness for an SDPA backward graph (`SdpaBackwardAttributes`, issue 15 item 4):
//! two bundles built from one graph and one pre-supplied bundle, O and the LSE produced by the CPU
//! forward (so the backward differentiates a real forward, as training does), dQ, dK and dV run
//! through the CPU reference backward and through a plugin engine, then compared with the
//! written/unwritten split and the exact zeros of the backward's definition
//! (kernels/reference/src/sdpa_backward/README.md §2).
//!
//! Lengths, scale and band come from the forward the backward implies, through the forward
//! harness's own [`SdpaRoles`]: one rule for both directions. The positions of dK and dV are those
//! of the transposed problem (keys as rows, the band mirrored), which is what makes "a key no
//! query admits" a row set.

use std::collections::BTreeSet;
use std::ffi::c_void;

use ragged_core::{HostData, HostDataMut};
use ragged_reference::{
    BackwardInputs, BackwardOutputs, SdpaBackwardParams, sdpa_backward, sdpa_forward,
};
use ragged_schema::model::{
    EngineConfig, Graph, Node, NodeAttributes, SdpaAttributes, SdpaBackwardAttributes,
    TensorAttributes,
};

use crate::abi::DeviceBuffer;
use crate::harness::validate::{self, Comparison, Tolerance, ValidationMode};
use crate::harness::{Bundle, PreSuppliedInputs, SdpaRoles, check_alignment};
use crate::host_error::HostError;
use crate::plugin::PluginHandle;

/// The graph's single backward node, if it is one.
pub fn backward_node(graph: &Graph) -> Option<&SdpaBackwardAttributes> {
    match graph.nodes.as_slice() {
        [node] => match &node.attributes {
            NodeAttributes::SdpaBackward(b) => Some(b),
            _ => None,
        },
        _ => None,
    }
}

/// Uids [`backward_of`] gives the tensors it adds.
pub mod uid {
    pub const DO: i64 = 20;
    pub const DQ: i64 = 21;
    pub const DK: i64 = 22;
    pub const DV: i64 = 23;
}

/// The backward of a single-node forward graph with stats: the same tensors, plus dO shaped as O
/// and dQ, dK, dV shaped as Q, K, V (same ragged offsets), and the node
/// [`SdpaBackwardAttributes::for_forward`] derives. `None` without an SDPA node with stats.
pub fn backward_of(forward: &Graph) -> Option<Graph> {
    let [node] = forward.nodes.as_slice() else {
        return None;
    };
    let sdpa = node.attributes.as_sdpa()?;
    let backward = SdpaBackwardAttributes::for_forward(sdpa, uid::DO, uid::DQ, uid::DK, uid::DV)?;
    let mut graph = forward.clone();
    graph.nodes.clear();
    for (uid, primal, name) in [
        (uid::DO, sdpa.o_tensor_uid, "d_o"),
        (uid::DQ, sdpa.q_tensor_uid, "dq"),
        (uid::DK, sdpa.k_tensor_uid, "dk"),
        (uid::DV, sdpa.v_tensor_uid, "dv"),
    ] {
        let t: TensorAttributes = forward.tensor(primal)?.clone();
        graph.tensors.push(t.set_uid(uid).set_name(name));
    }
    graph.name = format!("{}_backward", forward.name);
    Some(graph.add_node(Node::sdpa_backward("sdpa_backward", backward)))
}

pub struct BackwardHarness {
    pub graph: Graph,
    pub node: SdpaBackwardAttributes,
    /// The implied forward's roles (lengths, scale, band, Q-side positions).
    pub forward: SdpaRoles,
    /// dQ, dK, dV.
    pub outputs: BTreeSet<i64>,
    pub reference: Bundle,
    pub engine: Bundle,
}

impl BackwardHarness {
    /// Allocation and init of both bundles with the same `seed`; unless the caller supplied O or
    /// the LSE, both come from the CPU forward over the bundle's Q, K and V.
    pub fn new(
        graph: Graph,
        pre_supplied: &PreSuppliedInputs,
        seed: u64,
    ) -> Result<BackwardHarness, HostError> {
        let node = backward_node(&graph).cloned().ok_or_else(|| {
            HostError::Harness(format!(
                "graph '{}' is not a single SdpaBackwardAttributes node",
                graph.name
            ))
        })?;
        let outputs = BTreeSet::from([node.dq_tensor_uid, node.dk_tensor_uid, node.dv_tensor_uid]);
        let attrs = node.forward();
        let forward = SdpaRoles {
            outputs: BTreeSet::from([attrs.o_tensor_uid, node.stats_tensor_uid]),
            attrs,
        };
        let computed: BTreeSet<i64> = forward
            .outputs
            .iter()
            .copied()
            .filter(|uid| !pre_supplied.contains_key(uid))
            .collect();
        let sentinel: BTreeSet<i64> = outputs.union(&computed).copied().collect();
        let mut reference = Bundle::allocate(&graph, pre_supplied)?;
        let mut engine = Bundle::allocate(&graph, pre_supplied)?;
        reference.initialise(&sentinel, seed);
        engine.initialise(&sentinel, seed);
        let mut h = BackwardHarness {
            graph,
            node,
            forward,
            outputs,
            reference,
            engine,
        };
        if !computed.is_empty() {
            h.run_forward()?;
        }
        Ok(h)
    }

    /// O and the LSE of the reference bundle from `sdpa_forward`, copied into the engine bundle.
    fn run_forward(&mut self) -> Result<(), HostError> {
        let params = self.forward.params(&self.graph, &self.reference)?;
        let a = self.forward.attrs.clone();
        let lse_uid = self.node.stats_tensor_uid;
        let mut o = self.reference.take_owned(a.o_tensor_uid)?;
        let mut lse = match self.reference.take_owned(lse_uid) {
            Ok(t) => t,
            Err(e) => {
                self.reference.restore(a.o_tensor_uid, o);
                return Err(e);
            }
        };
        let result = (|| {
            let r = &self.reference;
            let lens = |uid: Option<i64>| uid.map(|u| r.get(u)).transpose();
            sdpa_forward(
                r.get(a.q_tensor_uid)?,
                r.get(a.k_tensor_uid)?,
                r.get(a.v_tensor_uid)?,
                o.as_mut(),
                Some(lse.as_mut()),
                lens(a.seq_len_q_tensor_uid)?,
                lens(a.seq_len_kv_tensor_uid)?,
                &params,
            )
            .map_err(|e| HostError::Harness(format!("CPU forward for the backward failed: {e}")))
        })();
        self.reference.restore(a.o_tensor_uid, o);
        self.reference.restore(lse_uid, lse);
        result?;
        for uid in [a.o_tensor_uid, lse_uid] {
            let mut target = self.engine.take_owned(uid)?;
            let copied = copy(self.reference.get(uid)?.host_data(), target.host_data_mut());
            self.engine.restore(uid, target);
            copied.map_err(|e| HostError::Harness(format!("tensor uid {uid}: {e}")))?;
        }
        Ok(())
    }

    /// The CPU reference (kernels' `sdpa_backward`) on the reference bundle.
    pub fn run_reference(&mut self) -> Result<(), HostError> {
        let params = self.forward.params(&self.graph, &self.reference)?;
        let n = self.node.clone();
        let mut dq = self.reference.take_owned(n.dq_tensor_uid)?;
        let mut dk = self.reference.take_owned(n.dk_tensor_uid)?;
        let mut dv = self.reference.take_owned(n.dv_tensor_uid)?;
        let result = (|| {
            let r = &self.reference;
            let lens = |uid: Option<i64>| uid.map(|u| r.get(u)).transpose();
            let inputs = BackwardInputs {
                q: r.get(n.q_tensor_uid)?,
                k: r.get(n.k_tensor_uid)?,
                v: r.get(n.v_tensor_uid)?,
                o: r.get(n.o_tensor_uid)?,
                d_o: r.get(n.do_tensor_uid)?,
                lse: r.get(n.stats_tensor_uid)?,
                seq_len_q: lens(n.seq_len_q_tensor_uid)?,
                seq_len_kv: lens(n.seq_len_kv_tensor_uid)?,
            };
            let outputs = BackwardOutputs {
                dq: dq.as_mut(),
                dk: dk.as_mut(),
                dv: dv.as_mut(),
            };
            let params = SdpaBackwardParams {
                scale: params.scale,
                band: params.band,
                ..SdpaBackwardParams::default()
            };
            sdpa_backward(&inputs, outputs, &params)
                .map_err(|e| HostError::Harness(format!("CPU reference backward failed: {e}")))
        })();
        self.reference.restore(n.dq_tensor_uid, dq);
        self.reference.restore(n.dk_tensor_uid, dk);
        self.reference.restore(n.dv_tensor_uid, dv);
        result
    }

    /// Runs `engine_id` of the plugin behind `handle` on the engine bundle's host buffers.
    pub fn run_engine(
        &mut self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
    ) -> Result<(), HostError> {
        let pack = self.engine_pack();
        // SAFETY: every pointer addresses a host buffer of this harness allocated from the
        // graph's own tensor attributes (ragged ones sized `ragged_offset[B]`), alive and not
        // otherwise borrowed while `pack` is used.
        unsafe { self.execute_pack(handle, engine_id, &pack) }
    }

    /// The variant pack of the engine bundle: every uid's host pointer, valid while the bundle
    /// is neither dropped nor otherwise borrowed.
    pub fn engine_pack(&mut self) -> Vec<DeviceBuffer> {
        self.engine.host_pack()
    }

    /// One execute of `engine_id` over `pack` (an [`Self::engine_pack`], possibly edited), with a
    /// host workspace of the size the context asks for.
    ///
    /// # Safety
    /// Every pointer in `pack` addresses host memory valid for its tensor's extent in this
    /// graph, not otherwise borrowed during the call.
    pub unsafe fn execute_pack(
        &self,
        handle: &PluginHandle<'_>,
        engine_id: i64,
        pack: &[DeviceBuffer],
    ) -> Result<(), HostError> {
        let graph_bytes = ragged_schema::wire::encode_graph(&self.graph);
        let config = ragged_schema::wire::encode_engine_config(&EngineConfig::new(engine_id));
        let context = handle.create_execution_context(&config, &graph_bytes)?;
        let mut workspace = vec![0u64; context.workspace_size()?.div_ceil(8)];
        let workspace_ptr = if workspace.is_empty() {
            std::ptr::null_mut()
        } else {
            workspace.as_mut_ptr().cast::<c_void>()
        };
        check_alignment(&self.graph, pack)?;
        // SAFETY: forwarded contract; the workspace has the size the context reported.
        unsafe { context.execute(workspace_ptr, pack) }
    }

    /// The roles of the transposed problem, whose "query rows" are K's rows: its written
    /// positions and rows without any admitted "key" are dK's and dV's.
    fn key_side(&self, output: i64) -> Result<SdpaRoles, HostError> {
        let band = self
            .node
            .resolve_diagonal_band()
            .map_err(|e| HostError::Harness(format!("resolving the mask: {e}")))?;
        let a = &self.forward.attrs;
        let attrs = SdpaAttributes {
            seq_len_q_tensor_uid: a.seq_len_kv_tensor_uid,
            seq_len_kv_tensor_uid: a.seq_len_q_tensor_uid,
            left_bound: band.right,
            right_bound: band.left,
            diagonal_alignment: band.alignment,
            ..SdpaAttributes::new(a.k_tensor_uid, a.q_tensor_uid, a.v_tensor_uid, output)
        };
        Ok(SdpaRoles {
            outputs: BTreeSet::from([output]),
            attrs,
        })
    }

    /// Positions of gradient `uid` a correct engine writes, and those that must be exactly 0
    /// (dQ rows that admit no key, dK/dV rows no query admits, whole zero-length batches).
    pub fn positions(&self, uid: i64) -> Result<(BTreeSet<usize>, BTreeSet<usize>), HostError> {
        let roles = if uid == self.node.dq_tensor_uid {
            SdpaRoles {
                attrs: SdpaAttributes {
                    o_tensor_uid: uid,
                    ..self.forward.attrs.clone()
                },
                outputs: BTreeSet::from([uid]),
            }
        } else {
            self.key_side(uid)?
        };
        Ok((
            roles.written_positions(uid, &self.reference)?,
            roles.exact_zero_positions(&self.reference)?,
        ))
    }

    /// The tolerance of a gradient of element type `dtype`: the forward output's, since the
    /// reference rounds each gradient once from f32 exactly as the forward rounds O.
    pub fn tolerance(&self, uid: i64) -> Result<Tolerance, HostError> {
        Ok(Tolerance::for_output(self.reference.get(uid)?.data_type()))
    }

    /// Compares every gradient of the engine bundle with the reference bundle.
    pub fn validate(&self, mode: ValidationMode) -> Result<Vec<Comparison>, HostError> {
        let mut out = Vec::new();
        for &uid in &self.outputs {
            let (written, exact) = self.positions(uid)?;
            out.push(validate::compare_bundles(
                uid,
                &self.reference,
                &self.engine,
                validate::Expectation {
                    written: (mode == ValidationMode::Coverage).then_some(&written),
                    exact_zero: Some(&exact),
                    undefined: None,
                },
                mode,
                self.tolerance(uid)?,
            )?);
        }
        Ok(out)
    }
}

fn copy(from: HostData<'_>, to: HostDataMut<'_>) -> Result<(), String> {
    match (from, to) {
        (HostData::F32(a), HostDataMut::F32(b)) if a.len() == b.len() => b.copy_from_slice(a),
        (HostData::F16(a), HostDataMut::F16(b)) if a.len() == b.len() => b.copy_from_slice(a),
        (HostData::BF16(a), HostDataMut::BF16(b)) if a.len() == b.len() => b.copy_from_slice(a),
        (a, b) => {
            return Err(format!(
                "cannot copy {} x {} into {} x {}",
                a.len(),
                a.data_type(),
                b.len(),
                b.data_type()
            ));
        }
    }
    Ok(())
}

/// Reads an element of any float buffer as f64 (for the oracle and reports).
pub fn element(data: HostData<'_>, i: usize) -> Option<f64> {
    Some(match data {
        HostData::F32(s) => f64::from(*s.get(i)?),
        HostData::F16(s) => s.get(i)?.to_f64(),
        HostData::BF16(s) => s.get(i)?.to_f64(),
        HostData::I32(s) => f64::from(*s.get(i)?),
        HostData::I64(s) => *s.get(i)? as f64,
        HostData::Fp8(format, s) => format.decode_f64(*s.get(i)?),
    })
}

#[cfg(test)]
#[path = "backward_tests.rs"]
mod tests;
