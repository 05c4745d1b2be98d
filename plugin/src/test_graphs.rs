//! Graphs shared by the unit tests: the golden wire buffer of `shared/testdata/wire`
//! (bf16, Q/O `[2, 3, 2, 16]` on offsets 5, K/V `[2, 4, 1, 16]` on offsets 6, dense LSE uid 9,
//! scale 0.25, causal bottom-right), decoded the way the plugin decodes `op_graph`.

use ragged_schema::{Graph, NodeAttributes, SdpaAttributes};

const GOLDEN: &[u8] = include_bytes!("../tests/golden/graph_flagged.bin");

pub(crate) fn golden() -> Graph {
    match ragged_schema::wire::decode_graph(GOLDEN) {
        Ok(graph) => graph,
        Err(e) => panic!("golden graph: {e}"),
    }
}

/// Upstream hipDNN's paged bundle `quick/SdpaFwd/paged/fp16/hd128_page16_multiseq/Small`
/// (rocm-libraries 7162ca59), as copied into the shim's corpus: packed fp16 Q/O
/// `[1, 16, 64, 128]`, pools `[128, 2, 16, 128]`, tables uid 5 and 6 `[3, 32]`, lengths uid 7
/// and 8 `[3]`, `max_seq_len_kv` 512, top-left causal.
pub(crate) fn paged_bundle() -> Graph {
    const TEXT: &str = include_str!(
        "../../host-shim/tests/corpus/bundles/quick/SdpaFwd/paged/fp16/hd128_page16_multiseq/\
         Small/Small.json"
    );
    match Graph::from_json(TEXT) {
        Ok(graph) => graph,
        Err(e) => panic!("paged bundle: {e}"),
    }
}

/// The SDPA attributes of a single-node graph, for tests that edit them.
pub(crate) fn sdpa(graph: &mut Graph) -> &mut SdpaAttributes {
    match &mut graph.nodes[0].attributes {
        NodeAttributes::Sdpa(s) => s,
        other => panic!("golden node is {other:?}"),
    }
}
