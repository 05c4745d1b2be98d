//! The training pairs plan on the CUDA engine from their wire bytes, as the device benchmark
//! needs (the plans are device-free; this machine lists no CUDA engine, so the self-check of
//! `plugin_bench_bwd.py` reaches only the host engine). Run with
//! `cargo test -p ragged-plugin --example emit_bench_graphs` (also part of the suite).

use super::*;
use hipdnn_provider_ragged_sdpa::applicability::{accept, decode};
use hipdnn_provider_ragged_sdpa::engines::{CUDA_FMHA, HOST_REFERENCE};
use ragged_core::engine::Problem as Accepted;

fn decoded(graph: &Graph) -> Graph {
    decode(&encode_graph(graph))
        .expect("decodes")
        .expect("accepted by the decoder")
}

#[test]
fn training_pairs_plan_on_the_cuda_engine() {
    let problems: Vec<Problem> = bench_problems()
        .into_iter()
        .chain(tiny_problems())
        .collect();
    let mut pairs = 0;
    for p in problems.iter().filter(|p| p.has_backward()) {
        let forward = accept(&decoded(&p.forward_lse_graph()))
            .unwrap_or_else(|d| panic!("{}: forward with LSE declined: {d}", p.name));
        match &forward {
            Accepted::Forward(problem) => assert!(
                problem.stats.is_some(),
                "{}: the forward writes no LSE",
                p.name
            ),
            _ => panic!("{}: forward with LSE not a single SDPA problem", p.name),
        }
        if let Err(d) = CUDA_FMHA.plan(&forward) {
            panic!("{}: CUDA forward declines: {d}", p.name);
        }
        for top_left in [false, true] {
            let backward = p.backward_graph(top_left).expect("a stats output");
            let problem = accept(&decoded(&backward))
                .unwrap_or_else(|d| panic!("{}: backward declined: {d}", backward.name));
            assert!(
                matches!(problem, Accepted::Backward(_)),
                "{}: not a backward problem",
                backward.name
            );
            if let Err(d) = CUDA_FMHA.plan(&problem) {
                panic!("{}: CUDA backward declines: {d}", backward.name);
            }
        }
        pairs += 1;
    }
    // D 64 and 128: 3 families x 2 masks; D 96, 256 and 192/128: the ragged mix's 2 masks; the
    // tiny set's D 64, 128, 96 and 192/128 x 2 masks.
    assert_eq!(pairs, 2 * 3 * 2 + 3 * 2 + 4 * 2);
    for p in problems.iter().filter(|p| !p.has_backward()) {
        assert!(!BACKWARD_HEAD_DIMS.contains(&(p.head_dim, p.value_dim)));
    }
}

/// The FP8 graphs are what the plugin's edge accepts as FP8 forwards, with every scalar
/// bound at execute (the benchmark binds all eight uids) and FP8 O.
#[test]
fn fp8_graphs_are_accepted_as_fp8_forwards_with_every_scalar_bound() {
    let problems: Vec<Problem> = fp8_problems(false)
        .into_iter()
        .chain(fp8_problems(true))
        .collect();
    // (3 ragged-mix + 2 8x2048 + 1 2x8192 head dims) x 2 masks, and the tiny set's 3 x 2.
    assert_eq!(problems.len(), 18);
    for d in [64, 128, 256] {
        assert!(
            problems
                .iter()
                .any(|p| p.head_dim == d && p.family == "tiny"),
            "tiny D {d}"
        );
    }
    assert!(
        problems
            .iter()
            .any(|p| p.head_dim == 256 && p.family == "8x2048")
    );
    for p in &problems {
        let graph = p.graph();
        graph
            .validate()
            .unwrap_or_else(|e| panic!("{}: invalid graph: {e}", p.name));
        let accepted =
            accept(&decoded(&graph)).unwrap_or_else(|d| panic!("{}: declined: {d}", p.name));
        let Accepted::Forward(problem) = &accepted else {
            panic!("{}: not a single SDPA problem", p.name);
        };
        let fp8 = problem
            .fp8
            .unwrap_or_else(|| panic!("{}: accepted without its FP8 side", p.name));
        if let Err(d) = HOST_REFERENCE.plan(&accepted) {
            panic!("{}: the host engine declines: {d}", p.name);
        }
        let mut bound: Vec<i64> = fp8.scalars().filter_map(|s| s.bound_uid()).collect();
        bound.sort_unstable();
        assert_eq!(bound, [20, 21, 22, 23, 24, 25], "{}", p.name);
        let amax: Vec<i64> = fp8.amaxes().map(|a| a.uid).collect();
        assert_eq!(amax, [AMAX_S, AMAX_O], "{}", p.name);
        assert!(
            matches!(fp8.output, ragged_core::problem::Fp8OutputPlan::Fp8 { .. }),
            "{}",
            p.name
        );
        assert!(!p.has_backward(), "{}", p.name);
        assert!(p.metadata().contains("\"dtype\": \"fp8_e4m3\""));
    }
}
