//! The golden buffers in `tests/golden/` were written outside this repository by flatc 25.12.19
//! from an independent transcription of upstream's schema (copied from shared/testdata/wire).
//! They check that the crate reads what other producers write, not only its own output.

use ragged_schema::version::{API_1_3_0, compute_minimum_plugin_api_version};
use ragged_schema::{
    DataType, DiagonalAlignment, EngineApiVersion, Graph, Node, SdpaAttributes, TensorAttributes,
    wire,
};

const FLAGGED: &[u8] = include_bytes!("golden/graph_flagged.bin");
const UPSTREAM: &[u8] = include_bytes!("golden/graph_upstream.bin");
const HDGP: &[u8] = include_bytes!("golden/graph_hdgp.bin");
const ENGINE_CONFIG: &[u8] = include_bytes!("golden/engine_config.bin");

/// The golden graph as described in shared/testdata/wire/README.md, written out by hand.
fn expected_graph() -> Graph {
    let aux = |uid, name: &str| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::Int32)
            .set_dims(vec![3, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let primary = |uid, name: &str, dims: Vec<i64>, strides: Vec<i64>, aux_uid| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(name)
            .set_data_type(DataType::BFloat16)
            .set_dims(dims)
            .set_strides(strides)
            .set_ragged_offset_uid(aux_uid)
    };
    let sdpa = SdpaAttributes {
        stats_tensor_uid: Some(9),
        generate_stats: Some(true),
        causal_mask_bottom_right: true,
        attn_scale_value: Some(0.25),
        ..SdpaAttributes::new(1, 2, 3, 4)
    };
    Graph::new("golden_ragged_sdpa_bf16")
        .set_data_types(DataType::BFloat16, DataType::Float, DataType::Float)
        .add_tensor(aux(5, "ragged_offset_q"))
        .add_tensor(aux(6, "ragged_offset_kv"))
        .add_tensor(primary(1, "q", vec![2, 3, 2, 16], vec![96, 32, 16, 1], 5))
        .add_tensor(primary(2, "k", vec![2, 4, 1, 16], vec![64, 16, 16, 1], 6))
        .add_tensor(primary(3, "v", vec![2, 4, 1, 16], vec![64, 16, 16, 1], 6))
        .add_tensor(primary(4, "o", vec![2, 3, 2, 16], vec![96, 32, 16, 1], 5))
        .add_tensor(
            TensorAttributes::new()
                .set_uid(9)
                .set_name("stats")
                .set_data_type(DataType::Float)
                .set_dims(vec![2, 2, 3, 1])
                .set_strides(vec![6, 3, 1, 1]),
        )
        .add_node(Node::sdpa("sdpa", sdpa).set_compute_data_type(DataType::Float))
}

/// The fields in which the golden files legitimately differ (flag, stamp, id), cleared.
fn without_provenance(mut g: Graph) -> Graph {
    g.is_ragged_tensor_enabled = false;
    g.min_required_engine_api_version = None;
    g.id = None;
    g
}

fn decode(bytes: &[u8]) -> Graph {
    wire::decode_graph(bytes).unwrap_or_else(|e| panic!("golden buffer must decode: {e}"))
}

#[test]
fn flagged_buffer_decodes_with_flag_and_no_stamp() {
    let g = decode(FLAGGED);
    assert!(g.is_ragged_tensor_enabled);
    assert_eq!(g.min_required_engine_api_version, None);
    assert_eq!(g.id, None);
    assert_eq!(without_provenance(g), expected_graph());
}

#[test]
fn upstream_buffer_without_flag_field_reads_false() {
    let g = decode(UPSTREAM);
    assert!(
        !g.is_ragged_tensor_enabled,
        "upstream buffers lack the flag"
    );
    assert!(g.is_ragged(), "raggedness still follows from the tensors");
    assert_eq!(
        g.min_required_engine_api_version,
        Some(EngineApiVersion::new(1, 3, 0))
    );
    assert!(g.id.is_some());
    assert_eq!(without_provenance(g), expected_graph());
}

#[test]
fn hdgp_container_decodes_to_the_flagged_graph() {
    assert_eq!(&HDGP[4..8], b"HDGP");
    assert_eq!(decode(HDGP), decode(FLAGGED));
}

#[test]
fn every_golden_graph_requires_1_3_0() {
    for bytes in [FLAGGED, UPSTREAM, HDGP] {
        assert_eq!(
            compute_minimum_plugin_api_version(&decode(bytes)).version,
            API_1_3_0
        );
    }
}

#[test]
fn golden_graph_is_valid_and_resolves_bottom_right_causal() {
    let g = decode(FLAGGED);
    assert_eq!(g.validate(), Ok(()));
    let band = g.nodes[0]
        .attributes
        .as_sdpa()
        .map(SdpaAttributes::resolve_diagonal_band);
    assert_eq!(
        band.map(|b| b.map(|b| (b.left, b.right, b.alignment))),
        Some(Ok((None, Some(0), DiagonalAlignment::BottomRight)))
    );
}

#[test]
fn engine_config_decodes_host_reference_id() {
    let cfg = wire::decode_engine_config(ENGINE_CONFIG)
        .unwrap_or_else(|e| panic!("golden engine config must decode: {e}"));
    // FNV-1a-64("RAGGED_SDPA_HOST_REFERENCE"), worked value from plugin-abi.md §7.
    assert_eq!(cfg.engine_id, 0x71d6_8058_b1a1_33dd);
    assert!(cfg.knobs.is_empty());
}

#[test]
fn re_encoding_a_golden_graph_preserves_the_model_and_sets_the_stamp() {
    let g = decode(UPSTREAM);
    let again = decode(&wire::encode_graph(&g));
    assert!(
        again.is_ragged_tensor_enabled,
        "the writer sets the flag for ragged graphs"
    );
    assert_eq!(
        again.min_required_engine_api_version,
        Some(EngineApiVersion::new(1, 3, 0))
    );
    assert_eq!(again.id, g.id);
    assert_eq!(without_provenance(again), without_provenance(g));
}

#[test]
fn golden_json_decodes_to_the_same_model() {
    let g = Graph::from_json(include_str!("golden/graph.json"))
        .unwrap_or_else(|e| panic!("golden JSON must decode: {e}"));
    assert!(
        !g.is_ragged_tensor_enabled,
        "the golden JSON has no flag key"
    );
    assert_eq!(g, expected_graph());
    assert_eq!(without_provenance(decode(FLAGGED)), g);
}
