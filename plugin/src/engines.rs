//! The engines this library can list, and which of them it lists in this process.
//!
//! plugin-abi.md §5.2 says the list is fixed per build. Issue 4 overrides that: an engine is listed
//! only if it can run on this machine. The list is still computed once and cached, so it is static
//! for the life of the loaded library, as the backend's two-call protocol requires.
//!
//! The host reference engine reads every tensor with the CPU. Next to a GPU runtime the backend
//! may hand us device pointers, which the CPU must not dereference, so the host engine is listed
//! only when the process has no GPU runtime (then every pointer is host memory) or when
//! `HIPDNN_RAGGED_SDPA_HOST_ENGINE=1` asks for it explicitly (the host shim sets it, and binds host
//! buffers). Until GPU engines exist, a process with a GPU runtime and without that variable gets
//! an empty list, which makes hipDNN reject the plugin at load (logged, and harmless to others).

use std::ffi::{CStr, OsStr};
use std::sync::OnceLock;

use crate::abi::types::Severity;
use crate::engine_id::engine_name_to_id;
use crate::{logging, runtime_probe};

/// Environment variable that lists the host reference engine even next to a GPU runtime.
pub const HOST_ENGINE_ENV: &str = "HIPDNN_RAGGED_SDPA_HOST_ENGINE";

/// One engine: its upper-snake-case name (static C storage, as `GetEngineName` hands it out) and
/// the id derived from it.
#[derive(Debug, PartialEq, Eq)]
pub struct Engine {
    pub name: &'static CStr,
    pub id: i64,
}

impl Engine {
    pub fn name_str(&self) -> &'static str {
        self.name.to_str().unwrap_or("<non-utf8 engine name>")
    }
}

/// `RAGGED_SDPA_HOST_REFERENCE`: the CPU reference, the numeric specification of every engine.
pub static HOST_REFERENCE: Engine = Engine {
    name: c"RAGGED_SDPA_HOST_REFERENCE",
    id: engine_name_to_id("RAGGED_SDPA_HOST_REFERENCE"),
};

/// The host engine's listing rule, separated from the probes so it can be tested on any machine.
pub fn host_engine_offered(gpu_runtime_present: bool, env_value: Option<&OsStr>) -> bool {
    !gpu_runtime_present || env_value == Some(OsStr::new("1"))
}

/// The engines listed in this process, decided on first use.
pub fn listed() -> &'static [&'static Engine] {
    static LISTED: OnceLock<Vec<&'static Engine>> = OnceLock::new();
    LISTED.get_or_init(|| {
        let gpu = runtime_probe::gpu_runtime_present();
        let env = std::env::var_os(HOST_ENGINE_ENV);
        let mut engines = Vec::new();
        if host_engine_offered(gpu, env.as_deref()) {
            engines.push(&HOST_REFERENCE);
        } else {
            logging::log(Severity::WARN, || {
                format!(
                    "a GPU runtime is loadable and {HOST_ENGINE_ENV} is not 1: the host reference \
                     engine is not listed (it would read device pointers with the CPU) and this \
                     build has no GPU engine, so no engine is listed"
                )
            });
        }
        engines
    })
}

/// A listed engine by id.
pub fn find(id: i64) -> Option<&'static Engine> {
    listed().iter().copied().find(|engine| engine.id == id)
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

    #[test]
    fn host_engine_id_is_the_hash_of_its_name() {
        assert_eq!(HOST_REFERENCE.id, 8202884889727546333);
        assert_eq!(HOST_REFERENCE.name_str(), "RAGGED_SDPA_HOST_REFERENCE");
    }
}
