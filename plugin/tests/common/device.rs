//! Helpers of the CUDA device tests (forward and backward): the engine's id, skip lines, element
//! bits and little-endian buffers.

use half::{bf16, f16};

pub const CUDA_FMHA_ID: i64 = -8390111541657994951;

/// Says why a device test did not run. Written straight to the process's stderr: libtest captures
/// `eprintln!`, which would turn a skip into a silent pass.
pub fn skip(name: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "test {name}: skipped: {reason}");
}

/// Uniform values in [−1, 1] as bf16 or f16 element bits (LCG, deterministic).
pub fn uniform_bits(n: usize, seed: u64, bf16: bool) -> Vec<u16> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            element_bits(x, bf16)
        })
        .collect()
}

/// `x` rounded to a bf16 or f16 element's bits.
pub fn element_bits(x: f32, bf16: bool) -> u16 {
    if bf16 {
        bf16::from_f32(x).to_bits()
    } else {
        f16::from_f32(x).to_bits()
    }
}

/// The value of a bf16 or f16 element's bits.
pub fn element_value(bits: u16, bf16: bool) -> f32 {
    if bf16 {
        bf16::from_bits(bits).to_f32()
    } else {
        f16::from_bits(bits).to_f32()
    }
}

/// `values` as little-endian bytes, for upload.
pub fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|v| to_le(*v)).collect()
}
