//! `EngineConfig` and `EngineDetails`: the small tables the plugin ABI exchanges besides graphs.
//!
//! The project reads only `engine_id`; knob settings are kept as `(knob_id, value)` so that a
//! config chosen by the host round-trips, even though no project engine has knobs.

/// A knob value (the `KnobValue` union).
#[derive(Debug, Clone, PartialEq)]
pub enum KnobValue {
    Int(i64),
    Float(f64),
    String(String),
    /// A member tag this schema does not know, or NONE.
    Unset,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KnobSetting {
    pub knob_id: String,
    pub value: KnobValue,
}

/// What the host hands to `CreateExecutionContext`: which engine, with which knobs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineConfig {
    pub engine_id: i64,
    pub knobs: Vec<KnobSetting>,
    /// RFC 0019 §11.4; absent or empty means `"tflops"`.
    pub ranking_metric: Option<String>,
}

impl EngineConfig {
    pub fn new(engine_id: i64) -> EngineConfig {
        EngineConfig {
            engine_id,
            ..EngineConfig::default()
        }
    }
}

/// What the plugin answers for `GetEngineDetails`: the engine id and (always empty) knobs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineDetails {
    pub engine_id: i64,
    /// Records, never confers, the engine's name (plugin-abi.md §5.5).
    pub name: Option<String>,
    pub behavior_notes: Vec<i32>,
}

impl EngineDetails {
    pub fn new(engine_id: i64) -> EngineDetails {
        EngineDetails {
            engine_id,
            ..EngineDetails::default()
        }
    }
}
