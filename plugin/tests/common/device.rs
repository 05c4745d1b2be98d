//! Helpers of the CUDA device tests (forward and backward): the engine's id, skip lines, element
//! bits, little-endian buffers and one execute through the C ABI on device buffers.

use std::ptr::null_mut;

use half::{bf16, f16};
use ragged_gpu_runtime::cuda::memory::DeviceAllocation;
use ragged_schema::EngineConfig;
use ragged_schema::wire::encode_engine_config;

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

/// Plans `graph` for engine `engine` on the default stream and executes it once over `pack`
/// with a fresh device workspace of the size the plugin asks for (at least `workspace_floor`
/// bytes allocated); `read` runs after the execute, before the execution context is destroyed.
/// Returns the execute's status, its last-error text (empty on success) and what `read` gave.
///
/// # Safety
/// Every pointer in `pack` must be live memory holding the tensor `graph` gives its uid (device
/// memory, or a host scalar for a pass-by-value tensor) until this returns.
pub unsafe fn execute_on_device<R>(
    engine: i64,
    graph: &[u8],
    pack: &[super::DeviceBuffer],
    workspace_floor: usize,
    read: impl FnOnce() -> R,
) -> (super::Status, String, R) {
    use super::*;
    let p = plugin();
    let config = encode_engine_config(&EngineConfig::new(engine));
    let handle = OwnedHandle::new();
    let (gd, cd) = (ConstData::of(graph), ConstData::of(&config));
    let mut workspace_size = usize::MAX;
    let mut context: Context = null_mut();
    // SAFETY: valid handles and out-pointers; the pack's buffers are live (this function's
    // contract) and the workspace outlives the execute and `read`, whose downloads synchronize
    // the (default) stream.
    unsafe {
        assert_eq!((p.SetStream)(handle.0, null_mut()), SUCCESS);
        let status = (p.GetWorkspaceSize)(handle.0, &cd, &gd, &mut workspace_size);
        assert_eq!(status, SUCCESS, "{}", last_error());
        let status = (p.CreateExecutionContext)(handle.0, &cd, &gd, &mut context);
        assert_eq!(status, SUCCESS, "{}", last_error());
        let workspace =
            DeviceAllocation::new(workspace_size.max(workspace_floor)).expect("workspace");
        let ws_ptr = if workspace_size == 0 {
            null_mut()
        } else {
            workspace.address() as *mut _
        };
        let status =
            (p.ExecuteOpGraph)(handle.0, context, ws_ptr, pack.as_ptr(), pack.len() as u32);
        let error = if status == SUCCESS {
            String::new()
        } else {
            last_error()
        };
        let out = read();
        assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        (status, error, out)
    }
}
