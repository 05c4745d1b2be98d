//! Plugin log lines, sent through the backend's callback (`SetLoggingCallback`) and filtered by the
//! threshold the backend keeps in step with `HIPDNN_LOG_LEVEL` (`SetLogLevel`).
//!
//! Both settings are process-wide, as in the C++ SDK. The default threshold is INFO; the backend's
//! own callback filters again. Without a callback nothing is printed: a library must not write to
//! the host's stderr on its own.
//!
//! A line is not handed to the callback where it is written: a line written during an export is
//! queued and delivered when that export returns, on its thread, after its body has ended (so no
//! lock, lease or lazy initialisation of the plugin is held), and with the thread's last-error text
//! kept as the export left it. hipDNN hosts route logging through such callbacks, and a callback
//! may call back into the plugin: with delivery in place, the first line of the engine listing
//! was written inside a `OnceLock` initialiser, and a callback that listed engines waited on that
//! initialiser forever; a callback that destroyed the handle of the call that logged waited for
//! that call's lease. A line written outside any export (no such path exists in the plugin today)
//! is delivered at once.
//!
//! The queue is one process-wide list tagged by a per-thread number, not a thread-local `Vec`: a
//! thread-local with a destructor, registered on a host thread, would keep glibc from unmapping the
//! library at `dlclose` (see `kernels/host-engine/src/pool.rs`). The thread-locals here are plain `Cell`s of integers
//! and a flag, which register no destructor.

use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::abi::last_error;
use crate::abi::types::{LogCallback, Severity};

static CALLBACK: RwLock<LogCallback> = RwLock::new(None);
static LEVEL: AtomicI32 = AtomicI32::new(Severity::INFO.0);

/// Every line starts with this, so a mixed hipDNN log shows which plugin spoke.
const PREFIX: &str = "[hipdnn_provider_ragged_sdpa] ";

/// A line waiting for the end of the export that wrote it: (thread number, severity, text).
type Queued = (u64, Severity, CString);

static QUEUED: Mutex<Vec<Queued>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// How many exports this thread is inside (more than one while a callback calls back in).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// This thread's number in [`QUEUED`]; 0 until the thread first queues a line.
    static THREAD: Cell<u64> = const { Cell::new(0) };
    /// Whether this thread queued a line since its outermost export began, so that an export
    /// that logged nothing returns without touching the shared list.
    static PENDING: Cell<bool> = const { Cell::new(false) };
}

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
    let text = format!("{PREFIX}{}", make()).replace('\0', " ");
    let Ok(line) = CString::new(text) else {
        return;
    };
    if DEPTH.get() == 0 {
        deliver(severity, &line);
    } else {
        QUEUED.lock().push((thread_number(), severity, line));
        PENDING.set(true);
    }
}

/// Marks the start of an export on this thread; every `enter` is paired with one [`leave`].
pub fn enter() {
    DEPTH.set(DEPTH.get() + 1);
}

/// Marks the end of an export; at the outermost one, delivers the lines this thread queued.
/// The callback may call exports again: they queue and deliver their own lines the same way.
pub fn leave() {
    let depth = DEPTH.get().saturating_sub(1);
    DEPTH.set(depth);
    if depth > 0 {
        return;
    }
    if !PENDING.replace(false) {
        return;
    }
    let thread = THREAD.get();
    let mine: Vec<Queued> = {
        let mut queued = QUEUED.lock();
        let (mine, others) = std::mem::take(&mut *queued)
            .into_iter()
            .partition(|(t, _, _)| *t == thread);
        *queued = others;
        if queued.is_empty() {
            // A static's table left allocated at `dlclose` is heap nobody can free.
            queued.shrink_to_fit();
        }
        mine
    };
    if mine.is_empty() {
        return;
    }
    // The export's own error text is what the host reads after it returns, whatever the
    // callback's calls into the plugin wrote meanwhile.
    let kept = last_error::snapshot();
    for (_, severity, line) in &mine {
        deliver(*severity, line);
    }
    last_error::restore(&kept);
}

fn thread_number() -> u64 {
    let mut number = THREAD.get();
    if number == 0 {
        number = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        THREAD.set(number);
    }
    number
}

fn deliver(severity: Severity, line: &CString) {
    // Copy the pointer out so the callback runs without our lock held (it may call back into us).
    let Some(callback) = *CALLBACK.read() else {
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

        // Inside an export (nested once, as when a callback calls back in), lines wait for the
        // outermost end, and the export's last-error text survives whatever delivery does.
        SEEN.lock().clear();
        set_callback(Some(record));
        enter();
        log(Severity::ERROR, || "queued".into());
        enter();
        log(Severity::ERROR, || "nested".into());
        leave();
        let early = SEEN.lock().iter().any(|(_, t)| t.contains("queued"));
        last_error::set("the export's own error");
        leave();
        set_callback(None);
        assert!(!early, "a line was delivered before its export ended");
        let seen: Vec<String> = SEEN
            .lock()
            .iter()
            .filter(|(_, t)| !t.contains("hipdnnTest"))
            .map(|(_, t)| t.clone())
            .collect();
        assert_eq!(
            seen,
            [
                "[hipdnn_provider_ragged_sdpa] queued",
                "[hipdnn_provider_ragged_sdpa] nested"
            ]
        );
        assert_eq!(last_error::current(), "the export's own error");
    }
}
