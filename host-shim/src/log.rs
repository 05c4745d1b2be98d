//! Log records of the load and dispatch sequences, in the backend's words (plugin-abi.md §9), and
//! the logging callback handed to plugins.
//!
//! The host keeps records instead of printing them so that the CLI can show them, tests can assert
//! on them, and the gating snapshot can hold the exact skip lines.

use std::ffi::{CStr, c_char, c_int};
use std::fmt;
use std::sync::Mutex;

use crate::abi;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warn,
    Error,
    Fatal,
}

impl Severity {
    fn from_c(severity: c_int) -> Severity {
        match severity {
            abi::SEV_INFO => Severity::Info,
            abi::SEV_WARN => Severity::Warn,
            abi::SEV_ERROR => Severity::Error,
            _ => Severity::Fatal,
        }
    }

    /// `HIPDNN_LOG_LEVEL` spelling; `None` for `off` and anything unrecognised.
    pub fn from_env_value(value: &str) -> Option<Severity> {
        match value.to_ascii_lowercase().as_str() {
            "info" => Some(Severity::Info),
            "warn" => Some(Severity::Warn),
            "error" => Some(Severity::Error),
            "fatal" => Some(Severity::Fatal),
            _ => None,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        })
    }
}

/// Who wrote a record: the host (this crate, speaking for hipDNN's backend) or a plugin through
/// its logging callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Host,
    Plugin,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub severity: Severity,
    pub source: Source,
    pub message: String,
}

impl fmt::Display for LogRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match self.source {
            Source::Host => "host",
            Source::Plugin => "plugin",
        };
        write!(f, "[{}] [{who}] {}", self.severity, self.message)
    }
}

/// An append-only list of records.
#[derive(Debug, Default, Clone)]
pub struct Log {
    records: Vec<LogRecord>,
}

impl Log {
    pub fn info(&mut self, message: impl Into<String>) {
        self.push(Severity::Info, message);
    }

    pub fn warn(&mut self, message: impl Into<String>) {
        self.push(Severity::Warn, message);
    }

    pub fn error(&mut self, message: impl Into<String>) {
        self.push(Severity::Error, message);
    }

    fn push(&mut self, severity: Severity, message: impl Into<String>) {
        self.records.push(LogRecord {
            severity,
            source: Source::Host,
            message: message.into(),
        });
    }

    /// Moves whatever plugins sent through [`plugin_log_callback`] into this log.
    pub fn absorb_plugin_messages(&mut self) {
        let mut sink = PLUGIN_MESSAGES.lock().unwrap_or_else(|e| e.into_inner());
        self.records.append(&mut sink);
    }

    pub fn records(&self) -> &[LogRecord] {
        &self.records
    }

    /// Records at or above `threshold`.
    pub fn at_least(&self, threshold: Severity) -> impl Iterator<Item = &LogRecord> {
        self.records.iter().filter(move |r| r.severity >= threshold)
    }
}

/// Plugins log through a bare C function pointer with no user data, so their messages can only
/// land in process-wide storage; [`Log::absorb_plugin_messages`] collects them.
static PLUGIN_MESSAGES: Mutex<Vec<LogRecord>> = Mutex::new(Vec::new());

/// The callback registered with every plugin at load (step 7 of the load sequence).
///
/// # Safety
/// `message` must be NULL or a NUL-terminated string valid for the duration of the call.
pub unsafe extern "C" fn plugin_log_callback(severity: c_int, message: *const c_char) {
    let text = if message.is_null() {
        String::from("(NULL message)")
    } else {
        // SAFETY: non-NULL and NUL-terminated per this function's contract (the plugin ABI's
        // callback contract).
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    let record = LogRecord {
        severity: Severity::from_c(severity),
        source: Source::Plugin,
        message: text,
    };
    // Never panic here: this runs inside a plugin's call stack.
    if let Ok(mut sink) = PLUGIN_MESSAGES.lock() {
        sink.push(record);
    }
}
