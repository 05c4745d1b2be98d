//! Vectorisable pieces of the softmax: `exp2`, and the backward's probabilities.
//!
//! libm's `expf` is a scalar call per score and would cost as much as the score's whole dot
//! product at D = 64; `exp2_nonpositive` is branch-free so LLVM turns the loops that call it into
//! SIMD code even for the baseline x86-64 target (the forward's loops live in `tile.rs`). On x86-64 CPUs with AVX2 and FMA
//! (detected once at run time) the same loops are compiled a second time for those features:
//! the baseline build is limited to 4-wide SSE2, which made the softmax a third of the forward's
//! time at D = 64 on this project's AVX2 machine.

/// Runs `$body` compiled for AVX2 + FMA when the CPU has them, else as the baseline build.
macro_rules! with_avx2 {
    ($name:ident($($arg:ident: $ty:ty),*) $body:block) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma")]
            fn $name($($arg: $ty),*) $body
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: the features this function is compiled for were detected just above.
                return unsafe { $name($($arg),*) };
            }
        }
        #[allow(unreachable_code)]
        {
            fn $name($($arg: $ty),*) $body
            $name($($arg),*)
        }
    }};
}

/// `2^x` for `x ≤ 0` (or NaN, which propagates), accurate to a few f32 ulps; results below
/// `2^-126` flush to 0, which includes `x = −∞`.
#[inline(always)]
pub(crate) fn exp2_nonpositive(x: f32) -> f32 {
    // Round to nearest through the 1.5·2²³ trick: adding it leaves n in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    // Relative-error minimax fit of 2^r on [-1/2, 1/2] with the constant pinned to 1 (so that
    // exact powers of two stay exact): 1.1e-7 worst case with these f32 coefficients, within two
    // ulps, which degree 5 reaches at two fewer multiply-adds per score than a Taylor series.
    #[allow(clippy::approx_constant)] // C[1] is a fitted coefficient, not ln 2
    const C: [f32; 6] = [
        1.0,
        0.693_147,
        0.240_222_42,
        0.055_507_336,
        0.009_671_495,
        0.001_326_465_6,
    ];
    let underflow = x < -126.0;
    let clamped = if underflow { -126.0 } else { x };
    let shifted = clamped + ROUNDER;
    let n = shifted - ROUNDER;
    let r = clamped - n;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let p = C[5];
    let p = p * r + C[4];
    let p = p * r + C[3];
    let p = p * r + C[2];
    let p = p * r + C[1];
    let p = p * r + C[0];
    if underflow { 0.0 } else { p * two_to_n }
}

/// The backward's probabilities and score gradients for a row-major tile of `keys` columns:
/// on row r's admitted keys `admitted[r]`, `p ← 2^(p − lse2[r])` and `ds ← p·(ds − delta[r])`;
/// both exactly 0 elsewhere. `p` holds `scale·log2e·QKᵀ` and `ds` holds `dO·Vᵀ` on entry.
pub(crate) fn probabilities_rows(
    p: &mut [f32],
    ds: &mut [f32],
    keys: usize,
    admitted: &[std::ops::Range<usize>],
    lse2: &[f32],
    delta: &[f32],
) {
    with_avx2!(rows(
        p: &mut [f32],
        ds: &mut [f32],
        keys: usize,
        admitted: &[std::ops::Range<usize>],
        lse2: &[f32],
        delta: &[f32]
    ) {
        let rows = p.chunks_exact_mut(keys).zip(ds.chunks_exact_mut(keys));
        for (r, (p, ds)) in rows.enumerate() {
            let (lo, hi) = (admitted[r].start, admitted[r].end);
            let (l, d) = (lse2[r], delta[r]);
            p[..lo].fill(0.0);
            ds[..lo].fill(0.0);
            p[hi..].fill(0.0);
            ds[hi..].fill(0.0);
            for (x, g) in p[lo..hi].iter_mut().zip(&mut ds[lo..hi]) {
                let prob = exp2_nonpositive(*x - l);
                *x = prob;
                *g = prob * (*g - d);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp2_matches_the_library_to_a_few_ulps() {
        let mut worst: f64 = 0.0;
        for i in 0..=200_000 {
            let x = -(i as f32) * 1.2e-3; // covers [-240, 0]
            let ours = f64::from(exp2_nonpositive(x));
            let exact = 2f64.powf(f64::from(x));
            if exact >= f64::from(f32::MIN_POSITIVE) {
                worst = worst.max(((ours - exact) / exact).abs());
            } else {
                assert!(ours <= f64::from(f32::MIN_POSITIVE), "x = {x}: {ours}");
            }
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
    }

    #[test]
    fn exp2_edge_values() {
        assert_eq!(exp2_nonpositive(0.0), 1.0);
        assert_eq!(exp2_nonpositive(-1.0), 0.5);
        assert_eq!(exp2_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(exp2_nonpositive(f32::NAN).is_nan());
    }
}
