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

use ragged_kernels::runtime::Location;
use ragged_kernels::runtime::probe;

pub use super::device_memory::{Access, DeviceMemory, decide as decide_access};
use crate::abi::types::{DeviceBuffer, Severity};
use crate::applicability::Decline;
use crate::engines::host;
use crate::error::PluginError;
use crate::logging;
use crate::plan::{ScalePlan, SdpaPlan, TensorPlan};
use crate::variant_pack::VariantPack;

/// Decided once per process, like the engine list, and logged once.
pub fn access() -> &'static Access {
    static ACCESS: OnceLock<Access> = OnceLock::new();
    ACCESS.get_or_init(|| {
        let access = decide_access(probe::cuda().is_ok(), probe::hip());
        let line = format!("{}; {}", access.describe(), probe::hip().describe());
        logging::log(Severity::INFO, || line);
        access
    })
}

/// The host engine's applicability beyond the graph: whether it can reach the memory.
pub fn check_reachable() -> Result<(), Decline> {
    match access() {
        Access::Unreachable(reason) => Err(Decline(reason.clone())),
        Access::InPlace | Access::Copies(_) => Ok(()),
    }
}

/// Runs the host engine, staging device tensors through the host when needed.
///
/// # Safety
/// Each pointer in `pack` is valid for its tensor's extent, either as host memory or as device
/// memory of `stream`'s context; `stream` is NULL or a live stream.
pub unsafe fn execute(
    plan: &SdpaPlan,
    stream: *mut c_void,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    match access() {
        // SAFETY: forwarded contract; without a GPU runtime every pointer is host memory.
        Access::InPlace => unsafe { host::execute(plan, pack) },
        // SAFETY: forwarded contract.
        Access::Copies(memory) => unsafe { staged(plan, memory, stream, pack) },
        Access::Unreachable(reason) => Err(PluginError::NotApplicable {
            engine: crate::engines::HOST_REFERENCE.name_str(),
            reason: reason.clone(),
        }),
    }
}

/// Host copies of the device-resident tensors of one call, and the pack that points at them.
struct Staging<'m> {
    memory: &'m DeviceMemory,
    entries: Vec<DeviceBuffer>,
    /// uid → (device address, host copy); u64 words keep every element type aligned.
    copies: Vec<(i64, u64, Vec<u64>)>,
}

impl<'m> Staging<'m> {
    fn new(memory: &'m DeviceMemory, pack: &VariantPack<'_>) -> Self {
        Staging {
            memory,
            entries: pack.entries().to_vec(),
            copies: Vec::new(),
        }
    }

    fn pack(&self) -> Result<VariantPack<'_>, PluginError> {
        VariantPack::new(&self.entries)
    }

    /// Makes `uid` (of `bytes` bytes) host-reachable: downloads it if it is device memory.
    ///
    /// # Safety
    /// The pointer bound to `uid` is valid for `bytes` bytes (host or device memory of
    /// `stream`'s context).
    unsafe fn stage(
        &mut self,
        uid: i64,
        role: &'static str,
        bytes: usize,
        stream: *mut c_void,
    ) -> Result<(), PluginError> {
        if self.copies.iter().any(|(staged, ..)| *staged == uid) {
            return Ok(());
        }
        let address = self.pack()?.pointer(uid, role)?.as_ptr() as u64;
        if self.memory.location(address)? == Location::Host {
            return Ok(());
        }
        let mut copy = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: forwarded contract for the device side; the host side is `copy`, viewed as
        // bytes (see `as_bytes_mut`).
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
    ///
    /// # Safety
    /// The device addresses are writable for the staged lengths.
    unsafe fn upload(
        &self,
        outputs: &[(i64, usize)],
        stream: *mut c_void,
    ) -> Result<(), PluginError> {
        let copies: Vec<(u64, &[u8])> = self
            .copies
            .iter()
            .filter_map(|(uid, address, copy)| {
                let bytes = outputs.iter().find(|(o, _)| o == uid)?.1;
                Some((*address, &as_bytes(copy)[..bytes]))
            })
            .collect();
        // SAFETY: forwarded contract.
        unsafe { self.memory.upload(stream, &copies) }?;
        Ok(())
    }
}

/// # Safety
/// As for [`execute`], with a GPU runtime usable.
unsafe fn staged(
    plan: &SdpaPlan,
    memory: &DeviceMemory,
    stream: *mut c_void,
    pack: &VariantPack<'_>,
) -> Result<(), PluginError> {
    let batch = usize::try_from(plan.q.dims[0]).unwrap_or(0);
    let tensors: Vec<&TensorPlan> = [&plan.q, &plan.k, &plan.v, &plan.o]
        .into_iter()
        .chain(plan.stats.as_ref())
        .collect();
    let mut staging = Staging::new(memory, pack);
    // SAFETY: forwarded contract; each length staged is what the plan gives the tensor, and
    // extents are computed from offsets already made host-reachable.
    unsafe {
        for t in &tensors {
            if let Some(r) = t.ragged {
                let entries = batch.saturating_add(1);
                let bytes = host::index_tensor_bytes(r.aux_uid, r.aux_data_type, entries)?;
                staging.stage(r.aux_uid, "ragged_offset_tensor_uid", bytes, stream)?;
            }
        }
        for s in plan.seq_len_q.iter().chain(&plan.seq_len_kv) {
            let bytes = host::index_tensor_bytes(s.uid, s.data_type, batch)?;
            staging.stage(s.uid, s.role, bytes, stream)?;
        }
        // A pass-by-value scale is a host pointer by contract (plugin-abi.md §5.7): never staged.
        if let ScalePlan::DeviceTensor { uid, data_type } = plan.scale {
            let bytes = crate::plan::kernel_type(data_type).map_or(8, |t| t.size());
            staging.stage(uid, "scale_tensor_uid", bytes, stream)?;
        }
        let mut outputs = Vec::new();
        for t in &tensors {
            let bytes = host::extent_bytes(t, &staging.pack()?)?;
            staging.stage(t.uid, t.role, bytes, stream)?;
            if t.uid == plan.o.uid || plan.stats.as_ref().is_some_and(|s| s.uid == t.uid) {
                outputs.push((t.uid, bytes));
            }
        }
        host::execute(plan, &staging.pack()?)?;
        staging.upload(&outputs, stream)
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
