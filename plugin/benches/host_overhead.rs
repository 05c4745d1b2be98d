//! Host overhead of the plugin's C entry points, in µs, measured through the built `.so` as
//! hipDNN calls it: `GetApplicableEngineIds` and `CreateExecutionContext` on a ragged SDPA graph,
//! and `ExecuteOpGraph` dispatch with the engine's own work (the CPU reference kernel, timed on
//! its own over the same buffers) reported apart and subtracted.
//!
//! Run: `cargo bench -p ragged-plugin --bench host_overhead`. Each figure is the median over
//! rounds of the mean of a batch of calls, so timer cost is amortised and outliers are ignored.
//! The kernel runs on the calling thread (as the host engine runs a problem this small) and its
//! batches alternate with the execute batches, and dispatch is the median of the per-round
//! differences, so machine load (shared cores) does not masquerade as dispatch cost.
//!
//! Heap allocations per call are counted too ([`allocations`]): unlike the timings, machine load
//! cannot move them. `HOST_OVERHEAD_CALLS=N` skips the timings and makes N calls of each entry
//! point through the `.so`, for a profiler (`valgrind --tool=callgrind`, `perf record`).

#[path = "host_overhead/allocations.rs"]
mod allocations;
#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::ptr::null_mut;
use std::time::Instant;

use common::problem::{self, B, D, HKV, HQ, Inputs, PACKING_A, SKV, SQ};
use common::*;
use ragged_core::{DenseTensor, ShallowRaggedTensor, ShallowRaggedTensorMut, ShallowTensorMut};
use ragged_reference::{SdpaParams, sdpa_forward};

#[global_allocator]
static ALLOCATOR: allocations::Counting = allocations::Counting;

const ROUNDS: usize = 101;
const BATCH: usize = 200;

/// Median over rounds of the per-call mean of `BATCH` calls, in µs.
fn median_us(mut call: impl FnMut()) -> f64 {
    for _ in 0..BATCH {
        call();
    }
    let mut means: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                call();
            }
            start.elapsed().as_secs_f64() * 1e6 / BATCH as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[ROUNDS / 2]
}

fn main() {
    // SAFETY: first statement of a single-threaded main, before any worker thread or the plugin reads the
    // environment.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", "1") };
    let p = plugin();
    let handle = OwnedHandle::new();
    let graph = problem::graph_bytes();
    let config = problem::config_bytes();
    let (g, c) = (ConstData::of(&graph), ConstData::of(&config));
    let inputs = Inputs::new(PACKING_A);
    let (mut o, mut lse) = inputs.outputs();
    // Built once, as a caller reusing its buffers would: the pack's own Vec is not dispatch.
    let pack = inputs.pack(&mut o, &mut lse);
    let mut kernel = KernelOnly::new(&inputs);
    if let Some(calls) = std::env::var("HOST_OVERHEAD_CALLS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        profile_only(calls, &handle, &g, &c, &pack, &mut kernel);
        return;
    }

    let applicable = median_us(|| {
        let mut ids = [0i64; 4];
        let mut n = 0u32;
        // SAFETY: valid pointers and capacity.
        let status =
            unsafe { (p.GetApplicableEngineIds)(handle.0, &g, ids.as_mut_ptr(), 4, &mut n) };
        assert_eq!((status, n), (SUCCESS, 1));
        black_box(ids);
    });

    let create = median_us(|| {
        let mut context: Context = null_mut();
        // SAFETY: valid pointers; the context is destroyed right away.
        unsafe {
            assert_eq!(
                (p.CreateExecutionContext)(handle.0, &c, &g, &mut context),
                SUCCESS
            );
            assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        }
    });
    let destroy_only = {
        let contexts: Vec<Context> = (0..BATCH * 20)
            .map(|_| {
                let mut context: Context = null_mut();
                // SAFETY: valid pointers.
                let status = unsafe { (p.CreateExecutionContext)(handle.0, &c, &g, &mut context) };
                assert_eq!(status, SUCCESS);
                context
            })
            .collect();
        let start = Instant::now();
        for context in &contexts {
            // SAFETY: each context is live and destroyed once.
            let status = unsafe { (p.DestroyExecutionContext)(handle.0, *context) };
            assert_eq!(status, SUCCESS);
        }
        start.elapsed().as_secs_f64() * 1e6 / contexts.len() as f64
    };

    let mut context: Context = null_mut();
    // SAFETY: valid pointers.
    let status = unsafe { (p.CreateExecutionContext)(handle.0, &c, &g, &mut context) };
    assert_eq!(status, SUCCESS);
    let mut run_execute = || {
        // SAFETY: live handle and context; `pack` points at live host buffers.
        let status = unsafe { execute(handle.0, context, &pack) };
        assert_eq!(status, SUCCESS);
    };
    let (execute, kernel_us, dispatch) = interleaved_us(&mut run_execute, &mut || kernel.run());

    println!("ragged SDPA graph: B={B}, H_q={HQ}, H_kv={HKV}, D={D}, S_q<={SQ}, S_kv<={SKV}, fp32");
    println!("GetApplicableEngineIds            {applicable:8.2} µs  (target <= 10)");
    println!(
        "CreateExecutionContext            {:8.2} µs  (target <= 50; create+destroy {create:.2}, destroy {destroy_only:.2})",
        create - destroy_only
    );
    println!("ExecuteOpGraph, total             {execute:8.2} µs");
    println!("  engine work (sdpa_forward only) {kernel_us:8.2} µs");
    println!("  dispatch (median of per-round total - engine) {dispatch:.2} µs  (target <= 3)");

    let linked_pack: Vec<_> = pack
        .iter()
        .map(|b| hipdnn_provider_ragged_sdpa::abi::types::DeviceBuffer {
            uid: b.uid,
            ptr: b.ptr,
        })
        .collect();
    let counts = allocations::through_linked_exports(&graph, &config, &linked_pack);
    let kernel_allocations = allocations::per_call(1000, || kernel.run());
    println!("heap allocations per call (load-independent):");
    println!(
        "  GetApplicableEngineIds          {:8.1}",
        counts.applicable
    );
    println!(
        "  CreateExecutionContext+Destroy  {:8.1}",
        counts.create_destroy
    );
    println!(
        "  ExecuteOpGraph                  {:8.1}  (engine work alone {kernel_allocations:.1}, \
         dispatch {:.1})",
        counts.execute,
        counts.execute - kernel_allocations
    );
}

/// `calls` calls of each entry point and of the kernel alone, untimed, for a profiler.
fn profile_only(
    calls: usize,
    handle: &OwnedHandle,
    g: &ConstData,
    c: &ConstData,
    pack: &[DeviceBuffer],
    kernel: &mut KernelOnly,
) {
    let p = plugin();
    for _ in 0..calls {
        let (mut ids, mut n) = ([0i64; 4], 0u32);
        // SAFETY: valid pointers and capacity.
        let status =
            unsafe { (p.GetApplicableEngineIds)(handle.0, g, ids.as_mut_ptr(), 4, &mut n) };
        assert_eq!((status, n), (SUCCESS, 1));
    }
    let mut context: Context = null_mut();
    for _ in 0..calls {
        // SAFETY: valid pointers; each context is destroyed right away.
        unsafe {
            assert_eq!(
                (p.CreateExecutionContext)(handle.0, c, g, &mut context),
                SUCCESS
            );
            assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        }
    }
    // SAFETY: valid pointers.
    let status = unsafe { (p.CreateExecutionContext)(handle.0, c, g, &mut context) };
    assert_eq!(status, SUCCESS);
    for _ in 0..calls {
        // SAFETY: live handle and context; `pack` points at live host buffers.
        assert_eq!(unsafe { execute(handle.0, context, pack) }, SUCCESS);
        kernel.run();
    }
    // SAFETY: a live context, destroyed once.
    let status = unsafe { (p.DestroyExecutionContext)(handle.0, context) };
    assert_eq!(status, SUCCESS);
}

/// Medians of two alternating batched measurements and of their per-round difference.
fn interleaved_us(a: &mut dyn FnMut(), b: &mut dyn FnMut()) -> (f64, f64, f64) {
    let batch = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..BATCH {
            f();
        }
        start.elapsed().as_secs_f64() * 1e6 / BATCH as f64
    };
    batch(a);
    batch(b);
    let mut rounds: Vec<(f64, f64)> = (0..ROUNDS).map(|_| (batch(a), batch(b))).collect();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut diffs: Vec<f64> = rounds.iter().map(|(x, y)| x - y).collect();
    let mut xs: Vec<f64> = rounds.iter().map(|r| r.0).collect();
    let mut ys: Vec<f64> = rounds.drain(..).map(|r| r.1).collect();
    (median(&mut xs), median(&mut ys), median(&mut diffs))
}

/// The CPU reference over the same buffers with views built once: the engine's own work.
struct KernelOnly {
    q: ShallowRaggedTensor<'static>,
    k: ShallowRaggedTensor<'static>,
    v: ShallowRaggedTensor<'static>,
    o: ShallowRaggedTensorMut<'static>,
    lse: ShallowTensorMut<'static>,
    seq_q: DenseTensor<i64>,
    seq_kv: DenseTensor<i64>,
    params: SdpaParams,
}

impl KernelOnly {
    fn new(inputs: &Inputs) -> KernelOnly {
        // Leaked so the views can be 'static; a benchmark process builds this once.
        let leak_f32 = |v: Vec<f32>| -> &'static mut [f32] { Box::leak(v.into_boxed_slice()) };
        let (o, lse) = inputs.outputs();
        let (q_aux, kv_aux) = inputs.offsets_tensors();
        let (seq_q, seq_kv) = inputs.seq_len_tensors();
        KernelOnly {
            q: problem::ragged_input(leak_f32(inputs.q.clone()), SQ, HQ, &q_aux),
            k: problem::ragged_input(leak_f32(inputs.k.clone()), SKV, HKV, &kv_aux),
            v: problem::ragged_input(leak_f32(inputs.v.clone()), SKV, HKV, &kv_aux),
            o: problem::o_output(leak_f32(o), q_aux),
            lse: problem::lse_output(leak_f32(lse)),
            seq_q,
            seq_kv,
            params: inputs.params(),
        }
    }

    /// On the calling thread, as the host engine runs a problem this small (`INLINE_WORK` in
    /// plugin/src/engines/host): the engine's own work, without a pool hand-off.
    fn run(&mut self) {
        ragged_reference::sdpa::on_calling_thread(|| self.forward());
    }

    fn forward(&mut self) {
        sdpa_forward(
            &self.q,
            &self.k,
            &self.v,
            &mut self.o,
            Some(&mut self.lse),
            Some(&self.seq_q),
            Some(&self.seq_kv),
            &self.params,
        )
        .expect("reference runs");
    }
}
