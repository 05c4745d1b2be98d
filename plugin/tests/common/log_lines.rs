//! A logging callback that keeps every line, for the suites that read what the plugin logs.
//! The callback is process-wide, so each such suite is its own test binary.

use std::ffi::{CStr, c_char};
use std::sync::Mutex;

static LINES: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

/// The callback to register with `SetLoggingCallback`.
pub unsafe extern "C" fn collect(severity: i32, message: *const c_char) {
    // SAFETY: the plugin passes a NUL-terminated line valid during the call.
    let line = unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    if let Ok(mut lines) = LINES.lock() {
        lines.push((severity, line));
    }
}

/// The lines collected so far, left in place.
pub fn lines() -> Vec<(i32, String)> {
    LINES.lock().map(|l| l.clone()).unwrap_or_default()
}

/// The lines collected so far, emptying the store.
pub fn take() -> Vec<(i32, String)> {
    LINES
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default()
}
