//! The host reference engine in a process where tensors may live in device memory (issue 4,
//! ragged-sdpa.md §6: "copies to host, synchronizes").
//!
//! Next to a usable CUDA runtime each variant-pack pointer is classified by the driver: host
//! memory (the host shim's buffers) is used in place, device memory is copied to the host on the
//! handle's stream, the reference runs, and the outputs are copied back before returning. The
//! outputs are downloaded too, so that positions the reference never writes (padding rows) keep
//! their device contents after the upload. Offsets and seq_lens come first: they fix every other
//! tensor's extent.
//!
//! Next to a usable HIP runtime the same happens through HIP's copies; which runtimes count and
//! how a pointer is classified is [`super::device_memory`]'s job.

use std::ffi::c_void;
use std::sync::OnceLock;

use ragged_core::problem::{OFFSETS_ROLE, RaggedSdpaProblem, ScalePlan};
use ragged_gpu_runtime::Location;
use ragged_gpu_runtime::probe;

pub use super::device_memory::{Access, DeviceMemory, decide as decide_access};
use crate::abi::types::{DeviceBuffer, Severity};
use crate::engines::host;
use crate::error::PluginError;
use crate::logging;
use crate::variant_pack::VariantPack;
use ragged_core::Decline;

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

/// The host engine's applicability beyond the graph: whether it can reach the memory.
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

/// Host copies of the device-resident tensors of one call, and the pack that points at them.
pub(super) struct Staging<'m> {
    memory: &'m DeviceMemory,
    entries: Vec<DeviceBuffer>,
    /// uid → (device address, host copy); u64 words keep every element type aligned.
    copies: Vec<(i64, u64, Vec<u64>)>,
    stream: *mut c_void,
}

impl<'m> Staging<'m> {
    pub(super) fn new(memory: &'m DeviceMemory, pack: &VariantPack<'_>) -> Self {
        Staging {
            memory,
            entries: pack.entries().to_vec(),
            copies: Vec::new(),
            stream: pack.stream(),
        }
    }

    /// The call's pack with every staged pointer replaced by its host copy.
    pub(super) fn pack(&self) -> Result<VariantPack<'_>, PluginError> {
        // SAFETY: each entry is either the caller's pointer, host memory under the caller's
        // pack contract, or a host copy owned by `self` of the length the problem gives it;
        // the host engine needs no workspace.
        unsafe { VariantPack::new(&self.entries, self.stream, std::ptr::null_mut()) }
    }

    /// Makes `uid` (of `bytes` bytes, its extent in this call) host-reachable: downloads it if
    /// it is device memory.
    pub(super) fn stage(
        &mut self,
        uid: i64,
        role: &'static str,
        bytes: usize,
    ) -> Result<(), PluginError> {
        let stream = self.stream;
        if self.copies.iter().any(|(staged, ..)| *staged == uid) {
            return Ok(());
        }
        let address = self.pack()?.pointer(uid, role)?.as_ptr() as u64;
        if self.memory.location(address)? == Location::Host {
            return Ok(());
        }
        let mut copy = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: the caller's pack contract for the device side (valid for the extent the
        // problem implies, which is `bytes`); the host side is `copy`, viewed as bytes.
        unsafe {
            self.memory.download(
                stream,
                &mut [(address, &mut as_bytes_mut(&mut copy)[..bytes])],
            )
        }?;
        let host = copy.as_mut_ptr().cast::<c_void>();
        if let Some(entry) = self.entries.iter_mut().find(|e| e.uid == uid) {
            entry.ptr = host;
        }
        self.copies.push((uid, address, copy));
        Ok(())
    }

    /// Copies the staged outputs back to the device.
    pub(super) fn upload(&self, outputs: &[(i64, usize)]) -> Result<(), PluginError> {
        let copies: Vec<(u64, &[u8])> = self
            .copies
            .iter()
            .filter_map(|(uid, address, copy)| {
                let bytes = outputs.iter().find(|(o, _)| o == uid)?.1;
                Some((*address, &as_bytes(copy)[..bytes]))
            })
            .collect();
        // SAFETY: the caller's pack contract: outputs are writable device memory for their
        // extents, which are the staged lengths.
        unsafe { self.memory.upload(self.stream, &copies) }?;
        Ok(())
    }
}

/// Runs the host engine with a GPU runtime usable: offsets and seq_lens are made host-reachable first
/// (they fix every other extent), then each tensor over its extent, then the reference runs and
/// the outputs go back.
pub fn run_staged(
    problem: &RaggedSdpaProblem,
    memory: &DeviceMemory,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    let batch = usize::try_from(problem.batch()).unwrap_or(0);
    let mut staging = Staging::new(memory, pack);
    for t in problem.tensors() {
        if let Some(r) = t.ragged {
            let bytes = host::index_tensor_bytes(r.uid, r.width, batch.saturating_add(1))?;
            staging.stage(r.uid, OFFSETS_ROLE, bytes)?;
        }
    }
    for s in problem.seq_lens() {
        let bytes = host::index_tensor_bytes(s.uid, s.width, batch)?;
        staging.stage(s.uid, s.role, bytes)?;
    }
    // A pass-by-value scale is a host pointer by contract (plugin-abi.md §5.7): never staged.
    if let ScalePlan::DeviceTensor { uid, data_type } = problem.scale {
        staging.stage(uid, "scale_tensor_uid", data_type.size())?;
    }
    let extents = host::extents(problem, &staging.pack()?)?;
    let mut outputs = Vec::new();
    for (uid, role, bytes) in extents {
        staging.stage(uid, role, bytes)?;
        if uid == problem.o.uid || problem.stats.as_ref().is_some_and(|s| s.uid == uid) {
            outputs.push((uid, bytes));
        }
    }
    host::run(problem, &staging.pack()?)?;
    staging.upload(&outputs)
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
