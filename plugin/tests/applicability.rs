//! `GetApplicableEngineIds`, `GetEngineDetails` and the workspace/context calls on graphs hipDNN
//! could send: the golden ragged graphs are accepted in every container form; each unsupported
//! feature is declined with SUCCESS and 0 engines; malformed bytes are BAD_PARAM.

mod common;

use std::path::PathBuf;
use std::ptr::null_mut;

use common::*;
use ragged_schema::wire::{
    decode_engine_details, decode_graph, encode_engine_config, encode_graph,
};
use ragged_schema::{
    DataType, EngineConfig, Graph, Node, NodeAttributes, SdpaAttributes, TensorAttributes,
};

fn wire_file(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn golden() -> Graph {
    decode_graph(&wire_file("graph_flagged.bin")).expect("golden graph decodes")
}

fn sdpa_mut(graph: &mut Graph) -> &mut SdpaAttributes {
    match &mut graph.nodes[0].attributes {
        NodeAttributes::Sdpa(sdpa) => sdpa,
        other => panic!("golden node is {other:?}"),
    }
}

fn tensor_mut(graph: &mut Graph, uid: i64) -> &mut TensorAttributes {
    graph
        .tensors
        .iter_mut()
        .find(|t| t.uid == uid)
        .expect("tensor in golden graph")
}

fn assert_declined(graph: &Graph, why: &str) {
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(graph));
    assert_eq!(
        (status, ids),
        (SUCCESS, vec![]),
        "expected a decline: {why}"
    );
}

/// The header contract of `GetApplicableEngineIds`: `*num_engines` is the total applicable count,
/// which "may exceed `max_engines`"; ids beyond the buffer are not written.
#[test]
fn a_short_buffer_still_learns_the_applicable_count() {
    let handle = OwnedHandle::new();
    let graph = wire_file("graph_flagged.bin");
    let (status, all) = applicable(&handle, &graph);
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert!(!all.is_empty());

    let data = ConstData::of(&graph);
    let mut untouched = [7i64; 1];
    let mut n = u32::MAX;
    // SAFETY: a live handle, a borrowed graph, a non-NULL buffer the plugin may fill up to 0 ids.
    let status = unsafe {
        (plugin().GetApplicableEngineIds)(handle.0, &data, untouched.as_mut_ptr(), 0, &mut n)
    };
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(n as usize, all.len(), "the total, not the 0 ids that fit");
    assert_eq!(untouched, [7]);
}

#[test]
fn golden_graphs_are_accepted_in_every_container() {
    let handle = OwnedHandle::new();
    for file in ["graph_flagged.bin", "graph_upstream.bin", "graph_hdgp.bin"] {
        let (status, ids) = applicable(&handle, &wire_file(file));
        assert_eq!(status, SUCCESS, "{file}: {}", last_error());
        assert_eq!(ids, vec![HOST_REFERENCE_ID], "{file}");
    }
}

#[test]
fn an_unflagged_graph_with_ragged_tensors_is_accepted() {
    let upstream = decode_graph(&wire_file("graph_upstream.bin")).expect("decodes");
    assert!(
        !upstream.is_ragged_tensor_enabled,
        "fixture carries no flag"
    );
    assert!(
        upstream
            .tensors
            .iter()
            .any(|t| t.ragged_offset_tensor_uid.is_some())
    );
    let handle = OwnedHandle::new();
    assert_eq!(
        applicable(&handle, &wire_file("graph_upstream.bin")).1,
        vec![HOST_REFERENCE_ID]
    );
}

#[test]
fn a_dense_graph_is_accepted_by_the_host_engine() {
    let mut g = golden();
    g.is_ragged_tensor_enabled = false;
    for t in g
        .tensors
        .iter_mut()
        .filter(|t| [1, 2, 3, 4].contains(&t.uid))
    {
        // [B, S, H, D] ragged → [B, H, S, D] dense with packed strides.
        let [b, s, h, d] = [t.dims[0], t.dims[1], t.dims[2], t.dims[3]];
        t.dims = vec![b, h, s, d];
        t.strides = TensorAttributes::packed_strides(&t.dims);
        t.ragged_offset_tensor_uid = None;
    }
    g.tensors.retain(|t| t.uid != 5 && t.uid != 6);
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(&g));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(ids, vec![HOST_REFERENCE_ID]);
}

#[test]
fn graphs_with_other_or_extra_nodes_are_declined() {
    let mut two = golden();
    let extra = two.nodes[0].clone();
    two.nodes.push(extra);
    assert_declined(&two, "two nodes");

    let mut matmul = golden();
    matmul.nodes[0].attributes = NodeAttributes::unsupported(9);
    assert_declined(&matmul, "MatmulAttributes node");

    let mut future = golden();
    future.nodes[0].attributes = NodeAttributes::unsupported(200);
    assert_declined(&future, "unknown union tag 200");

    let mut none = golden();
    none.nodes[0].attributes = NodeAttributes::None;
    assert_declined(&none, "NONE node");

    let mut empty = golden();
    empty.nodes.clear();
    assert_declined(&empty, "no node");
}

#[test]
fn unsupported_data_types_and_layouts_are_declined() {
    let mut g = golden();
    for uid in [1, 2, 3, 4] {
        tensor_mut(&mut g, uid).data_type = DataType::Double;
    }
    assert_declined(&g, "double Q/K/V/O");

    let mut g = golden();
    tensor_mut(&mut g, 2).data_type = DataType::Half;
    assert_declined(&g, "K half, others bf16");

    let mut g = golden();
    tensor_mut(&mut g, 1).data_type = DataType::Unknown(99);
    assert_declined(&g, "unknown DataType enum value 99");

    let mut g = golden();
    tensor_mut(&mut g, 9).data_type = DataType::Half;
    assert_declined(&g, "LSE not float");

    let mut g = golden();
    tensor_mut(&mut g, 5).data_type = DataType::Float;
    assert_declined(&g, "float ragged offsets");

    // [B, H, S, D] dims over memory that is not BSHD-packed (a head stride wider than a
    // token); the same dims over BSHD strides {96, 16, 32, 1} are accepted (ragged-sdpa.md §1).
    let mut g = golden();
    let q = tensor_mut(&mut g, 1);
    q.dims = vec![2, 2, 3, 16];
    q.strides = vec![96, 64, 32, 1];
    let o = tensor_mut(&mut g, 4);
    o.dims = vec![2, 2, 3, 16];
    o.strides = vec![96, 16, 32, 1];
    assert_declined(&g, "ragged Q that is not BSHD memory");
}

#[test]
fn unsupported_sdpa_features_are_declined() {
    type Edit = fn(&mut SdpaAttributes);
    let cases: Vec<(&str, Edit)> = vec![
        ("attention mask", |s| s.attn_mask_tensor_uid = Some(9)),
        ("dropout", |s| s.dropout_probability = Some(0.1)),
        ("dropout seed", |s| s.seed_tensor_uid = Some(9)),
        ("paged K", |s| s.page_table_k_tensor_uid = Some(9)),
        ("ALiBi", |s| s.alibi_mask = true),
        ("FP8 descale", |s| s.descale_q_tensor_uid = Some(9)),
        ("max output", |s| s.max_tensor_uid = Some(9)),
        ("both deprecated causal flags", |s| s.causal_mask = true),
        ("padding mask without seq lens", |s| s.padding_mask = true),
        ("stats requested without a tensor", |s| {
            s.stats_tensor_uid = None
        }),
    ];
    for (why, edit) in cases {
        let mut g = golden();
        edit(sdpa_mut(&mut g));
        assert_declined(&g, why);
    }
}

#[test]
fn version_gates_are_declined() {
    // A stamp above the 1.3.0 ceiling. The encoder always stamps the computed minimum (1.3.0),
    // so patch the minor of the one EngineApiVersion struct in the buffer.
    let mut bytes = encode_graph(&golden());
    let stamp: Vec<u8> = [1u32, 3, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let at: Vec<usize> = (0..bytes.len() - stamp.len())
        .filter(|&i| bytes[i..i + stamp.len()] == stamp[..])
        .collect();
    assert_eq!(at.len(), 1, "exactly one 1.3.0 struct in the buffer");
    bytes[at[0] + 4] = 5;
    assert_eq!(
        decode_graph(&bytes).map(|g| g.min_required_engine_api_version.map(|v| v.to_string())),
        Ok(Some("1.5.0".to_owned()))
    );
    let handle = OwnedHandle::new();
    assert_eq!(applicable(&handle, &bytes), (SUCCESS, vec![]));
}

#[test]
fn malformed_buffers_are_bad_param_with_a_message() {
    let handle = OwnedHandle::new();
    let garbage: Vec<u8> = (0..64u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let (status, _) = applicable(&handle, &garbage);
    assert_eq!(status, BAD_PARAM);
    let message = last_error();
    assert!(
        message.starts_with("hipdnnEnginePluginGetApplicableEngineIds: malformed op_graph:"),
        "{message}"
    );

    let golden = wire_file("graph_flagged.bin");
    let (status, _) = applicable(&handle, &golden[..golden.len() / 2]);
    assert_eq!(status, BAD_PARAM, "truncated graph");
}

#[test]
fn the_counting_form_reports_how_many_engines_apply() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let graph = wire_file("graph_flagged.bin");
    let data = ConstData::of(&graph);
    let mut n = u32::MAX;
    // SAFETY: NULL with 0 capacity is the counting form.
    let status = unsafe { (p.GetApplicableEngineIds)(handle.0, &data, null_mut(), 0, &mut n) };
    assert_eq!((status, n), (SUCCESS, 1));
}

#[test]
fn engine_details_are_lent_and_returned() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let graph = wire_file("graph_flagged.bin");
    let data = ConstData::of(&graph);
    let mut details = ConstData::empty();
    // SAFETY: valid pointers.
    let status = unsafe { (p.GetEngineDetails)(handle.0, HOST_REFERENCE_ID, &data, &mut details) };
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert!(!details.ptr.is_null() && details.size > 0);
    // SAFETY: the plugin lent `size` readable bytes until DestroyEngineDetails.
    let bytes = unsafe { std::slice::from_raw_parts(details.ptr.cast::<u8>(), details.size) };
    let decoded = decode_engine_details(bytes).expect("EngineDetails verifies");
    assert_eq!(decoded.engine_id, HOST_REFERENCE_ID);
    assert_eq!(
        decoded.name, None,
        "name is never conferred through EngineDetails"
    );

    let mut copy = details;
    // SAFETY: `details` came from GetEngineDetails on this handle; the second destroy of the
    // same buffer is detected by the plugin, not followed.
    unsafe {
        assert_eq!((p.DestroyEngineDetails)(handle.0, &mut details), SUCCESS);
        assert!(details.ptr.is_null() && details.size == 0);
        assert_eq!((p.DestroyEngineDetails)(handle.0, &mut copy), BAD_PARAM);
    }

    let mut other = ConstData::empty();
    // SAFETY: valid pointers; the id is not an engine of this plugin.
    let status = unsafe { (p.GetEngineDetails)(handle.0, 12345, &data, &mut other) };
    assert_eq!(status, INVALID_VALUE);
    assert!(last_error().contains("engine id 12345"));
    assert!(other.ptr.is_null());
}

#[test]
fn workspace_queries_agree_and_contexts_survive_freed_inputs() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let mut graph = wire_file("graph_flagged.bin");
    let mut config = wire_file("engine_config.bin");
    let (g, c) = (ConstData::of(&graph), ConstData::of(&config));
    let mut from_graph = usize::MAX;
    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(
            (p.GetWorkspaceSize)(handle.0, &c, &g, &mut from_graph),
            SUCCESS
        );
        assert_eq!(
            (p.CreateExecutionContext)(handle.0, &c, &g, &mut context),
            SUCCESS
        );
    }
    // The backend may free and reuse both buffers once the context exists.
    graph.fill(0xAB);
    config.fill(0xCD);
    drop((graph, config));
    let mut from_context = usize::MAX;
    // SAFETY: valid pointers; the context is live.
    unsafe {
        let status = (p.GetWorkspaceSizeFromExecutionContext)(handle.0, context, &mut from_context);
        assert_eq!(status, SUCCESS);
        assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        assert_eq!((p.DestroyExecutionContext)(handle.0, context), BAD_PARAM);
    }
    assert_eq!(from_graph, from_context);
}

#[test]
fn contexts_for_unknown_engines_or_declined_graphs_are_refused() {
    let p = plugin();
    let handle = OwnedHandle::new();
    let graph = wire_file("graph_flagged.bin");
    let g = ConstData::of(&graph);
    let other = encode_engine_config(&EngineConfig::new(777));
    let c = ConstData::of(&other);
    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (p.CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, INVALID_VALUE);
    assert!(last_error().contains("engine id 777"), "{}", last_error());
    assert!(context.is_null());

    let mut declined = golden();
    declined
        .nodes
        .push(Node::sdpa("second", SdpaAttributes::new(1, 2, 3, 4)));
    let declined = encode_graph(&declined);
    let g = ConstData::of(&declined);
    let config = wire_file("engine_config.bin");
    let c = ConstData::of(&config);
    // SAFETY: valid pointers.
    let status = unsafe { (p.CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, BAD_PARAM);
    let message = last_error();
    assert!(
        message.contains("RAGGED_SDPA_HOST_REFERENCE does not apply"),
        "{message}"
    );
    // Two SDPA nodes take the multi-node path, where validation names the second writer.
    assert!(
        message.contains("writes tensor uid 4, which node #0 already writes"),
        "{message}"
    );
    assert!(context.is_null());
}
