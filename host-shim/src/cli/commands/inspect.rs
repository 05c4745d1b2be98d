//! `hipdnn-shim inspect GRAPH`: the tensors, which are ragged and through which aux, the SDPA
//! node's roles and resolved attributes, and the minimum plugin API version with its reasons.
//! Exits nonzero when the graph fails validation or its stamp is above the deserialize ceiling.

use std::path::Path;

use hipdnn_shim::api_version::ApiVersion;
use hipdnn_shim::dispatch::GraphRequirements;
use ragged_schema::model::Graph;

use crate::error::ShimError;
use crate::graph_file;

fn roles(graph: &Graph, uid: i64) -> Vec<&'static str> {
    let mut out = Vec::new();
    for node in &graph.nodes {
        if let Some(sdpa) = node.attributes.as_sdpa() {
            out.extend(
                sdpa.tensor_uids()
                    .into_iter()
                    .filter(|(_, u)| *u == uid)
                    .map(|(field, _)| field),
            );
        }
    }
    for t in &graph.tensors {
        if t.ragged_offset_tensor_uid == Some(uid) && !out.contains(&"ragged_offset") {
            out.push("ragged_offset");
        }
    }
    out
}

pub fn run(path: &Path) -> Result<(), ShimError> {
    let graph = graph_file::load(path)?;
    println!("graph '{}' ({})", graph.name, path.display());
    println!(
        "  data types: io {:?}, intermediate {:?}, compute {:?}",
        graph.io_data_type, graph.intermediate_data_type, graph.compute_data_type
    );
    println!(
        "  flags: is_ragged_tensor_enabled={}, is_override_shape_enabled={}",
        graph.is_ragged_tensor_enabled, graph.is_override_shape_enabled
    );
    let validation = graph.validate();
    match &validation {
        Ok(()) => println!("  validation: ok"),
        Err(e) => println!("  validation: FAILED: {e}"),
    }
    println!("tensors:");
    for t in &graph.tensors {
        let ragged = match t.ragged_offset_tensor_uid {
            Some(aux) => format!(
                "ragged via uid {aux} (multiplier {})",
                t.ragged_offset_multiplier
            ),
            None => "dense".to_owned(),
        };
        println!(
            "  uid {:>3} {:<20} {:<9} dims {:?} strides {:?} align {}{}{} {ragged}  [{}]",
            t.uid,
            t.name,
            format!("{:?}", t.data_type),
            t.dims,
            t.strides,
            t.alignment,
            if t.is_virtual { " virtual" } else { "" },
            if t.is_runtime_pass_by_value {
                " pass-by-value"
            } else {
                ""
            },
            roles(&graph, t.uid).join(", ")
        );
    }
    for node in &graph.nodes {
        if let Some(sdpa) = node.attributes.as_sdpa() {
            let band = sdpa
                .resolve_diagonal_band()
                .map(|b| format!("left {:?}, right {:?}, {:?}", b.left, b.right, b.alignment))
                .unwrap_or_else(|e| format!("unresolvable: {e}"));
            let scale = match (sdpa.scale_tensor_uid, sdpa.attn_scale_value) {
                (Some(uid), _) => format!("tensor uid {uid}"),
                (None, Some(v)) => format!("{v}"),
                (None, None) => "default 1.0".to_owned(),
            };
            println!(
                "node '{}' SdpaAttributes: scale {scale}; mask band {band}",
                node.name
            );
        }
    }
    let req = GraphRequirements::of(&graph);
    println!("minimum plugin API version: {}", req.required);
    if req.reasons.is_empty() {
        println!("  baseline graph: no versioned feature");
    }
    for reason in &req.reasons {
        println!("  because {reason}");
    }
    if req.override_shape_enabled {
        println!("  and plugins must export hipdnnEnginePluginExecuteOpGraphWithOverrides");
    }
    println!(
        "stamp: {} (ceiling {}){}",
        req.stamp,
        ApiVersion::graph_stamp_ceiling(),
        if req.check_ceiling().is_err() {
            ": REJECTED at deserialize"
        } else {
            ""
        }
    );
    // Everything above is printed for an invalid graph too (it is what one debugs), but a script
    // must be able to tell: an invalid graph, or one hipDNN rejects at deserialize, exits nonzero.
    validation.map_err(|source| ShimError::Graph {
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    req.check_ceiling()?;
    Ok(())
}
