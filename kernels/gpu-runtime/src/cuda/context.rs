//! Which CUDA context a caller's stream belongs to, and making it current while we work in it.
//!
//! hipDNN hands the plugin a bare stream (`SetStream`); modules and launches must live in that
//! stream's context, which may be the device's primary context (what the CUDA runtime and HIP on
//! NVIDIA use) or a context the application created. Contexts are identified by `cuCtxGetId`, not
//! by handle value, because a destroyed context's handle can be reused by a new one, and a module
//! cached for the old one would then be invalid.

use std::sync::OnceLock;

use cudarc::driver::sys::{self as cu, CUcontext, CUstream};

use super::error::{DriverCall, GpuError};
use super::runtime;

/// The context a stream runs in.
#[derive(Debug, Clone, Copy)]
pub struct StreamContext {
    /// Driver handle.
    pub handle: CUcontext,
    /// Unique for the life of the process (`cuCtxGetId`).
    pub id: u64,
    /// Ordinal of the context's device.
    pub device: i32,
}

/// Finds the context of `stream`. For the null stream this is the calling thread's current
/// context, or, when the thread has none, the primary context of the first usable device: the
/// one the CUDA runtime would create on first use.
///
/// # Safety
/// `stream` must be null or a live stream (hipDNN's `SetStream` contract: the caller keeps it
/// valid while the plugin uses it).
pub unsafe fn context_of_stream(stream: CUstream) -> Result<StreamContext, GpuError> {
    let runtime = runtime::probe()?;
    let mut handle: CUcontext = std::ptr::null_mut();
    if stream.is_null() {
        // SAFETY: out-parameter call; the probe has initialised the driver.
        unsafe { cu::cuCtxGetCurrent(&mut handle) }
            .result()
            .call("cuCtxGetCurrent")?;
        if handle.is_null() {
            handle = default_primary_context(runtime.devices[0].ordinal)?;
        }
    } else {
        // SAFETY: a non-null `stream` is live (this function's contract).
        unsafe { cu::cuStreamGetCtx(stream, &mut handle) }
            .result()
            .call("cuStreamGetCtx")?;
    }
    let mut id = 0;
    // SAFETY: `handle` is a live context obtained just above.
    unsafe { cu::cuCtxGetId(handle, &mut id) }
        .result()
        .call("cuCtxGetId")?;
    let guard = CurrentContext::push(handle)?;
    let mut device = 0;
    // SAFETY: out-parameter call with `handle` current.
    unsafe { cu::cuCtxGetDevice(&mut device) }
        .result()
        .call("cuCtxGetDevice")?;
    drop(guard);
    Ok(StreamContext { handle, id, device })
}

/// Retains device `ordinal`'s primary context once per process; it is never released, since the
/// plugin may launch into it until the process exits.
fn default_primary_context(ordinal: i32) -> Result<CUcontext, GpuError> {
    /// The handle as an integer so the static is `Sync`.
    static PRIMARY: OnceLock<Result<usize, GpuError>> = OnceLock::new();
    PRIMARY
        .get_or_init(|| {
            let mut device = 0;
            // SAFETY: out-parameter call; `ordinal` comes from the probe.
            unsafe { cu::cuDeviceGet(&mut device, ordinal) }
                .result()
                .call("cuDeviceGet")?;
            let mut ctx: CUcontext = std::ptr::null_mut();
            // SAFETY: out-parameter call on a valid device.
            unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, device) }
                .result()
                .call("cuDevicePrimaryCtxRetain")?;
            Ok(ctx as usize)
        })
        .clone()
        .map(|addr| addr as CUcontext)
}

/// Makes a context current on this thread for the guard's lifetime, restoring the previous one.
pub struct CurrentContext(());

impl StreamContext {
    /// Makes this context current on the calling thread until the guard drops.
    pub fn make_current(&self) -> Result<CurrentContext, GpuError> {
        CurrentContext::push(self.handle)
    }
}

impl CurrentContext {
    pub(crate) fn push(ctx: CUcontext) -> Result<Self, GpuError> {
        // SAFETY: `ctx` is a live context; the matching pop happens in `drop`.
        unsafe { cu::cuCtxPushCurrent_v2(ctx) }
            .result()
            .call("cuCtxPushCurrent")?;
        Ok(Self(()))
    }
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: pops exactly the context this guard pushed. A failure cannot be reported from
        // `drop`; it would mean the context was destroyed under us, and the next driver call
        // reports that.
        let _ = unsafe { cu::cuCtxPopCurrent_v2(&mut popped) };
    }
}
