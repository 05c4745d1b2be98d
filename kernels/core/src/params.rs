//! The resolved parameters of one SDPA: what every engine and the CPU reference run with once
//! the graph's scale and mask attributes are resolved.

use crate::mask::MaskBand;

/// Resolved SDPA parameters: the plugin resolves scale and mask from the graph attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpaParams {
    /// Multiplies Q·Kᵀ before the softmax.
    pub scale: f32,
    /// Admitted keys per query row.
    pub band: MaskBand,
}

impl Default for SdpaParams {
    /// Scale 1.0 (the project default, schema.md §6.2) and no mask.
    fn default() -> Self {
        SdpaParams {
            scale: 1.0,
            band: MaskBand::none(),
        }
    }
}
