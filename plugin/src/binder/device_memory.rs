//! How the host reference engine reaches variant-pack memory in this process: which GPU
//! runtimes can hold tensors here, where each pointer lives, and copies on the handle's stream.
//!
//! The rule (decided once, from the process verdicts of [`ragged_gpu_runtime::probe`]):
//! no usable GPU runtime means no device pointer can exist, so every pointer is host memory and
//! is used in place — this is also the answer next to a HIP runtime without a device, or one
//! too old to be used. A usable runtime means each pointer is asked about: host memory stays in
//! place, device memory is staged through host copies by the runtime that owns it.

use std::ffi::c_void;
use std::sync::Arc;

use ragged_gpu_runtime::Location;
use ragged_gpu_runtime::cuda::memory as cuda_memory;
use ragged_gpu_runtime::hip::HipRuntime;
use ragged_gpu_runtime::probe::{self, HipVerdict};

use crate::error::PluginError;

/// The GPU runtimes whose memory the host engine can reach through copies.
#[derive(Clone)]
pub struct DeviceMemory {
    cuda: bool,
    hip: Option<Arc<HipRuntime>>,
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("cuda", &self.cuda)
            .field("hip", &self.hip.as_ref().map(|h| h.path().to_path_buf()))
            .finish()
    }
}

impl PartialEq for DeviceMemory {
    fn eq(&self, other: &Self) -> bool {
        self.cuda == other.cuda
            && match (&self.hip, &other.hip) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

/// How the host engine reaches the variant pack's memory in this process.
#[derive(Debug, Clone, PartialEq)]
pub enum Access {
    /// No usable GPU runtime: every pointer is host memory.
    InPlace,
    /// A usable runtime: device pointers are staged through host copies.
    Copies(DeviceMemory),
    /// A usable runtime without the functions to copy: the engine declines.
    Unreachable(String),
}

impl Access {
    /// One line for the plugin's log.
    pub fn describe(&self) -> String {
        match self {
            Access::InPlace => "host reference engine: no usable GPU runtime, every tensor is \
                                host memory and is used in place"
                .to_owned(),
            Access::Copies(memory) => format!(
                "host reference engine: device tensors are staged through host copies ({})",
                match (memory.cuda, memory.hip.is_some()) {
                    (true, true) => "CUDA and HIP",
                    (true, false) => "CUDA",
                    _ => "HIP",
                }
            ),
            Access::Unreachable(reason) => format!("host reference engine: {reason}"),
        }
    }
}

/// The rule behind the process's [`Access`], separated from the probes for tests.
pub fn decide(cuda_usable: bool, hip: &HipVerdict) -> Access {
    let hip = match hip.usable() {
        None => None,
        Some(devices) => {
            let missing = probe::copy_path_missing(&devices.runtime);
            if !missing.is_empty() {
                return Access::Unreachable(format!(
                    "{} has a device, so tensors may be device memory, but it lacks {} to copy \
                     them",
                    hip.describe(),
                    missing.join(", ")
                ));
            }
            Some(Arc::clone(&devices.runtime))
        }
    };
    if !cuda_usable && hip.is_none() {
        return Access::InPlace;
    }
    Access::Copies(DeviceMemory {
        cuda: cuda_usable,
        hip,
    })
}

impl DeviceMemory {
    /// Where `address` lives: device memory of any usable runtime is `Device`.
    pub fn location(&self, address: u64) -> Result<Location, PluginError> {
        if self.cuda && cuda_memory::location(address)? == Location::Device {
            return Ok(Location::Device);
        }
        if let Some(hip) = &self.hip
            && hip.location(address)? == Location::Device
        {
            return Ok(Location::Device);
        }
        Ok(Location::Host)
    }

    /// The runtime that owns `address` (CUDA first, as [`Self::location`] asks).
    fn owner(&self, address: u64) -> Result<Owner<'_>, PluginError> {
        if self.cuda && cuda_memory::location(address)? == Location::Device {
            return Ok(Owner::Cuda);
        }
        match &self.hip {
            Some(hip) => Ok(Owner::Hip(hip)),
            None => Ok(Owner::Cuda),
        }
    }

    /// Copies each `(device address, host buffer)` pair to the host on `stream` and waits.
    ///
    /// # Safety
    /// `stream` is null or a live stream of the runtime that owns the addresses; each address
    /// is readable device memory for the length of its buffer.
    pub unsafe fn download(
        &self,
        stream: *mut c_void,
        copies: &mut [(u64, &mut [u8])],
    ) -> Result<(), PluginError> {
        for (address, buffer) in copies.iter_mut() {
            let one = &mut [(*address, &mut **buffer)];
            match self.owner(*address)? {
                // SAFETY: forwarded contract, one pair at a time, to the owning runtime.
                Owner::Cuda => unsafe { cuda_memory::download(stream.cast(), one) }?,
                // SAFETY: as above.
                Owner::Hip(hip) => unsafe { hip.download(stream, one) }?,
            }
        }
        Ok(())
    }

    /// Copies each `(device address, host bytes)` pair to the device on `stream` and waits.
    ///
    /// # Safety
    /// As [`Self::download`], with the addresses writable and not used by other work meanwhile.
    pub unsafe fn upload(
        &self,
        stream: *mut c_void,
        copies: &[(u64, &[u8])],
    ) -> Result<(), PluginError> {
        for &(address, bytes) in copies {
            let one = &[(address, bytes)];
            match self.owner(address)? {
                // SAFETY: forwarded contract, one pair at a time, to the owning runtime.
                Owner::Cuda => unsafe { cuda_memory::upload(stream.cast(), one) }?,
                // SAFETY: as above.
                Owner::Hip(hip) => unsafe { hip.upload(stream, one) }?,
            }
        }
        Ok(())
    }
}

enum Owner<'a> {
    Cuda,
    Hip(&'a HipRuntime),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_usable_runtime_everything_is_in_place() {
        let absent =
            HipVerdict::evaluate(&[std::path::PathBuf::from("/nonexistent/libamdhip64.so")]);
        assert_eq!(decide(false, &absent), Access::InPlace);
        let Access::Copies(memory) = decide(true, &absent) else {
            panic!("CUDA usable must copy");
        };
        assert!(memory.cuda && memory.hip.is_none());
        assert!(decide(false, &absent).describe().contains("in place"));
    }
}
