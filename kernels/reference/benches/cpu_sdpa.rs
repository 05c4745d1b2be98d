//! GFLOP/s of the CPU reference SDPA forward or backward on a ragged self-attention batch.
//!
//! `cargo bench -p ragged-reference --bench cpu_sdpa -- --lens 64,1024 --heads 8 --dim 64 [--causal]
//! [--backward]` prints one `ours ...` line; `bench/cpu/torch_sdpa_cpu.py` takes the same
//! arguments, and `bench/cpu/run.sh` runs both and prints the ratio. FLOPs count only admitted
//! (query, key) pairs: 4·D per pair (Q·Kᵀ and P·V, a multiply and an add each) per head for the
//! forward, and 2.5 times that for the backward (the usual convention: the five products
//! Q·Kᵀ, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K), whatever the implementation recomputes. The backward
//! times `sdpa_backward` alone, from the O and LSE of one forward run before timing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use ragged_core::tensor::packed_strides;
use ragged_core::{
    BSHD_SEQ_AXIS, DataType, DenseTensor, FloatElement, MaskBand, RaggedTensor, Tensor,
    TensorMutExt,
};
use ragged_reference::{
    BackwardInputs, BackwardOutputs, SdpaBackwardParams, SdpaParams, sdpa_backward, sdpa_forward,
};

struct Args {
    lens: Vec<usize>,
    heads: usize,
    dim: usize,
    causal: bool,
    backward: bool,
    dtype: String,
    min_time: Duration,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        lens: vec![64, 192, 320, 448, 576, 704, 832, 1024],
        heads: 8,
        dim: 64,
        causal: false,
        backward: false,
        dtype: "f32".to_owned(),
        min_time: Duration::from_secs(2),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--lens" => {
                args.lens = value()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--lens {s}: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--heads" => args.heads = value()?.parse().map_err(|e| format!("--heads: {e}"))?,
            "--dim" => args.dim = value()?.parse().map_err(|e| format!("--dim: {e}"))?,
            "--dtype" => args.dtype = value()?,
            "--min-time" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--min-time: {e}"))?;
                args.min_time = Duration::from_secs_f64(secs);
            }
            "--causal" => args.causal = true,
            "--backward" => args.backward = true,
            // cargo bench appends --bench to every bench binary's arguments.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn admitted_pairs(len: usize, causal: bool) -> usize {
    if causal {
        len * (len + 1) / 2
    } else {
        len * len
    }
}

/// `[B + 1, 1, 1, 1]` element offsets of a packed ragged tensor with `width` elements per token.
fn offsets(lens: &[usize], width: usize) -> Result<Arc<dyn Tensor>, String> {
    let mut offsets = vec![0i32];
    for &len in lens {
        let next = i64::from(*offsets.last().unwrap_or(&0)) + (len * width) as i64;
        offsets.push(i32::try_from(next).map_err(|_| "offsets overflow int32".to_owned())?);
    }
    let dims = vec![lens.len() as i64 + 1, 1, 1, 1];
    let aux = DenseTensor::from_vec(offsets, dims.clone(), packed_strides(&dims))
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(aux))
}

/// A packed ragged `[B, S_max, H, width]` tensor of random values.
fn ragged<T: FloatElement>(
    lens: &[usize],
    heads: usize,
    width: usize,
    seed: u64,
) -> Result<RaggedTensor<T>, String> {
    let s_max = lens.iter().copied().max().unwrap_or(0);
    let dims = vec![lens.len() as i64, s_max as i64, heads as i64, width as i64];
    let mut t = RaggedTensor::<T>::new(
        dims.clone(),
        packed_strides(&dims),
        BSHD_SEQ_AXIS,
        offsets(lens, heads * width)?,
        1,
        None,
    )
    .map_err(|e| e.to_string())?;
    t.fill_random(seed);
    Ok(t)
}

/// CPU seconds this process has used (all threads, user + system), from `/proc/self/stat` in
/// USER_HZ = 100 ticks; `None` where that file does not exist.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Timing of one operation.
struct Timing {
    /// Best wall time of one call.
    best: f64,
    /// Mean CPU time of one call over the timed calls (all threads): on a loaded machine the
    /// wall time measures the load, the CPU time of a one-thread run measures the work.
    cpu: Option<f64>,
}

/// Times `run` over at least three calls and `min_time`, after one warm-up call.
fn time_it(
    min_time: Duration,
    mut run: impl FnMut() -> Result<(), String>,
) -> Result<Timing, String> {
    run()?;
    let mut best = f64::INFINITY;
    let (mut calls, start, cpu0) = (0, Instant::now(), process_cpu_seconds());
    while calls < 3 || start.elapsed() < min_time {
        let t0 = Instant::now();
        run()?;
        best = best.min(t0.elapsed().as_secs_f64());
        calls += 1;
    }
    let cpu = cpu0
        .zip(process_cpu_seconds())
        .map(|(a, b)| (b - a) / f64::from(calls));
    Ok(Timing { best, cpu })
}

fn bench<T: FloatElement>(args: &Args) -> Result<(f64, Timing), String> {
    let (h, d) = (args.heads, args.dim);
    let lens = &args.lens;
    let (q, k, v) = (
        ragged::<T>(lens, h, d, 1)?,
        ragged::<T>(lens, h, d, 2)?,
        ragged::<T>(lens, h, d, 3)?,
    );
    let mut o = ragged::<T>(lens, h, d, 4)?;
    let band = if args.causal {
        MaskBand::causal_top_left()
    } else {
        MaskBand::none()
    };
    let scale = 1.0 / (d as f32).sqrt();
    let forward_flops: f64 = lens
        .iter()
        .map(|&l| (4 * admitted_pairs(l, args.causal) * d * h) as f64)
        .sum();
    let params = SdpaParams { scale, band };
    if !args.backward {
        let timing = time_it(args.min_time, || {
            sdpa_forward(&q, &k, &v, &mut o, None, None, None, &params).map_err(|e| e.to_string())
        })?;
        return Ok((forward_flops, timing));
    }
    let mut lse = ragged::<f32>(lens, h, 1, 5)?;
    sdpa_forward(&q, &k, &v, &mut o, Some(&mut lse), None, None, &params)
        .map_err(|e| e.to_string())?;
    let d_o = ragged::<T>(lens, h, d, 6)?;
    let (mut dq, mut dk, mut dv) = (
        ragged::<T>(lens, h, d, 7)?,
        ragged::<T>(lens, h, d, 8)?,
        ragged::<T>(lens, h, d, 9)?,
    );
    let inputs = BackwardInputs {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        d_o: &d_o,
        lse: &lse,
        seq_len_q: None,
        seq_len_kv: None,
    };
    let params = SdpaBackwardParams {
        scale,
        band,
        ..SdpaBackwardParams::default()
    };
    let timing = time_it(args.min_time, || {
        let outputs = BackwardOutputs {
            dq: &mut dq,
            dk: &mut dk,
            dv: &mut dv,
        };
        sdpa_backward(&inputs, outputs, &params).map_err(|e| e.to_string())
    })?;
    Ok((2.5 * forward_flops, timing))
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("cpu_sdpa: {message}");
            std::process::exit(2);
        }
    };
    let dtype = match args.dtype.as_str() {
        "f16" => DataType::F16,
        "bf16" => DataType::BF16,
        _ => DataType::F32,
    };
    let result = match args.dtype.as_str() {
        "f32" => bench::<f32>(&args),
        "f16" => bench::<f16>(&args),
        "bf16" => bench::<bf16>(&args),
        other => Err(format!("unknown --dtype {other}")),
    };
    match result {
        Ok((flops, Timing { best, cpu })) => println!(
            "ours {} lens={} heads={} dim={} causal={} dtype={} gflop={:.3} best_ms={:.3} gflops={:.1} cpu_gflops={:.1} threads={} isa={}",
            if args.backward { "backward" } else { "forward" },
            args.lens
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            args.heads,
            args.dim,
            args.causal,
            args.dtype,
            flops / 1e9,
            best * 1e3,
            flops / best / 1e9,
            cpu.map_or(0.0, |cpu| flops / cpu / 1e9),
            ragged_reference::parallel::current_threads(),
            ragged_reference::isa::isa_for(dtype)
        ),
        Err(message) => {
            eprintln!("cpu_sdpa: {message}");
            std::process::exit(1);
        }
    }
}
