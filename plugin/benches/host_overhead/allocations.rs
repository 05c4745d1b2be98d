//! Heap allocations per call: a figure machine load cannot move, unlike the timings.
//!
//! The plugin the timings load through `dlopen` allocates with its own copy of the standard
//! library, out of this binary's sight, so the counts come from the same exports linked into
//! this binary (same code, same arguments), where the counting allocator below sees every
//! allocation they make.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};

use hipdnn_provider_ragged_sdpa::abi::types::{
    ConstData, DeviceBuffer, ExecutionContextHandle, PluginHandle, Status,
};
use hipdnn_provider_ragged_sdpa::exports::engine as linked;

/// `System`, counting every allocation and reallocation (a `realloc` is a trip to the
/// allocator as costly as a fresh one).
pub struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` unchanged; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded caller contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded caller contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded caller contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded caller contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations per call of `call`, over `n` calls after one warm-up call (first-call caches,
/// such as the engine list, are not per-call cost).
pub fn per_call(n: u64, mut call: impl FnMut()) -> f64 {
    call();
    let before = CALLS.load(Ordering::Relaxed);
    for _ in 0..n {
        call();
    }
    (CALLS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

/// Allocations per call of GetApplicableEngineIds, CreateExecutionContext + Destroy and
/// ExecuteOpGraph through the linked exports, on the bench's graph and variant pack.
pub struct Counts {
    pub applicable: f64,
    pub create_destroy: f64,
    pub execute: f64,
}

pub fn through_linked_exports(graph: &[u8], config: &[u8], pack: &[DeviceBuffer]) -> Counts {
    const N: u64 = 1000;
    let of = |bytes: &[u8]| ConstData {
        ptr: bytes.as_ptr().cast(),
        size: bytes.len(),
    };
    let (g, c) = (of(graph), of(config));
    let mut handle: PluginHandle = null_mut();
    // SAFETY: valid out-pointer.
    let status = unsafe { linked::hipdnnEnginePluginCreate(&mut handle) };
    assert_eq!(status, Status::SUCCESS);
    let applicable = per_call(N, || {
        let (mut ids, mut n) = ([0i64; 4], 0u32);
        // SAFETY: valid pointers and capacity.
        let status = unsafe {
            linked::hipdnnEnginePluginGetApplicableEngineIds(
                handle,
                &g,
                ids.as_mut_ptr(),
                4,
                &mut n,
            )
        };
        assert_eq!((status, n), (Status::SUCCESS, 1));
    });
    let create = || {
        let mut context: ExecutionContextHandle = null_mut();
        // SAFETY: valid pointers.
        let status = unsafe {
            linked::hipdnnEnginePluginCreateExecutionContext(handle, &c, &g, &mut context)
        };
        assert_eq!(status, Status::SUCCESS);
        context
    };
    let create_destroy = per_call(N, || {
        let context = create();
        // SAFETY: a live context, destroyed once.
        let status = unsafe { linked::hipdnnEnginePluginDestroyExecutionContext(handle, context) };
        assert_eq!(status, Status::SUCCESS);
    });
    let context = create();
    let execute = per_call(N, || {
        // SAFETY: live handle and context; the pack's pointers are the bench's live buffers.
        let status = unsafe {
            linked::hipdnnEnginePluginExecuteOpGraph(
                handle,
                context,
                null_mut::<c_void>(),
                pack.as_ptr(),
                pack.len() as u32,
            )
        };
        assert_eq!(status, Status::SUCCESS);
    });
    // SAFETY: live objects, destroyed once, context first.
    unsafe {
        assert_eq!(
            linked::hipdnnEnginePluginDestroyExecutionContext(handle, context),
            Status::SUCCESS
        );
        assert_eq!(linked::hipdnnEnginePluginDestroy(handle), Status::SUCCESS);
    }
    Counts {
        applicable,
        create_destroy,
        execute,
    }
}
