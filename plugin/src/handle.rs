//! The engine-plugin handle: one per hipDNN handle, carrying that handle's stream. The buffers
//! lent out through handles are `lent.rs`'s.

use std::ffi::c_void;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::registry::Registry;

pub static HANDLES: LazyLock<Registry<EngineHandle>> =
    LazyLock::new(|| Registry::new("engine plugin handle"));

#[derive(Default)]
pub struct EngineHandle {
    /// `hipStream_t` from the last `SetStream`; NULL is the default stream. The host engine
    /// completes synchronously and does not need it; GPU engines enqueue on it.
    stream: AtomicPtr<c_void>,
}

/// What the plugin keeps between calls for the process, released when the last handle is
/// destroyed: the worker pool (its threads joined), the CPU reference's staging buffers and the
/// GPU-runtime and AITER probes' verdicts (a usable runtime or engine excepted). After
/// this, unloading the library leaves neither a thread running its code nor heap that only its
/// statics knew about (issue 13 items 1 and 7); the next call that needs either builds it anew.
pub fn last_handle_destroyed() {
    ragged_engine_host::pool::shut_down();
    ragged_reference::sdpa::release_caches();
    ragged_gpu_runtime::probe::release();
    ragged_engine_aiter::adapter::release_probe();
}

/// Runs when the library is unloaded (`dlclose`) or the process exits, handles still live or
/// not: stops the worker pool and joins its threads, and frees the staging buffers. A host that
/// leaks a handle and then unloads the library would otherwise unmap the code its pool threads
/// sleep in, and they crash on waking (issue 38). What the leaked handles own is the host's leak
/// and stays as it is: dropping GPU objects here could call a driver that has already gone at
/// process exit.
extern "C" fn library_unloading() {
    // Nothing may unwind into the loader.
    let _ = std::panic::catch_unwind(|| {
        ragged_engine_host::pool::shut_down();
        ragged_reference::sdpa::release_caches();
    });
}

/// The loader runs every function in `.fini_array` before it unmaps the library.
#[cfg(target_os = "linux")]
#[used]
// SAFETY: `.fini_array` holds pointers to functions taking nothing and returning nothing, which
// `library_unloading` is; `#[used]` keeps the entry in the library.
#[unsafe(link_section = ".fini_array")]
static LIBRARY_UNLOADING: extern "C" fn() = library_unloading;

impl EngineHandle {
    pub fn set_stream(&self, stream: *mut c_void) {
        self.stream.store(stream, Ordering::Release);
    }

    pub fn stream(&self) -> *mut c_void {
        self.stream.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_kept_per_handle() {
        let (a, b) = (EngineHandle::default(), EngineHandle::default());
        let stream = 0x5000usize as *mut c_void;
        a.set_stream(stream);
        assert_eq!(a.stream(), stream);
        assert!(b.stream().is_null(), "default stream until SetStream");
    }
}
