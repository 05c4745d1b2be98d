//! `RAGGED_SDPA_HOST_REFERENCE`: the CPU reference as an engine, the numeric specification of
//! every other engine and the one that runs wherever no GPU engine can.
//!
//! It plans every problem the plugin accepts: one SDPA forward ([`forward`]), one SDPA backward
//! ([`backward`]) or a multi-node graph ([`graph`]). Its plans have `Reach::Host`: the plugin's
//! binder hands them host slices of exactly each buffer's extent (staging device memory through
//! host copies next to a GPU runtime), the validated layout of every ragged tensor and the scale,
//! so nothing here touches a raw pointer. The parallel loops run on [`pool`], threads this engine
//! owns and the plugin shuts down before the library is unloaded.

pub mod backward;
pub mod forward;
pub mod graph;
pub mod pool;
mod views;

use std::ffi::OsStr;
use std::sync::Arc;

use ragged_core::Decline;
use ragged_core::engine::{Listing, Planned, Planner, Problem};

/// The engine's name as `GetEngineName` reports it.
pub const ENGINE_NAME: &str = "RAGGED_SDPA_HOST_REFERENCE";

/// Environment variable that lists the host reference engine even next to a GPU runtime.
pub const HOST_ENGINE_ENV: &str = "HIPDNN_RAGGED_SDPA_HOST_ENGINE";

/// The engine: applicable to every problem the plugin accepts.
pub struct HostReference;

/// The host engine's listing rule, separated from the probes so it can be tested on any machine.
pub fn host_engine_offered(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> bool {
    !gpu_runtime_present || env_value == Some(OsStr::new("1"))
}

/// Listed without a GPU runtime (every pointer is host memory) or when asked for; silent when
/// listed.
pub fn listing_for(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> Listing {
    if host_engine_offered(gpu_runtime_present, env_value) {
        return Listing {
            listed: true,
            line: None,
        };
    }
    Listing {
        listed: false,
        line: Some(format!(
            "{ENGINE_NAME} not listed: a GPU runtime is loadable and {HOST_ENGINE_ENV} is not 1 \
             (set it to run the CPU reference; next to CUDA it copies device tensors to the host)"
        )),
    }
}

impl Planner for HostReference {
    fn listing(&self) -> Listing {
        listing_for(
            ragged_gpu_runtime::probe::gpu_runtime_present(),
            std::env::var_os(HOST_ENGINE_ENV).as_deref(),
        )
    }

    fn plan(&self, problem: &Problem) -> Result<Box<dyn Planned>, Decline> {
        if let Problem::Backward(p) = problem {
            let f = &p.forward;
            let serving = f.paged.map(|t| (t.table_k.uid, t.table_k.role));
            let serving = serving.or(f.sinks.map(|s| (s.uid, ragged_core::problem::SINK_ROLE)));
            if let Some((uid, field)) = serving {
                return Err(Decline::new(
                    uid,
                    field,
                    uid,
                    "unset on a backward: the host engine's backward runs without paged K/V or \
                     sinks (issue 44 adds them to the forward)",
                ));
            }
        }
        Ok(match problem {
            Problem::Forward(p) => Box::new(forward::HostForward::new(Arc::clone(p))),
            Problem::Backward(p) => Box::new(backward::HostBackward {
                problem: Arc::clone(p),
            }),
            Problem::Graph(g) => Box::new(graph::HostGraph {
                graph: Arc::clone(g),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_engine_rule() {
        assert!(host_engine_offered(false, None));
        assert!(host_engine_offered(false, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, None));
        assert!(!host_engine_offered(true, Some(OsStr::new("0"))));
        assert!(!host_engine_offered(true, Some(OsStr::new("yes"))));
        assert!(host_engine_offered(true, Some(OsStr::new("1"))));
    }
}
