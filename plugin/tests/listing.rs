//! The engine list and the INFO lines explaining it, seen through the backend's logging callback.
//! A separate test binary: the list is decided once per process, at the first query, so the
//! callback must be in place before anything else asks.

mod common;

use common::log_lines::{self, collect};
use common::*;

const CUDA_FMHA_ID: i64 = -8390111541657994951;
const AITER_FMHA_ID: i64 = -7892907548674631411;
const CUDA_FMHA_NONDETERMINISTIC_ID: i64 = -703742951178686843;

/// The one INFO line about `engine`, and whether it says the engine is listed.
fn verdict(lines: &[(i32, String)], engine: &str) -> (bool, String) {
    let about: Vec<&(i32, String)> = lines
        .iter()
        .filter(|(_, l)| l.starts_with(&format!("[hipdnn_provider_ragged_sdpa] {engine} ")))
        .collect();
    assert_eq!(about.len(), 1, "one line about {engine}: {lines:?}");
    let (severity, line) = about[0];
    assert_eq!(*severity, 0, "INFO: {line}");
    let listed = line.contains(&format!("{engine} listed: "));
    assert!(
        listed || line.contains(&format!("{engine} not listed: ")),
        "{line}"
    );
    (listed, line.clone())
}

#[test]
fn each_gpu_engine_is_listed_or_says_why_and_the_host_engine_comes_last() {
    let p = plugin();
    let mut ids = [0i64; 8];
    let mut n = 0u32;
    // SAFETY: valid callback, level and buffers.
    unsafe {
        assert_eq!((p.SetLoggingCallback)(Some(collect)), SUCCESS);
        assert_eq!((p.SetLogLevel)(0), SUCCESS);
        assert_eq!((p.GetAllEngineIds)(ids.as_mut_ptr(), 8, &mut n), SUCCESS);
    }
    let ids = &ids[..n as usize];
    let lines = log_lines::lines();

    let (cuda, cuda_line) = verdict(&lines, "RAGGED_SDPA_CUDA_FMHA");
    assert_eq!(cuda, ids.contains(&CUDA_FMHA_ID), "{cuda_line}");
    if !cuda {
        eprintln!("no CUDA here: {cuda_line}");
        assert!(cuda_line.contains("CUDA is unavailable: "), "{cuda_line}");
    }
    // The non-deterministic CUDA engine is listed exactly when the deterministic one is, right
    // after it (hipDNN takes the first applicable engine: the default stays deterministic).
    let (nondet, nondet_line) = verdict(&lines, "RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC");
    assert_eq!(nondet, cuda, "{nondet_line}");
    assert_eq!(
        nondet,
        ids.contains(&CUDA_FMHA_NONDETERMINISTIC_ID),
        "{nondet_line}"
    );
    if cuda {
        let at = |id: i64| ids.iter().position(|&x| x == id);
        assert_eq!(
            at(CUDA_FMHA_NONDETERMINISTIC_ID),
            at(CUDA_FMHA_ID).map(|i| i + 1),
            "{ids:?}"
        );
    }
    let (aiter, aiter_line) = verdict(&lines, "RAGGED_SDPA_AITER_FMHA");
    assert_eq!(aiter, ids.contains(&AITER_FMHA_ID), "{aiter_line}");
    if !aiter {
        assert!(
            [
                "no HIP runtime",
                "no HIP device",
                "no hipRTC",
                "no usable AITER shim"
            ]
            .iter()
            .any(|missing| aiter_line.contains(missing)),
            "names what was missing: {aiter_line}"
        );
    }
    // The common loader sets HIPDNN_RAGGED_SDPA_HOST_ENGINE=1, so the host engine is listed,
    // after every GPU engine.
    assert_eq!(ids.last(), Some(&HOST_REFERENCE_ID), "{ids:?}");
    assert_eq!(ids.len(), 1 + 2 * usize::from(cuda) + usize::from(aiter));
}
