//! `hipdnn-shim run GRAPH`: dispatch as hipDNN would, execute one engine, write the outputs as
//! `.npy`, and with `--verify` compare them with a float64 oracle that shares no code with any
//! engine. A graph is run by one of three paths, chosen here from its nodes: a single SDPA
//! backward node, a multi-node graph (host engines only), or a single SDPA forward node.

mod backward;
pub mod forward;
mod multi_node;
mod shared;

use std::path::Path;

use hipdnn_shim::backward::backward_node;
use hipdnn_shim::harness::{ValidationMode, is_multi_node};

use crate::error::ShimError;
use crate::graph_file;

pub use shared::GraphRun;

pub fn run(
    args: &GraphRun,
    out_dir: Option<&Path>,
    verify: bool,
    mode: ValidationMode,
) -> Result<(), ShimError> {
    let graph = graph_file::load(&args.graph)?;
    if backward_node(&graph).is_some() {
        backward::run(args, graph, out_dir, verify, mode)
    } else if is_multi_node(&graph) {
        multi_node::run(args, graph, out_dir, verify, mode)
    } else {
        forward::run(args, out_dir, verify, mode)
    }
}
