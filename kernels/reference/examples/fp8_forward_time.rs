//! Wall time of the FP8 forward reference on one realistic shape, printed (not a timed test: the
//! number depends on the machine). Arguments: `[sequences] [tokens] [heads] [head_dim]`,
//! default 4 sequences of 1024 tokens, 8 heads, head dim 128, E4M3 in and out with every scale.
//!
//!     cargo run --release -p ragged-reference --example fp8_forward_time -- 4 1024 8 128

use std::time::Instant;

use ragged_core::{Fp8Format, MaskBand};
use ragged_reference::{
    Fp8Output, Fp8Scales, Fp8SdpaProblem, SoftmaxQuantization, sdpa_forward_fp8,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|e| panic!("argument {a:?} is not a count: {e}"))
        })
        .collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (sequences, tokens, heads, dim) = (arg(0, 4), arg(1, 1024), arg(2, 8), arg(3, 128));
    let format = Fp8Format::E4M3;
    let lens = vec![tokens; sequences];
    let problem = Fp8SdpaProblem {
        input: format,
        output: Fp8Output::Fp8 {
            format,
            scale_o: 64.0,
        },
        heads_q: heads,
        heads_kv: heads,
        d_qk: dim,
        d_v: dim,
        seq_lens_q: &lens,
        seq_lens_kv: &lens,
        attn_scale: 1.0 / (dim as f32).sqrt(),
        mask: MaskBand::none(),
        scales: Fp8Scales {
            descale_q: 0.5,
            descale_k: 0.5,
            descale_v: 0.25,
            softmax: Some(SoftmaxQuantization {
                scale_s: 448.0,
                descale_s: 1.0 / 448.0,
            }),
        },
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let elements = sequences * tokens * heads * dim;
    let mut codes = || -> Vec<u8> {
        (0..elements)
            .map(|_| format.encode(rng.random_range(-4.0..4.0)))
            .collect()
    };
    let (q, k, v) = (codes(), codes(), codes());
    let start = Instant::now();
    let out = sdpa_forward_fp8(&problem, &q, &k, &v).unwrap_or_else(|e| panic!("{e}"));
    let seconds = start.elapsed().as_secs_f64();
    let flops = 4.0 * (sequences * heads * tokens * tokens * dim) as f64;
    println!(
        "{sequences} x {tokens} tokens, H {heads}, D {dim}, {} thread(s): {seconds:.2} s \
         ({:.2} GFLOP/s); amax_s {}, amax_o {}",
        ragged_reference::parallel::configured_threads(),
        flops / seconds / 1e9,
        out.amax_s,
        out.amax_o
    );
}
