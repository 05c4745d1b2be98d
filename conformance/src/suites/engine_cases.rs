//! The loop the case-list suites share: one handle per plugin (its failure is one failed case),
//! then every case on every admitted engine, timed, named `plugin::engine::case`.

use std::time::Instant;

use hipdnn_shim::harness::{Comparison, ValidationMode};
use hipdnn_shim::manager::{Engine, LoadedPlugin};
use hipdnn_shim::plugin::PluginHandle;

use crate::report::{CaseResult, Outcome, Report};

/// What one case on one engine came to: the outcome and its detail lines.
pub type CaseRun = (Outcome, Vec<String>);

pub fn run_cases<C>(
    plugin: &LoadedPlugin,
    suite: &str,
    cases: &[C],
    case_name: impl Fn(&C) -> &str,
    mut run: impl FnMut(&PluginHandle<'_>, &Engine, &C) -> CaseRun,
) -> Report {
    let mut report = Report::default();
    let handle = match plugin.plugin.create_handle() {
        Ok(h) => h,
        Err(e) => {
            report.push(CaseResult {
                suite: suite.into(),
                name: format!("{}::create_handle", plugin.name),
                outcome: Outcome::Fail(e.to_string()),
                details: vec![],
                duration: Default::default(),
            });
            return report;
        }
    };
    for engine in plugin.admitted_engines() {
        for case in cases {
            let start = Instant::now();
            let (outcome, details) = run(&handle, engine, case);
            report.push(CaseResult {
                suite: suite.into(),
                name: format!("{}::{}::{}", plugin.name, engine.name, case_name(case)),
                outcome,
                details,
                duration: start.elapsed(),
            });
        }
    }
    report
}

/// Pass when every output agrees with `yardstick`; the detail lines list each comparison and
/// its first failures, and a failure counts the disagreeing outputs as `what` ("output",
/// "gradient").
pub fn verdict(
    comparisons: &[Comparison],
    what: &str,
    yardstick: &str,
    mode: ValidationMode,
) -> CaseRun {
    let details: Vec<String> = comparisons
        .iter()
        .flat_map(|c| {
            std::iter::once(c.to_string()).chain(c.failures.iter().map(|f| format!("  {f}")))
        })
        .collect();
    let failed = comparisons.iter().filter(|c| !c.passed()).count();
    let outcome = if failed == 0 {
        Outcome::Pass
    } else {
        Outcome::Fail(format!(
            "{failed} {what}(s) disagree with {yardstick} ({mode} validation)"
        ))
    };
    (outcome, details)
}
