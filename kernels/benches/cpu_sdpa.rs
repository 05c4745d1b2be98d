//! GFLOP/s of the CPU reference SDPA forward on a ragged self-attention batch.
//!
//! `cargo bench -p ragged-kernels --bench cpu_sdpa -- --lens 64,1024 --heads 8 --dim 64 [--causal]`
//! prints one `ours ...` line; `bench/cpu/torch_sdpa_cpu.py` takes the same arguments, and
//! `bench/cpu/run.sh` runs both and prints the ratio. FLOPs count only admitted (query, key) pairs:
//! 4·D per pair (Q·Kᵀ and P·V, a multiply and an add each) per head.

use std::sync::Arc;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use ragged_kernels::tensor::packed_strides;
use ragged_kernels::{
    BSHD_SEQ_AXIS, DenseTensor, FloatElement, MaskBand, RaggedTensor, SdpaParams, Tensor,
    TensorMutExt, sdpa_forward,
};

struct Args {
    lens: Vec<usize>,
    heads: usize,
    dim: usize,
    causal: bool,
    dtype: String,
    min_time: Duration,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        lens: vec![64, 192, 320, 448, 576, 704, 832, 1024],
        heads: 8,
        dim: 64,
        causal: false,
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

fn bench<T: FloatElement>(args: &Args) -> Result<(f64, f64), String> {
    let (h, d) = (args.heads, args.dim);
    let batch = args.lens.len();
    let s_max = args.lens.iter().copied().max().unwrap_or(0);
    let mut offsets = vec![0i32];
    for &len in &args.lens {
        let next = i64::from(*offsets.last().unwrap_or(&0)) + (len * h * d) as i64;
        offsets.push(i32::try_from(next).map_err(|_| "offsets overflow int32".to_owned())?);
    }
    let aux_dims = vec![batch as i64 + 1, 1, 1, 1];
    let aux: Arc<dyn Tensor> = Arc::new(
        DenseTensor::from_vec(offsets, aux_dims.clone(), packed_strides(&aux_dims))
            .map_err(|e| e.to_string())?,
    );
    let dims = vec![batch as i64, s_max as i64, h as i64, d as i64];
    let strides = packed_strides(&dims);
    let make = |seed| -> Result<RaggedTensor<T>, String> {
        let mut t = RaggedTensor::<T>::new(
            dims.clone(),
            strides.clone(),
            BSHD_SEQ_AXIS,
            Arc::clone(&aux),
            1,
            None,
        )
        .map_err(|e| e.to_string())?;
        t.fill_random(seed);
        Ok(t)
    };
    let (q, k, v) = (make(1)?, make(2)?, make(3)?);
    let mut o = make(4)?;
    let params = SdpaParams {
        scale: 1.0 / (d as f32).sqrt(),
        band: if args.causal {
            MaskBand::causal_top_left()
        } else {
            MaskBand::none()
        },
    };
    let mut run =
        || sdpa_forward(&q, &k, &v, &mut o, None, None, None, &params).map_err(|e| e.to_string());
    run()?;
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < args.min_time {
        let t0 = Instant::now();
        run()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let flops: f64 = args
        .lens
        .iter()
        .map(|&l| (4 * admitted_pairs(l, args.causal) * d * h) as f64)
        .sum();
    Ok((flops, times[0]))
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("cpu_sdpa: {message}");
            std::process::exit(2);
        }
    };
    let result = match args.dtype.as_str() {
        "f32" => bench::<f32>(&args),
        "f16" => bench::<f16>(&args),
        "bf16" => bench::<bf16>(&args),
        other => Err(format!("unknown --dtype {other}")),
    };
    match result {
        Ok((flops, best)) => println!(
            "ours lens={} heads={} dim={} causal={} dtype={} gflop={:.3} best_ms={:.3} gflops={:.1}",
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
            flops / best / 1e9
        ),
        Err(message) => {
            eprintln!("cpu_sdpa: {message}");
            std::process::exit(1);
        }
    }
}
