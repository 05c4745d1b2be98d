//! Device check for `kernels/gpu-runtime/src/cuda and kernels/cuda-fmha/src/forward`: compiles `kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu` through the
//! NVRTC cache, runs the ragged FMHA forward through `FmhaEngine` exactly as the plugin will (a
//! caller-owned stream, raw device pointers, a workspace), and compares every written output with
//! a naive f64 attention loop written here, and every unwritten position with its sentinel.
//!
//! Usage: `gpu-check [--probe-only] [--bench]`. Exit status 0 = all checks passed, 1 = a check
//! failed, 2 = CUDA unavailable (the reason is printed).

use std::process::ExitCode;
use std::time::Instant;

use cudarc::driver::result as cur;
use cudarc::driver::sys::{CUdeviceptr, CUstream};
use half::{bf16, f16};
use ragged_core::problem::{
    IndexInput, IndexWidth, Multiplier, Offsets, Operand, RaggedSdpaProblem, ScalePlan,
};
use ragged_core::{DataType, DiagonalAlignment, MaskBand};
use ragged_engine_cuda::forward::{ExecuteMode, FmhaBuffers, FmhaEngine, FmhaPlan, plan};
use ragged_gpu_runtime::cuda::nvrtc_cache::{ImageOrigin, NvrtcCache};
use ragged_gpu_runtime::cuda::{GpuError, runtime};

/// Sentinels for positions the kernels must not write (ragged-sdpa.md §8: quiet NaN with a fixed
/// payload, compared bit for bit).
const O_SENTINEL_BF16: u16 = 0x7fc1;
const O_SENTINEL_F16: u16 = 0x7e01;
const LSE_SENTINEL: u32 = 0x7fc0_0123;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let runtime = match runtime::probe() {
        Ok(r) => r,
        Err(e) => {
            println!("probe: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "probe: driver {}, NVRTC {}.{}, devices {:?}",
        runtime::format_cuda_version(runtime.driver_version),
        runtime.nvrtc_version.0,
        runtime.nvrtc_version.1,
        runtime.devices
    );
    if args.iter().any(|a| a == "--probe-only") {
        return ExitCode::SUCCESS;
    }
    match run(args.iter().any(|a| a == "--bench")) {
        Ok(0) => {
            println!("ALL CHECKS PASSED");
            ExitCode::SUCCESS
        }
        Ok(failures) => {
            println!("{failures} CHECK(S) FAILED");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("error: {e}");
            ExitCode::from(1)
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn run(bench: bool) -> Res<usize> {
    let ctx = cudarc::driver::CudaContext::new(0)?;
    let stream = cur::stream::create(cur::stream::StreamKind::NonBlocking)?;
    let runtime = runtime::probe()?;
    let target = &runtime.devices[0].target;

    // Cache behaviour: cold compile, then a fresh cache on the same directory (a new process),
    // then the same cache again.
    let dir = std::env::temp_dir().join(format!("gpu-check-nvrtc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache: &'static NvrtcCache = Box::leak(Box::new(NvrtcCache::new(Some(dir.clone()))));
    let t = Instant::now();
    let fmha = ragged_engine_cuda::forward::FMHA_SOURCE;
    let cold = cache.get_or_compile(&fmha, target, &[], runtime.nvrtc_version)?;
    let cold_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let disk = NvrtcCache::new(Some(dir.clone())).get_or_compile(
        &fmha,
        target,
        &[],
        runtime.nvrtc_version,
    )?;
    let disk_s = t.elapsed().as_secs_f64();
    let warm = cache.get_or_compile(&fmha, target, &[], runtime.nvrtc_version)?;
    println!(
        "nvrtc: {} -> {} bytes {:?} in {cold_s:.2} s; fresh cache: {:?} in {:.1} ms; again: {:?}",
        target.arch(),
        cold.bytes.len(),
        cold.origin,
        disk.origin,
        disk_s * 1e3,
        warm.origin
    );
    let mut failures = 0;
    let mut expect = |ok: bool, what: &str| {
        if !ok {
            failures += 1;
            println!("FAIL: {what}");
        }
    };
    expect(
        matches!(cold.origin, ImageOrigin::Compiled { disk_note: None }),
        "cold compile wrote the disk entry",
    );
    expect(disk.origin == ImageOrigin::Disk, "fresh cache hit the disk");
    expect(warm.origin == ImageOrigin::Memory, "same cache hit memory");
    expect(
        *disk.bytes == *cold.bytes,
        "disk image equals compiled image",
    );

    let engine: &'static FmhaEngine = Box::leak(Box::new(FmhaEngine::with_cache(cache)));
    // SAFETY: `stream` was created above and lives until the end of `run`.
    let prepared = unsafe { engine.prepare(stream) }?;
    println!("prepare: {prepared:?}");

    for case in cases() {
        let result = run_case(engine, stream, &case)?;
        println!(
            "case {:<34} max|dO| {:.2e} (tol {:.0e}) max|dLSE| {:.2e} rows {} empty-rows {} sentinels {} -> {}",
            case.name,
            result.max_err_o,
            case.tolerance().0,
            result.max_err_lse,
            result.rows,
            result.empty_rows,
            result.sentinels,
            if result.failures.is_empty() {
                "ok"
            } else {
                "FAIL"
            }
        );
        for f in &result.failures {
            expect(false, &format!("{}: {f}", case.name));
        }
    }

    failures += validation_checks(engine, stream)?;
    if bench {
        benchmark(engine, stream)?;
    }
    // SAFETY: the stream is idle after the synchronising reads above and is not used again.
    unsafe { cur::stream::destroy(stream) }?;
    drop(ctx);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(failures)
}

#[derive(Clone, Copy, PartialEq)]
enum LseKind {
    None,
    Dense,
    Ragged,
}

struct Case {
    name: &'static str,
    dtype: DataType,
    d: usize,
    hq: usize,
    hkv: usize,
    /// Rows each batch occupies in the buffers.
    extents_q: Vec<usize>,
    extents_kv: Vec<usize>,
    /// Logical lengths (configuration 2) when present.
    seq_len_q: Option<Vec<i64>>,
    seq_len_kv: Option<Vec<i64>>,
    mask: MaskBand,
    lse: LseKind,
    /// Offsets in token units (multiplier H·D) and int32, else element units and int64.
    token_units: bool,
}

impl Case {
    fn tolerance(&self) -> (f64, f64) {
        match self.dtype {
            DataType::BF16 => (1e-2, 1e-2),
            _ => (2e-3, 2e-3),
        }
    }
}

fn cases() -> Vec<Case> {
    let causal_br = MaskBand::causal_bottom_right();
    vec![
        Case {
            name: "bf16 d128 gqa8:2 ragged-lse empty",
            dtype: DataType::BF16,
            d: 128,
            hq: 8,
            hkv: 2,
            // Batch 1 is empty; batch 4 has queries but no keys (O = 0, LSE = -inf).
            extents_q: vec![37, 0, 130, 5, 3],
            extents_kv: vec![50, 0, 200, 1, 0],
            seq_len_q: None,
            seq_len_kv: None,
            mask: MaskBand::none(),
            lse: LseKind::Ragged,
            token_units: false,
        },
        Case {
            name: "f16 d64 causal-br dense-lse",
            dtype: DataType::F16,
            d: 64,
            hq: 4,
            hkv: 4,
            // Batch 2: Lkv < Lq, so the top rows admit no key under bottom-right causal.
            extents_q: vec![64, 1, 200, 0],
            extents_kv: vec![64, 300, 17, 5],
            seq_len_q: None,
            seq_len_kv: None,
            mask: causal_br,
            lse: LseKind::Dense,
            token_units: true,
        },
        Case {
            name: "bf16 d64 window tl seq_lens padding",
            dtype: DataType::BF16,
            d: 64,
            hq: 6,
            hkv: 3,
            extents_q: vec![40, 70, 9],
            extents_kv: vec![90, 20, 9],
            seq_len_q: Some(vec![33, 70, 0]),
            seq_len_kv: Some(vec![80, 0, 9]),
            mask: MaskBand::window(Some(16), Some(4), DiagonalAlignment::TopLeft),
            lse: LseKind::Dense,
            token_units: true,
        },
        Case {
            name: "f16 d128 causal-tl no-lse",
            dtype: DataType::F16,
            d: 128,
            hq: 2,
            hkv: 1,
            extents_q: vec![300, 129, 128],
            extents_kv: vec![260, 129, 1],
            seq_len_q: None,
            seq_len_kv: None,
            mask: MaskBand::causal_top_left(),
            lse: LseKind::None,
            token_units: false,
        },
    ]
}

/// Deterministic inputs: splitmix64 mapped to [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Rounds to the element type and returns (bits, value as f64).
fn quantize(x: f32, dtype: DataType) -> (u16, f64) {
    match dtype {
        DataType::BF16 => {
            let v = bf16::from_f32(x);
            (v.to_bits(), f64::from(v.to_f32()))
        }
        _ => {
            let v = f16::from_f32(x);
            (v.to_bits(), f64::from(v.to_f32()))
        }
    }
}

fn to_f64(bits: u16, dtype: DataType) -> f64 {
    match dtype {
        DataType::BF16 => f64::from(bf16::from_bits(bits).to_f32()),
        _ => f64::from(f16::from_bits(bits).to_f32()),
    }
}

/// A device allocation freed on drop.
struct DeviceBuffer {
    ptr: CUdeviceptr,
}

impl DeviceBuffer {
    fn from_slice<T: Copy>(data: &[T]) -> Res<Self> {
        let bytes = std::mem::size_of_val(data).max(16);
        // SAFETY: plain allocation in the current (primary) context.
        let ptr = unsafe { cur::malloc_sync(bytes) }?;
        if !data.is_empty() {
            // SAFETY: `ptr` holds at least `size_of_val(data)` bytes.
            unsafe { cur::memcpy_htod_sync(ptr, data) }?;
        }
        Ok(Self { ptr })
    }

    fn zeroed(bytes: usize) -> Res<Self> {
        Self::from_slice(&vec![0u8; bytes])
    }

    fn read<T: Copy + Default>(&self, len: usize) -> Res<Vec<T>> {
        let mut out = vec![T::default(); len];
        if len > 0 {
            // SAFETY: the buffer was created with at least `len` elements of `T`.
            unsafe { cur::memcpy_dtoh_sync(&mut out, self.ptr) }?;
        }
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_sync`, freed once; all work using it has been synchronised.
        let _ = unsafe { cur::free_sync(self.ptr) };
    }
}

struct CaseResult {
    max_err_o: f64,
    max_err_lse: f64,
    rows: usize,
    empty_rows: usize,
    sentinels: usize,
    failures: Vec<String>,
}

/// Host copies of one problem: quantised inputs and the graph description.
struct Prepared {
    problem: RaggedSdpaProblem,
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
    qv: Vec<f64>,
    kv: Vec<f64>,
    vv: Vec<f64>,
    tok_q: Vec<usize>,
    tok_kv: Vec<usize>,
    q_off: Vec<u8>,
    kv_off: Vec<u8>,
    lse_off: Vec<i32>,
    lq: Vec<usize>,
    lkv: Vec<usize>,
    s_q: usize,
}

/// `reference`: keep f64 copies of the inputs for [`compare`] (benchmarks skip them).
fn prepare(case: &Case, seed: u64, reference: bool) -> Prepared {
    let b = case.extents_q.len();
    let (d, hq, hkv) = (case.d, case.hq, case.hkv);
    let s_q = case.extents_q.iter().copied().max().unwrap_or(0).max(1);
    let s_kv = case.extents_kv.iter().copied().max().unwrap_or(0).max(1);
    let starts = |ext: &[usize]| {
        let mut v = vec![0];
        for e in ext {
            v.push(v.last().copied().unwrap_or(0) + e);
        }
        v
    };
    let tok_q = starts(&case.extents_q);
    let tok_kv = starts(&case.extents_kv);
    let mut rng = Rng(seed);
    let mut fill = |n: usize| -> (Vec<u16>, Vec<f64>) {
        if reference {
            (0..n).map(|_| quantize(rng.next(), case.dtype)).unzip()
        } else {
            (
                (0..n).map(|_| quantize(rng.next(), case.dtype).0).collect(),
                Vec::new(),
            )
        }
    };
    let (q, qv) = fill(tok_q[b] * hq * d);
    let (k, kv) = fill(tok_kv[b] * hkv * d);
    let (v, vv) = fill(tok_kv[b] * hkv * d);
    let encode = |toks: &[usize], row: usize| -> (Vec<u8>, IndexWidth, i64) {
        if case.token_units {
            let v: Vec<u8> = toks
                .iter()
                .flat_map(|&t| (t as i32).to_le_bytes())
                .collect();
            (v, IndexWidth::I32, row as i64)
        } else {
            let v: Vec<u8> = toks
                .iter()
                .flat_map(|&t| ((t * row) as i64).to_le_bytes())
                .collect();
            (v, IndexWidth::I64, 1)
        }
    };
    let (q_off, q_dtype, q_mult) = encode(&tok_q, hq * d);
    let (kv_off, kv_dtype, kv_mult) = encode(&tok_kv, hkv * d);
    // Packed `[B, S, H, D]` (sequence axis 1): strides {S·H·D, H·D, D, 1}.
    let ragged = |role, uid, dtype, [b, s, h, d]: [i64; 4], off_uid, width, mult| Operand {
        role,
        uid,
        dtype,
        dims: [b, s, h, d],
        strides: [s * h * d, h * d, d, 1],
        alignment: 16,
        ragged: Some(Offsets {
            uid: off_uid,
            width,
            multiplier: Multiplier::new(mult).expect("a multiplier of at least 1"),
        }),
    };
    let (bi, sq, skv, hqi, hkvi, di) = (
        b as i64,
        s_q as i64,
        s_kv as i64,
        hq as i64,
        hkv as i64,
        d as i64,
    );
    let q_role = ("q_tensor_uid", "o_tensor_uid");
    let qd = ragged(
        q_role.0,
        1,
        case.dtype,
        [bi, sq, hqi, di],
        100,
        q_dtype,
        q_mult,
    );
    let kd = ragged(
        "k_tensor_uid",
        2,
        case.dtype,
        [bi, skv, hkvi, di],
        101,
        kv_dtype,
        kv_mult,
    );
    let vd = ragged(
        "v_tensor_uid",
        3,
        case.dtype,
        [bi, skv, hkvi, di],
        101,
        kv_dtype,
        kv_mult,
    );
    let od = ragged(
        q_role.1,
        4,
        case.dtype,
        [bi, sq, hqi, di],
        100,
        q_dtype,
        q_mult,
    );
    let lse = match case.lse {
        LseKind::None => None,
        // Dense `[B, H, S, 1]`, head-major.
        LseKind::Dense => Some(Operand {
            role: "stats_tensor_uid",
            uid: 5,
            dtype: DataType::F32,
            dims: [bi, hqi, sq, 1],
            strides: [hqi * sq, sq, 1, 1],
            alignment: 16,
            ragged: None,
        }),
        LseKind::Ragged => Some(ragged(
            "stats_tensor_uid",
            5,
            DataType::F32,
            [bi, sq, hqi, 1],
            102,
            IndexWidth::I32,
            hqi,
        )),
    };
    let lse_off = tok_q.iter().map(|&t| t as i32).collect();
    let seq = |s: &Option<Vec<i64>>, role, uid| {
        s.as_ref().map(|_| IndexInput {
            role,
            uid,
            width: IndexWidth::I64,
        })
    };
    let lengths = |s: &Option<Vec<i64>>, ext: &[usize]| -> Vec<usize> {
        match s {
            Some(v) => v
                .iter()
                .zip(ext)
                .map(|(&l, &e)| (l.max(0) as usize).min(e))
                .collect(),
            None => ext.to_vec(),
        }
    };
    Prepared {
        problem: RaggedSdpaProblem {
            q: qd,
            k: kd,
            v: vd,
            o: od,
            stats: lse,
            seq_len_q: seq(&case.seq_len_q, "seq_len_q_tensor_uid", 6),
            seq_len_kv: seq(&case.seq_len_kv, "seq_len_kv_tensor_uid", 7),
            scale: ScalePlan::Fixed(1.0 / (d as f32).sqrt()),
            mask: case.mask,
        },
        q,
        k,
        v,
        qv,
        kv,
        vv,
        lq: lengths(&case.seq_len_q, &case.extents_q),
        lkv: lengths(&case.seq_len_kv, &case.extents_kv),
        tok_q,
        tok_kv,
        q_off,
        kv_off,
        lse_off,
        s_q,
    }
}

struct Device {
    q: DeviceBuffer,
    k: DeviceBuffer,
    v: DeviceBuffer,
    o: DeviceBuffer,
    lse: DeviceBuffer,
    q_off: DeviceBuffer,
    kv_off: DeviceBuffer,
    lse_off: DeviceBuffer,
    seq_q: DeviceBuffer,
    seq_kv: DeviceBuffer,
    ws: DeviceBuffer,
    ws_bytes: u64,
    o_len: usize,
    lse_len: usize,
}

impl Device {
    fn upload(case: &Case, p: &Prepared, plan: &FmhaPlan) -> Res<Self> {
        let b = case.extents_q.len();
        let o_len = p.tok_q[b] * case.hq * case.d;
        let o_sentinel = match case.dtype {
            DataType::BF16 => O_SENTINEL_BF16,
            _ => O_SENTINEL_F16,
        };
        let lse_len = match case.lse {
            LseKind::Dense => b * case.hq * p.s_q,
            _ => p.tok_q[b] * case.hq,
        };
        let seq = |s: &Option<Vec<i64>>| DeviceBuffer::from_slice(s.as_deref().unwrap_or(&[]));
        Ok(Self {
            q: DeviceBuffer::from_slice(&p.q)?,
            k: DeviceBuffer::from_slice(&p.k)?,
            v: DeviceBuffer::from_slice(&p.v)?,
            o: DeviceBuffer::from_slice(&vec![o_sentinel; o_len])?,
            lse: DeviceBuffer::from_slice(&vec![LSE_SENTINEL; lse_len])?,
            q_off: DeviceBuffer::from_slice(&p.q_off)?,
            kv_off: DeviceBuffer::from_slice(&p.kv_off)?,
            lse_off: DeviceBuffer::from_slice(&p.lse_off)?,
            seq_q: seq(&case.seq_len_q)?,
            seq_kv: seq(&case.seq_len_kv)?,
            ws: DeviceBuffer::zeroed(plan.workspace_bytes() as usize)?,
            ws_bytes: plan.workspace_bytes(),
            o_len,
            lse_len,
        })
    }

    fn buffers(&self, case: &Case) -> FmhaBuffers {
        FmhaBuffers {
            q: self.q.ptr,
            k: self.k.ptr,
            v: self.v.ptr,
            o: self.o.ptr,
            lse: if case.lse == LseKind::None {
                0
            } else {
                self.lse.ptr
            },
            q_offsets: self.q_off.ptr,
            kv_offsets: self.kv_off.ptr,
            lse_offsets: self.lse_off.ptr,
            seq_len_q: self.seq_q.ptr,
            seq_len_kv: self.seq_kv.ptr,
            workspace: self.ws.ptr,
            workspace_bytes: self.ws_bytes,
        }
    }
}

fn sync(stream: CUstream) -> Res<()> {
    // SAFETY: `stream` is live for the whole run.
    unsafe { cur::stream::synchronize(stream) }?;
    Ok(())
}

fn run_case(engine: &FmhaEngine, stream: CUstream, case: &Case) -> Res<CaseResult> {
    let p = prepare(case, 0x5eed ^ case.name.len() as u64, true);
    let plan = plan(&p.problem)?;
    let dev = Device::upload(case, &p, &plan)?;
    // SAFETY: every buffer was allocated above with the sizes the plan's tensors address.
    unsafe { engine.execute(&plan, stream, &dev.buffers(case), ExecuteMode::Enqueue) }?;
    sync(stream)?;
    let o: Vec<u16> = dev.o.read(dev.o_len)?;
    let lse: Vec<u32> = dev.lse.read(dev.lse_len)?;
    Ok(compare(case, &p, &o, &lse))
}

/// Naive attention in f64 over the quantised inputs, and the comparison with the device.
fn compare(case: &Case, p: &Prepared, o: &[u16], lse: &[u32]) -> CaseResult {
    let (d, hq, hkv) = (case.d, case.hq, case.hkv);
    let (atol, rtol) = case.tolerance();
    let scale = f64::from(p.problem.scale.plan_value());
    let mut r = CaseResult {
        max_err_o: 0.0,
        max_err_lse: 0.0,
        rows: 0,
        empty_rows: 0,
        sentinels: 0,
        failures: Vec::new(),
    };
    let o_sentinel = match case.dtype {
        DataType::BF16 => O_SENTINEL_BF16,
        _ => O_SENTINEL_F16,
    };
    let fail = |r: &mut CaseResult, msg: String| {
        if r.failures.len() < 8 {
            r.failures.push(msg);
        }
    };
    let lse_index = |b: usize, i: usize, h: usize| match case.lse {
        LseKind::Dense => Some((b * hq + h) * p.s_q + i),
        LseKind::Ragged => Some((p.tok_q[b] + i) * hq + h),
        LseKind::None => None,
    };
    for b in 0..case.extents_q.len() {
        let (lq, lkv) = (p.lq[b], p.lkv[b]);
        let off = match case.mask.alignment {
            DiagonalAlignment::TopLeft => 0,
            DiagonalAlignment::BottomRight => lkv as i64 - lq as i64,
        };
        for h in 0..hq {
            let g = h / (hq / hkv);
            let rows = if case.lse == LseKind::Dense {
                p.s_q
            } else {
                case.extents_q[b]
            };
            for i in 0..rows.max(case.extents_q[b]) {
                let in_extent = i < case.extents_q[b];
                let o_base = (p.tok_q[b] + i) * hq * d + h * d;
                if i >= lq {
                    // Padding rows: never written.
                    if in_extent {
                        for x in 0..d {
                            r.sentinels += 1;
                            if o[o_base + x] != o_sentinel {
                                fail(&mut r, format!("O written at padding b{b} i{i} h{h}"));
                            }
                        }
                    }
                    if let Some(li) = lse_index(b, i, h)
                        && (case.lse == LseKind::Dense || in_extent)
                    {
                        r.sentinels += 1;
                        if lse[li] != LSE_SENTINEL {
                            fail(&mut r, format!("LSE written at padding b{b} i{i} h{h}"));
                        }
                    }
                    continue;
                }
                r.rows += 1;
                let admitted = |j: usize| {
                    let (i, j) = (i as i64, j as i64);
                    let above = case.mask.right.is_some_and(|r| r >= 0 && j > i + off + r);
                    let below = case.mask.left.is_some_and(|l| l >= 0 && j < i + off - l);
                    !(above || below)
                };
                let qrow = &p.qv[o_base..o_base + d];
                let scores: Vec<(usize, f64)> = (0..lkv)
                    .filter(|&j| admitted(j))
                    .map(|j| {
                        let kb = (p.tok_kv[b] + j) * hkv * d + g * d;
                        let dot: f64 = qrow.iter().zip(&p.kv[kb..kb + d]).map(|(a, c)| a * c).sum();
                        (j, dot * scale)
                    })
                    .collect();
                let (ref_o, ref_lse) = if scores.is_empty() {
                    r.empty_rows += 1;
                    (vec![0.0; d], f64::NEG_INFINITY)
                } else {
                    let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                    let mut acc = vec![0.0; d];
                    for &(j, s) in &scores {
                        let w = (s - m).exp() / sum;
                        let vb = (p.tok_kv[b] + j) * hkv * d + g * d;
                        for (a, x) in acc.iter_mut().zip(&p.vv[vb..vb + d]) {
                            *a += w * x;
                        }
                    }
                    (acc, m + sum.ln())
                };
                for x in 0..d {
                    let got = to_f64(o[o_base + x], case.dtype);
                    let err = (got - ref_o[x]).abs();
                    if got.is_nan() || err > atol + rtol * ref_o[x].abs() {
                        fail(
                            &mut r,
                            format!("O b{b} i{i} h{h} d{x}: {got} vs {}", ref_o[x]),
                        );
                    }
                    if scores.is_empty() && o[o_base + x] & 0x7fff != 0 {
                        fail(
                            &mut r,
                            format!("O b{b} i{i} h{h}: {got} should be exactly 0"),
                        );
                    }
                    r.max_err_o = r.max_err_o.max(err);
                }
                if let Some(li) = lse_index(b, i, h) {
                    let got = f64::from(f32::from_bits(lse[li]));
                    if ref_lse == f64::NEG_INFINITY {
                        if got != f64::NEG_INFINITY {
                            fail(&mut r, format!("LSE b{b} i{i} h{h}: {got}, want -inf"));
                        }
                    } else {
                        let err = (got - ref_lse).abs();
                        r.max_err_lse = r.max_err_lse.max(err);
                        if got.is_nan() || err > 1e-3 + 1e-3 * ref_lse.abs() {
                            fail(&mut r, format!("LSE b{b} i{i} h{h}: {got} vs {ref_lse}"));
                        }
                    }
                }
            }
        }
    }
    r
}

/// Validating mode: good offsets pass; broken ones fail with the tensor named and nothing
/// written; the same broken offsets in enqueue mode do not error.
fn validation_checks(engine: &FmhaEngine, stream: CUstream) -> Res<usize> {
    let case = &cases()[2];
    let p = prepare(case, 7, false);
    let plan = plan(&p.problem)?;
    let mut failures = 0;
    let mut report = |ok: bool, what: String| {
        println!("validate: {what} -> {}", if ok { "ok" } else { "FAIL" });
        failures += usize::from(!ok);
    };

    let dev = Device::upload(case, &p, &plan)?;
    // SAFETY: buffers sized for the plan (see run_case).
    let good = unsafe { engine.execute(&plan, stream, &dev.buffers(case), ExecuteMode::Validate) };
    report(good.is_ok(), format!("valid offsets and lengths: {good:?}"));

    // Q offsets decreasing (int32, token units): [0, 40, 30, ...].
    let mut bad = p.q_off.clone();
    bad[8..12].copy_from_slice(&30i32.to_le_bytes());
    let dev = Device::upload(case, &p, &plan)?;
    let bad_off = DeviceBuffer::from_slice(&bad)?;
    let mut buffers = dev.buffers(case);
    buffers.q_offsets = bad_off.ptr;
    // SAFETY: as above; the offsets buffer has B + 1 int32 entries.
    let err = unsafe { engine.execute(&plan, stream, &buffers, ExecuteMode::Validate) };
    let text = err
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    println!("validate: decreasing Q offsets: {text}");
    report(
        matches!(err, Err(GpuError::InvalidOffsets { .. }))
            && text.contains("uid 100")
            && text.contains("decrease"),
        "decreasing Q offsets are reported with the aux uid".to_owned(),
    );
    let o: Vec<u16> = dev.o.read(dev.o_len)?;
    report(
        o.iter().all(|&x| x == O_SENTINEL_BF16),
        "nothing written after a failed validation".to_owned(),
    );
    // SAFETY: as above.
    let enqueued = unsafe { engine.execute(&plan, stream, &buffers, ExecuteMode::Enqueue) };
    sync(stream)?;
    report(
        enqueued.is_ok(),
        format!("enqueue mode does not read the flag back: {enqueued:?}"),
    );

    // seq_len_kv larger than the extent: clamped, and reported in validating mode.
    let dev = Device::upload(case, &p, &plan)?;
    let long = DeviceBuffer::from_slice(&[80i64, 21, 9])?;
    let mut buffers = dev.buffers(case);
    buffers.seq_len_kv = long.ptr;
    // SAFETY: as above; three int64 lengths.
    let err = unsafe { engine.execute(&plan, stream, &buffers, ExecuteMode::Validate) };
    let text = err
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    println!("validate: seq_len_kv beyond extent: {text}");
    report(
        text.contains("seq_len_kv (uid 7)"),
        "an over-long seq_len_kv is reported with its uid".to_owned(),
    );
    Ok(failures)
}

/// Throughput on a serving-like ragged batch, bf16, D = 128.
fn benchmark(engine: &FmhaEngine, stream: CUstream) -> Res<()> {
    let mut rng = Rng(42);
    for (label, hq, hkv, mask) in [
        ("non-causal", 16, 16, MaskBand::none()),
        ("causal-br", 16, 16, MaskBand::causal_bottom_right()),
        ("non-causal gqa 32:8", 32, 8, MaskBand::none()),
    ] {
        let lens: Vec<usize> = (0..16)
            .map(|_| 512 + ((rng.next() + 1.0) * 0.5 * 3584.0) as usize)
            .collect();
        let case = Case {
            name: "bench",
            dtype: DataType::BF16,
            d: 128,
            hq,
            hkv,
            extents_q: lens.clone(),
            extents_kv: lens.clone(),
            seq_len_q: None,
            seq_len_kv: None,
            mask,
            lse: LseKind::Ragged,
            token_units: true,
        };
        let p = prepare(&case, 9, false);
        let plan = plan(&p.problem)?;
        let dev = Device::upload(&case, &p, &plan)?;
        let buffers = dev.buffers(&case);
        let pairs: f64 = lens
            .iter()
            .map(|&l| {
                let l = l as f64;
                if mask.right == Some(0) {
                    l * (l + 1.0) / 2.0
                } else {
                    l * l
                }
            })
            .sum();
        let flops = 4.0 * pairs * hq as f64 * 128.0;
        for _ in 0..3 {
            // SAFETY: buffers sized for the plan.
            unsafe { engine.execute(&plan, stream, &buffers, ExecuteMode::Enqueue) }?;
        }
        sync(stream)?;
        let iters = 20;
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: as above.
            unsafe { engine.execute(&plan, stream, &buffers, ExecuteMode::Enqueue) }?;
        }
        sync(stream)?;
        let secs = t.elapsed().as_secs_f64() / f64::from(iters);
        println!(
            "bench {label:<20} B=16 tokens={} Hq={hq} Hkv={hkv} D=128 bf16: {:.3} ms, {:.1} TFLOP/s",
            lens.iter().sum::<usize>(),
            secs * 1e3,
            flops / secs / 1e12
        );
    }
    Ok(())
}
