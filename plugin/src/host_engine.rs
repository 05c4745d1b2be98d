//! The `RAGGED_SDPA_HOST_REFERENCE` engine: runs the kernels crate's CPU reference over the
//! variant pack. Wired to the kernel once `ragged_kernels::sdpa_forward` lands; until then every
//! execute fails with a message saying so.

use crate::error::PluginError;
use crate::plan::SdpaPlan;
use crate::variant_pack::VariantPack;

/// # Safety
/// Every pointer in `pack` is a host pointer valid for the extent its tensor in `plan` implies.
pub unsafe fn execute(_plan: &SdpaPlan, _pack: &VariantPack<'_>) -> Result<(), PluginError> {
    Err(PluginError::Engine(
        "the CPU reference kernel (ragged_kernels::sdpa_forward) is not wired in yet".into(),
    ))
}
