//! The engine-plugin handle: one per hipDNN handle, carrying that handle's stream; and the
//! EngineDetails buffers lent out through handles.
//!
//! A lent buffer belongs to the caller until `DestroyEngineDetails` returns it, even if the
//! handle that lent it is destroyed first: a caller whose GetEngineDetails succeeded while
//! another thread destroyed the handle may still read the buffer, then return it through the
//! (now destroyed) handle value (issue 13 item 3).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use parking_lot::Mutex;

use crate::error::PluginError;
use crate::registry::Registry;

pub static HANDLES: LazyLock<Registry<EngineHandle>> =
    LazyLock::new(|| Registry::new("engine plugin handle"));

#[derive(Default)]
pub struct EngineHandle {
    /// `hipStream_t` from the last `SetStream`; NULL is the default stream. The host engine
    /// completes synchronously and does not need it; GPU engines enqueue on it.
    stream: AtomicPtr<c_void>,
}

/// EngineDetails buffers lent to C, keyed by address, with the key of the handle that lent them.
/// Buffer address → (key of the lending handle, the bytes).
type LentDetails = HashMap<usize, (usize, Box<[u8]>)>;

static LENT: LazyLock<Mutex<LentDetails>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Keeps `bytes` alive until [`return_details`] and returns where C may read them; `owner` is
/// the key of the lending handle.
pub fn lend_details(owner: usize, bytes: Vec<u8>) -> (*const u8, usize) {
    let bytes = bytes.into_boxed_slice();
    let (ptr, len) = (bytes.as_ptr(), bytes.len());
    LENT.lock().insert(ptr as usize, (owner, bytes));
    (ptr, len)
}

/// Frees a buffer lent by [`lend_details`] through handle `owner` (live or destroyed); the size
/// must match what was lent.
pub fn return_details(owner: usize, ptr: usize, size: usize) -> Result<(), PluginError> {
    let mut lent = LENT.lock();
    match lent.get(&ptr) {
        Some((by, bytes)) if *by == owner && bytes.len() == size => {
            lent.remove(&ptr);
            if lent.is_empty() {
                // As the registries: no table outlives the last lent buffer (issue 13).
                lent.shrink_to_fit();
            }
            Ok(())
        }
        _ => Err(PluginError::UnknownEngineDetails { address: ptr }),
    }
}

/// What the plugin keeps between calls for the process, released when the last handle is
/// destroyed: the worker pool (its threads joined), the CPU reference's staging buffers and the
/// GPU-runtime and AITER probes' verdicts (a usable runtime or engine excepted). After
/// this, unloading the library leaves neither a thread running its code nor heap that only its
/// statics knew about (issue 13 items 1 and 7); the next call that needs either builds it anew.
pub fn last_handle_destroyed() {
    crate::worker_pool::shut_down();
    ragged_kernels::sdpa::release_caches();
    ragged_kernels::runtime::probe::release();
    crate::engines::aiter::release_probe();
}

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

    #[test]
    fn details_are_returned_once_with_their_size_through_their_handle() {
        let (ptr, len) = lend_details(7, vec![1, 2, 3]);
        assert!(return_details(7, ptr as usize, len + 1).is_err());
        assert!(return_details(8, ptr as usize, len).is_err());
        assert!(return_details(7, ptr as usize, len).is_ok());
        assert!(return_details(7, ptr as usize, len).is_err());
    }
}
