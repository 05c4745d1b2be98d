//! The engine-plugin handle: one per hipDNN handle, carrying that handle's stream and the
//! EngineDetails buffers lent out through it.

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
    /// EngineDetails buffers owned by the plugin until `DestroyEngineDetails`, keyed by address.
    details: Mutex<HashMap<usize, Box<[u8]>>>,
}

impl EngineHandle {
    pub fn set_stream(&self, stream: *mut c_void) {
        self.stream.store(stream, Ordering::Release);
    }

    pub fn stream(&self) -> *mut c_void {
        self.stream.load(Ordering::Acquire)
    }

    /// Keeps `bytes` alive and returns where C may read them.
    pub fn lend_details(&self, bytes: Vec<u8>) -> (*const u8, usize) {
        let bytes = bytes.into_boxed_slice();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        self.details.lock().insert(ptr as usize, bytes);
        (ptr, len)
    }

    /// Frees a buffer lent by [`Self::lend_details`]; the size must match what was lent.
    pub fn return_details(&self, ptr: usize, size: usize) -> Result<(), PluginError> {
        let mut lent = self.details.lock();
        match lent.get(&ptr) {
            Some(bytes) if bytes.len() == size => {
                lent.remove(&ptr);
                Ok(())
            }
            _ => Err(PluginError::UnknownEngineDetails { address: ptr }),
        }
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
    fn details_are_returned_once_with_their_size() {
        let handle = EngineHandle::default();
        let (ptr, len) = handle.lend_details(vec![1, 2, 3]);
        assert!(handle.return_details(ptr as usize, len + 1).is_err());
        assert!(handle.return_details(ptr as usize, len).is_ok());
        assert!(handle.return_details(ptr as usize, len).is_err());
    }
}
