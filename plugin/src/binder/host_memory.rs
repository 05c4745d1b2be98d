//! How a plan of `Reach::Host` reaches the caller's memory in this process (ragged-sdpa.md §6:
//! "copies to host, synchronizes").
//!
//! Without a usable GPU runtime every pointer is host memory and is used in place. Next to a
//! usable CUDA or HIP runtime each pointer is classified by the runtime ([`super::device_memory`]):
//! host memory (the host shim's buffers) is used in place, device memory is copied to the host on
//! the call's stream, the engine runs, and the outputs are copied back after it returns. Outputs
//! are downloaded too, so that positions the engine never writes (padding rows) keep their device
//! contents after the upload.

use std::ffi::c_void;
use std::sync::OnceLock;

use ragged_core::Decline;
use ragged_core::binding::{Access as Use, Declared, Kind};
use ragged_gpu_runtime::{Location, probe};

use super::Place;
pub use super::device_memory::{Access, DeviceMemory, decide as decide_access};
use crate::abi::types::Severity;
use crate::error::PluginError;
use crate::logging;

/// Decided once per process, like the engine list, and logged once.
pub fn access() -> &'static Access {
    static ACCESS: OnceLock<Access> = OnceLock::new();
    ACCESS.get_or_init(|| {
        let access = decide_access(probe::cuda().is_ok(), &probe::hip());
        let line = format!("{}; {}", access.describe(), probe::hip().describe());
        logging::log(Severity::INFO, || line);
        access
    })
}

/// Whether a plan that reads host memory can run here: where a GPU runtime holds memory it has
/// no functions to copy, it cannot.
pub fn check_reachable() -> Result<(), Decline> {
    match access() {
        Access::Unreachable(reason) => Err(Decline::graph(
            "memory access of the host engine",
            reason,
            "host memory, or a GPU runtime with a copy path",
        )),
        Access::InPlace | Access::Copies(_) => Ok(()),
    }
}

/// The process's way to host memory, for one call.
pub(super) struct HostMemory(Option<&'static DeviceMemory>);

impl HostMemory {
    pub(super) fn of_process() -> Result<Self, PluginError> {
        match access() {
            Access::InPlace => Ok(HostMemory(None)),
            Access::Copies(memory) => Ok(HostMemory(Some(memory))),
            Access::Unreachable(reason) => Err(PluginError::NotApplicable {
                engine: "RAGGED_SDPA_HOST_REFERENCE",
                reason: reason.clone(),
            }),
        }
    }

    /// Where `declared`'s `bytes` bytes at `address` can be read on the host: in place, or a
    /// copy in `staged` downloaded on `stream`.
    ///
    /// # Safety
    /// `address` is valid for `bytes` bytes (host memory, or device memory of a usable runtime
    /// readable on `stream`, which is NULL or live).
    pub(super) unsafe fn reach(
        &self,
        staged: &mut Staged,
        declared: &Declared,
        address: u64,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<Place, PluginError> {
        let Some(memory) = self.0 else {
            return Ok(Place::Host { address, bytes });
        };
        if memory.location(address)? == Location::Host {
            return Ok(Place::Host { address, bytes });
        }
        let mut copy = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: the device side is valid for `bytes` (contract); the host side is `copy`.
        unsafe {
            memory.download(
                stream,
                &mut [(address, &mut as_bytes_mut(&mut copy)[..bytes])],
            )
        }?;
        let host = copy.as_mut_ptr() as u64;
        let output = matches!(
            declared.kind,
            Kind::Tensor {
                access: Use::Write,
                ..
            }
        );
        staged.copies.push(StagedCopy {
            device: address,
            host: copy,
            bytes,
            output,
        });
        staged.upload = Some((memory, stream));
        Ok(Place::Host {
            address: host,
            bytes,
        })
    }
}

/// Host copies of one call's device-resident buffers. A copy's heap buffer never moves while
/// the call's slices borrow it (the list may grow; the buffers it owns stay put).
#[derive(Default)]
pub struct Staged {
    copies: Vec<StagedCopy>,
    upload: Option<(&'static DeviceMemory, *mut c_void)>,
}

struct StagedCopy {
    device: u64,
    /// u64 words keep every element type aligned.
    host: Vec<u64>,
    bytes: usize,
    output: bool,
}

impl Staged {
    /// Copies the staged outputs back to the device, after a successful execute.
    pub fn write_back(&self) -> Result<(), PluginError> {
        let Some((memory, stream)) = self.upload else {
            return Ok(());
        };
        let copies: Vec<(u64, &[u8])> = self
            .copies
            .iter()
            .filter(|c| c.output)
            .map(|c| (c.device, &as_bytes(&c.host)[..c.bytes]))
            .collect();
        // SAFETY: the bind contract: outputs are writable device memory for their extents,
        // which are the staged lengths; the stream is NULL or live for the call.
        unsafe { memory.upload(stream, &copies) }?;
        Ok(())
    }
}

fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u8 has alignment 1 and no invalid bit patterns; the length covers the same bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len() * 8) }
}

fn as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as `as_bytes`; any byte pattern written is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_views_cover_every_word() {
        let mut words = vec![0u64; 2];
        as_bytes_mut(&mut words)[8] = 0xab;
        assert_eq!(as_bytes(&words).len(), 16);
        assert_eq!(words[1].to_le_bytes()[0], 0xab);
    }
}
