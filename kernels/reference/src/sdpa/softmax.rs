//! The softmax's `exp2`.
//!
//! libm's `expf` is a scalar call per score and would cost as much as the score's whole dot
//! product at D = 64; `exp2_nonpositive` is branch-free, so LLVM vectorises the forward's and
//! the backward's tile loops that call it (`sdpa::tile`, `sdpa_backward::passes`), which are
//! compiled for AVX2 + FMA at run time.

use crate::gemm::{MulAdd, Separate};

/// `2^x` for `x ≤ 0` (or NaN, which propagates), accurate to a few f32 ulps; results below
/// `2^-126` flush to 0, which includes `x = −∞`.
#[inline(always)]
pub(crate) fn exp2_nonpositive(x: f32) -> f32 {
    exp2_nonpositive_with::<Separate>(x)
}

/// Round to nearest through the 1.5·2²³ trick: adding it leaves n in the low mantissa bits.
pub(crate) const EXP2_ROUNDER: f32 = 12_582_912.0;

/// The polynomial of every `exp2_nonpositive` (here and the AVX2 / AVX-512 forms, which must give
/// the same n and p): a relative-error minimax fit of 2^r on [-1/2, 1/2] with the constant pinned
/// to 1 (so that exact powers of two stay exact), 1.1e-7 worst case with these f32 coefficients,
/// within two ulps, which degree 5 reaches at two fewer multiply-adds per score than a Taylor series.
#[allow(clippy::approx_constant)] // [1] is a fitted coefficient, not ln 2
pub(crate) const EXP2_COEFFS: [f32; 6] = [
    1.0,
    0.693_147,
    0.240_222_42,
    0.055_507_336,
    0.009_671_495,
    0.001_326_465_6,
];

/// [`exp2_nonpositive`] with the polynomial's multiply-adds computed as `F` says: fused in the
/// loops compiled for FMA, where LLVM does not fuse them on its own.
#[inline(always)]
pub(crate) fn exp2_nonpositive_with<F: MulAdd>(x: f32) -> f32 {
    // Below −126 the argument becomes −127: n = −127 makes the power-of-two bits 0, so the
    // result is an exact 0 without a select on the result (a select there made LLVM keep the
    // callers' running sums in memory behind masked stores). NaN fails the comparison and
    // propagates.
    let clamped = if x < -126.0 { -127.0 } else { x };
    let shifted = clamped + EXP2_ROUNDER;
    let n = shifted - EXP2_ROUNDER;
    let r = clamped - n;
    let n_bits = shifted.to_bits().wrapping_sub(EXP2_ROUNDER.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let p = EXP2_COEFFS[5];
    let p = F::mul_add(p, r, EXP2_COEFFS[4]);
    let p = F::mul_add(p, r, EXP2_COEFFS[3]);
    let p = F::mul_add(p, r, EXP2_COEFFS[2]);
    let p = F::mul_add(p, r, EXP2_COEFFS[1]);
    let p = F::mul_add(p, r, EXP2_COEFFS[0]);
    p * two_to_n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp2_matches_the_library_to_a_few_ulps() {
        let mut worst: f64 = 0.0;
        for i in 0..=400_001 {
            let x = -((i / 2) as f32) * 1.2e-3; // covers [-240, 0], both forms
            let ours = f64::from(if i % 2 == 0 {
                exp2_nonpositive(x)
            } else {
                exp2_nonpositive_with::<crate::gemm::Fused>(x)
            });
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
