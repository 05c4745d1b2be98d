//! Plugin log lines, sent through the backend's callback (`SetLoggingCallback`) and filtered by the
//! threshold the backend keeps in step with `HIPDNN_LOG_LEVEL` (`SetLogLevel`).
//!
//! Both settings are process-wide, as in the C++ SDK. The default threshold is INFO; the backend's
//! own callback filters again. Without a callback nothing is printed: a library must not write to
//! the host's stderr on its own.

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};

use parking_lot::RwLock;

use crate::abi::types::{LogCallback, Severity};

static CALLBACK: RwLock<LogCallback> = RwLock::new(None);
static LEVEL: AtomicI32 = AtomicI32::new(Severity::INFO.0);

/// Every line starts with this, so a mixed hipDNN log shows which plugin spoke.
const PREFIX: &str = "[hipdnn_provider_ragged_sdpa] ";

pub fn set_callback(callback: LogCallback) {
    *CALLBACK.write() = callback;
}

pub fn set_level(level: Severity) {
    LEVEL.store(level.0, Ordering::Relaxed);
}

/// True if a message of `severity` would be delivered; lets hot paths skip formatting.
pub fn enabled(severity: Severity) -> bool {
    let level = Severity(LEVEL.load(Ordering::Relaxed));
    level != Severity::OFF && severity >= level && CALLBACK.read().is_some()
}

/// Logs the message `make` builds, building it only if it will be delivered.
pub fn log(severity: Severity, make: impl FnOnce() -> String) {
    if !enabled(severity) {
        return;
    }
    // Copy the pointer out so the callback runs without our lock held (it may call back into us).
    let Some(callback) = *CALLBACK.read() else {
        return;
    };
    let text = format!("{PREFIX}{}", make()).replace('\0', " ");
    let Ok(line) = CString::new(text) else {
        return;
    };
    // SAFETY: the backend registered a C function with this signature and keeps it callable while
    // the plugin is loaded; `line` outlives the call.
    unsafe { callback(severity, line.as_ptr()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::ffi::{CStr, c_char};

    static SEEN: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn record(severity: Severity, message: *const c_char) {
        // SAFETY: `log` passes a valid NUL-terminated string.
        let text = unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned();
        SEEN.lock().push((severity.0, text));
    }

    // One test owns the process-wide settings, so parallel tests cannot interleave with it.
    #[test]
    fn level_threshold_and_off_are_honoured() {
        set_callback(Some(record));
        set_level(Severity::WARN);
        log(Severity::INFO, || "hidden".into());
        log(Severity::ERROR, || "shown".into());
        set_level(Severity::OFF);
        log(Severity::FATAL, || "silenced".into());
        set_level(Severity::INFO);
        set_callback(None);
        let seen: Vec<_> = SEEN
            .lock()
            .iter()
            .filter(|(_, t)| !t.contains("hipdnnTest"))
            .cloned()
            .collect();
        assert_eq!(
            seen,
            vec![(2, "[hipdnn_provider_ragged_sdpa] shown".to_owned())]
        );
    }
}
