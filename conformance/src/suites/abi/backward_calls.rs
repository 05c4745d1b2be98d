//! ABI checks with an SDPA backward graph (issue 15 item 4): the query is answered gracefully
//! whether or not the plugin runs backward graphs, a backward asking for dropout is declined, and
//! an engine that runs them refuses a dQ bound over dO with an error message while writing no
//! gradient byte.

use hipdnn_shim::backward::{BackwardHarness, backward_of};
use hipdnn_shim::engine_id::hex_id;
use hipdnn_shim::graphs::RaggedSdpaSpec;
use hipdnn_shim::harness::validate::sentinel_bits;
use hipdnn_shim::manager::LoadedPlugin;
use ragged_core::HostData;
use ragged_schema::model::NodeAttributes;

use super::Check;

pub(super) fn backward_graph(p: &LoadedPlugin, host_engines: &[String]) -> Check {
    let handle = p.plugin.create_handle().map_err(|e| e.to_string())?;
    let spec = RaggedSdpaSpec::packed("abi_backward", &[2, 3], &[4, 1]);
    let graph = backward_of(&spec.graph()).ok_or("the spec has no stats")?;
    let max = p.engines.len().max(1) as u32;
    let (_, ids) = handle
        .applicable_engine_ids(&ragged_schema::wire::encode_graph(&graph), max)
        .map_err(|e| format!("a backward graph must be answered with SUCCESS: {e}"))?;
    let mut dropout = graph.clone();
    if let Some(NodeAttributes::SdpaBackward(b)) =
        dropout.nodes.first_mut().map(|n| &mut n.attributes)
    {
        b.dropout_probability = Some(0.25);
    }
    let (_, with_dropout) = handle
        .applicable_engine_ids(&ragged_schema::wire::encode_graph(&dropout), max)
        .map_err(|e| format!("a backward with dropout must be answered with SUCCESS: {e}"))?;
    if !with_dropout.is_empty() {
        return Err(format!(
            "engines {with_dropout:?} offered for a backward with dropout 0.25, which the \
             backward definition does not cover"
        ));
    }
    let mut details = vec![format!(
        "backward graph: {} engine(s) applicable; with dropout: 0",
        ids.len()
    )];
    let host: Vec<i64> = p
        .engines
        .iter()
        .filter(|e| ids.contains(&e.id) && host_engines.contains(&e.name))
        .map(|e| e.id)
        .collect();
    if host.is_empty() {
        details.push("declined: no host engine runs backward graphs".to_owned());
        return Ok(details);
    }
    for id in host {
        let pre = hipdnn_shim::case_inputs::pre_supplied(&spec).map_err(|e| e.to_string())?;
        let mut h = BackwardHarness::new(graph.clone(), &pre, 3).map_err(|e| e.to_string())?;
        let (dq, d_o) = (h.node.dq_tensor_uid, h.node.do_tensor_uid);
        let mut pack = h.engine_pack();
        let shared = pack
            .iter()
            .find(|b| b.uid == d_o)
            .map(|b| b.ptr)
            .ok_or("dO missing from the pack")?;
        if let Some(entry) = pack.iter_mut().find(|b| b.uid == dq) {
            entry.ptr = shared;
        }
        // SAFETY: the harness's own host buffers, each of its tensor's extent; dQ aliases dO,
        // which has the same extent (dQ's dims are Q's, dO's O's, and here D_v = D_qk).
        let result = unsafe { h.execute_pack(&handle, id, &pack) };
        let Err(error) = result else {
            return Err(format!(
                "engine {}: dQ bound over dO was executed; it must be refused",
                hex_id(id)
            ));
        };
        if error.to_string().trim().is_empty() {
            return Err(format!("engine {}: refused without a message", hex_id(id)));
        }
        for uid in [h.node.dk_tensor_uid, h.node.dv_tensor_uid] {
            let t = h.engine.get(uid).map_err(|e| e.to_string())?;
            let sentinel = sentinel_bits(t.data_type());
            let untouched = match t.host_data() {
                HostData::BF16(s) => s.iter().all(|x| u64::from(x.to_bits()) == sentinel),
                HostData::F16(s) => s.iter().all(|x| u64::from(x.to_bits()) == sentinel),
                HostData::F32(s) => s.iter().all(|x| u64::from(x.to_bits()) == sentinel),
                _ => false,
            };
            if !untouched {
                return Err(format!(
                    "engine {}: uid {uid} was written by a refused execute",
                    hex_id(id)
                ));
            }
        }
        details.push(format!(
            "engine {}: dQ over dO refused ({error}); dK and dV unwritten",
            hex_id(id)
        ));
    }
    Ok(details)
}
