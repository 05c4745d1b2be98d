//! `hipdnn-shim bench GRAPH`: median (and spread) of an engine's execute time over N runs, with
//! one execution context and the same inputs throughout.

use std::io::IsTerminal;
use std::time::Duration;

use crate::commands::run::GraphRun;
use crate::commands::run::forward::prepare;
use crate::error::ShimError;

/// Runs below this many iterations finish too fast for a progress bar to help.
const PROGRESS_BAR_MIN_RUNS: usize = 20;

pub fn run(args: &GraphRun, runs: usize, warmup: usize) -> Result<(), ShimError> {
    if args.cuda {
        return Err(ShimError::Usage(
            "bench times engines on host buffers only; --cuda applies to run",
        ));
    }
    if !args.overrides.is_empty() {
        return Err(ShimError::Usage(
            "bench times ExecuteOpGraph; --override-* applies to run",
        ));
    }
    let mut p = prepare(args)?;
    let plugin = &p.manager.plugins[p.candidate.plugin_index];
    let handle = plugin.plugin.create_handle()?;
    if warmup > 0 {
        p.harness
            .run_engine_repeatedly(&handle, p.candidate.engine_id, warmup, &mut |_, _| {})?;
    }
    let bar = (std::io::stderr().is_terminal() && runs >= PROGRESS_BAR_MIN_RUNS)
        .then(|| indicatif::ProgressBar::new(runs as u64));
    let mut times =
        p.harness
            .run_engine_repeatedly(&handle, p.candidate.engine_id, runs, &mut |_, _| {
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
            })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if times.is_empty() {
        println!("no runs");
        return Ok(());
    }
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = if times.len() % 2 == 1 {
        ms(times[times.len() / 2])
    } else {
        (ms(times[times.len() / 2 - 1]) + ms(times[times.len() / 2])) / 2.0
    };
    println!(
        "{} on '{}': median {median:.3} ms over {} runs (min {:.3} ms, max {:.3} ms, {warmup} warm-up)",
        p.candidate.engine_name,
        p.graph.name,
        times.len(),
        ms(times[0]),
        ms(times[times.len() - 1]),
    );
    Ok(())
}
