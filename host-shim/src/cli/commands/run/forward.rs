//! `run` on a single SDPA forward node: one engine executed on host buffers (or with `--cuda` on
//! device copies of them, or through ExecuteOpGraphWithOverrides with `--override-*`), the outputs
//! written, and with `--verify` compared with the float64 oracle.

use std::path::Path;
use std::time::Instant;

use hipdnn_shim::harness::{DeviceRun, Harness, SdpaRoles, ValidationMode};
use hipdnn_shim::manager::PluginManager;
use ragged_schema::model::{DataType, Graph};

use super::shared::{
    GraphRun, choose_engine, device_for, flush_and_write_outputs, forward_oracle_heading,
    load_valid, report_execute_time, report_verification, supplied_inputs, with_spinner,
};
use crate::error::ShimError;
use crate::host::Candidate;

/// Graph loaded, inputs supplied, engine chosen.
pub struct Prepared {
    /// The graph the plan is compiled for (the file's).
    pub compiled: Graph,
    /// The graph the buffers describe: `compiled` with the call's shape overrides applied.
    pub graph: Graph,
    pub manager: PluginManager,
    pub candidate: Candidate,
    pub harness: Harness,
}

pub fn prepare(args: &GraphRun) -> Result<Prepared, ShimError> {
    let compiled = load_valid(args)?;
    let graph = args.overrides.target(&compiled)?;
    if graph != compiled {
        graph.validate().map_err(|e| {
            ShimError::Override(format!(
                "the graph with the overridden shapes is invalid: {e}"
            ))
        })?;
    }
    let roles = SdpaRoles::of(&graph)?;
    let pre = supplied_inputs(args, &graph, &roles.outputs)?;
    let (manager, candidate) = choose_engine(args, &compiled, args.cuda)?;
    let harness = Harness::new(graph.clone(), &pre, args.seed)?;
    Ok(Prepared {
        compiled,
        graph,
        manager,
        candidate,
        harness,
    })
}

pub fn run(
    args: &GraphRun,
    out_dir: Option<&Path>,
    verify: bool,
    mode: ValidationMode,
) -> Result<(), ShimError> {
    let mut p = prepare(args)?;
    let plugin = &p.manager.plugins[p.candidate.plugin_index];
    let handle = plugin.plugin.create_handle()?;
    let device = device_for(args, &p.candidate)?;
    let overridden = !args.overrides.is_empty();
    if overridden && device.is_some() {
        return Err(ShimError::Usage(
            "--override-* runs on host engines only (the device path has no override route)",
        ));
    }
    let start = Instant::now();
    with_spinner(
        format!("executing {}", p.candidate.engine_name),
        || -> Result<(), ShimError> {
            match device {
                Some(d) => p
                    .harness
                    .run_engine_on_device(&handle, p.candidate.engine_id, d)?,
                None if overridden => {
                    let config = ragged_schema::wire::encode_engine_config(
                        &ragged_schema::model::EngineConfig::new(p.candidate.engine_id),
                    );
                    let bytes = ragged_schema::wire::encode_graph(&p.compiled);
                    let context = handle.create_execution_context(&config, &bytes)?;
                    let applied = p
                        .harness
                        .execute_overridden(plugin, &p.compiled, &context)?;
                    let uids: Vec<i64> = applied.iter().map(|o| o.uid).collect();
                    eprintln!(
                        "executed through ExecuteOpGraphWithOverrides: {} override(s), uids {uids:?}",
                        applied.len()
                    );
                }
                None => p.harness.run_engine(&handle, p.candidate.engine_id)?,
            }
            Ok(())
        },
    )?;
    report_execute_time(start, device.is_some());
    flush_and_write_outputs(
        &mut p.manager.log,
        args,
        out_dir,
        &p.harness.engine,
        &p.harness.roles.outputs,
    )?;
    if !verify {
        return Ok(());
    }
    let comparisons = with_spinner("evaluating the float64 oracle".into(), || {
        crate::verify::against_oracle(&mut p.harness, mode)
    })?;
    let mut heading = forward_oracle_heading(mode);
    let fp8 = p.graph.tensors.iter().any(|t| {
        matches!(
            t.data_type,
            DataType::Fp8E4m3 | DataType::Fp8E5m2 | DataType::Fp8E4m3Fnuz | DataType::Fp8E5m2Fnuz
        )
    });
    if fp8 {
        // FP8 outputs are judged by rounding, not by §8's relative bounds.
        heading = format!(
            "{}; FP8: kernels/core/fp8-attention.md, O codes equal or neighbours, amaxes within one f32 ulp:",
            heading.trim_end_matches(':')
        );
    }
    report_verification(&p.graph, &comparisons, mode, &heading)
}
