//! Per-call cost of the schema operations the plugin performs per graph (decode, validate,
//! minimum version) and of the slower JSON path, on a ragged GQA SDPA graph.
//!
//!     cargo run -p ragged-schema --release --example wire_throughput

use std::hint::black_box;
use std::time::Instant;

use ragged_schema::version::compute_minimum_plugin_api_version;
use ragged_schema::{DataType, Graph, Node, SdpaAttributes, TensorAttributes, wire};

fn graph() -> Graph {
    let aux = |uid| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_data_type(DataType::Int32)
            .set_dims(vec![9, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let primary = |uid, h: i64, aux_uid| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_data_type(DataType::BFloat16)
            .set_dims(vec![8, 4096, h, 128])
            .set_strides(vec![4096 * h * 128, h * 128, 128, 1])
            .set_ragged_offset_uid(aux_uid)
    };
    Graph::new("bench")
        .add_tensor(aux(10))
        .add_tensor(aux(11))
        .add_tensor(primary(1, 32, 10))
        .add_tensor(primary(2, 8, 11))
        .add_tensor(primary(3, 8, 11))
        .add_tensor(primary(4, 32, 10))
        .add_node(Node::sdpa(
            "sdpa",
            SdpaAttributes {
                attn_scale_value: Some(0.088),
                causal_mask: true,
                ..SdpaAttributes::new(1, 2, 3, 4)
            },
        ))
}

fn time(label: &str, iterations: u32, mut f: impl FnMut()) {
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let per_call = start.elapsed() / iterations;
    println!("{label:<36} {:>8.2} µs/call", per_call.as_secs_f64() * 1e6);
}

fn main() {
    let g = graph();
    let bytes = wire::encode_graph(&g);
    let json = g.to_json();
    println!(
        "graph: {} tensors, {} bytes binary, {} bytes JSON",
        g.tensors.len(),
        bytes.len(),
        json.len()
    );
    let n = 20_000;
    time("wire::encode_graph", n, || {
        black_box(wire::encode_graph(black_box(&g)));
    });
    time("wire::decode_graph (verified)", n, || {
        black_box(wire::decode_graph(black_box(&bytes)).ok());
    });
    time("Graph::validate", n, || {
        black_box(black_box(&g).validate().ok());
    });
    time("compute_minimum_plugin_api_version", n, || {
        black_box(compute_minimum_plugin_api_version(black_box(&g)));
    });
    time("Graph::to_json", n, || {
        black_box(black_box(&g).to_json());
    });
    time("Graph::from_json", n, || {
        black_box(Graph::from_json(black_box(&json)).ok());
    });
}
