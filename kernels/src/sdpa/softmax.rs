//! Vectorisable pieces of the online softmax: row maximum and `exp2` with running sums.
//!
//! libm's `expf` is a scalar call per score and would cost as much as the score's whole dot
//! product at D = 64; these loops are written branch-free over fixed 8-wide chunks so LLVM turns
//! them into SIMD code even for the baseline x86-64 target.

/// `2^x` for `x ≤ 0` (or NaN, which propagates), accurate to a few f32 ulps; results below
/// `2^-126` flush to 0, which includes `x = −∞`.
#[inline(always)]
pub(crate) fn exp2_nonpositive(x: f32) -> f32 {
    // Round to nearest through the 1.5·2²³ trick: adding it leaves n in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    // Taylor coefficients of 2^r = e^(r·ln 2) up to r⁷; |r| ≤ 1/2 keeps the tail below 1e-8.
    const C: [f32; 8] = [
        1.0,
        std::f32::consts::LN_2,
        0.240_226_5,
        0.055_504_11,
        0.009_618_129,
        0.001_333_355_8,
        0.000_154_035_3,
        0.000_015_252_734,
    ];
    let underflow = x < -126.0;
    let clamped = if underflow { -126.0 } else { x };
    let shifted = clamped + ROUNDER;
    let n = shifted - ROUNDER;
    let r = clamped - n;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let p = C[7];
    let p = p * r + C[6];
    let p = p * r + C[5];
    let p = p * r + C[4];
    let p = p * r + C[3];
    let p = p * r + C[2];
    let p = p * r + C[1];
    let p = p * r + C[0];
    if underflow { 0.0 } else { p * two_to_n }
}

/// Largest element of `row` (−∞ for an empty or all −∞ row; NaN entries are skipped here and
/// surface later through `exp2`).
#[inline]
pub(crate) fn row_max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = if x > *lane { x } else { *lane };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &x in lanes.iter().chain(chunks.remainder()) {
        max = if x > max { x } else { max };
    }
    max
}

/// Replaces each `x` by `2^(x − shift)` and returns their sum (`shift` ≥ every finite `x`).
#[inline]
pub(crate) fn exp2_shifted_sum(row: &mut [f32], shift: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = row.chunks_exact_mut(8);
    for chunk in &mut chunks {
        for (lane, x) in lanes.iter_mut().zip(chunk.iter_mut()) {
            let e = exp2_nonpositive(*x - shift);
            *x = e;
            *lane += e;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        let e = exp2_nonpositive(*x - shift);
        *x = e;
        sum += e;
    }
    sum
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

    #[test]
    fn row_max_and_shifted_sum_over_ragged_lengths() {
        let row: Vec<f32> = (0..19).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        assert_eq!(row_max(&row), 5.0);
        assert_eq!(row_max(&[]), f32::NEG_INFINITY);
        let mut shifted = row.clone();
        let sum = exp2_shifted_sum(&mut shifted, 5.0);
        let expected: f64 = row.iter().map(|&x| 2f64.powf(f64::from(x) - 5.0)).sum();
        assert!((f64::from(sum) - expected).abs() < 1e-5 * expected);
        assert!((f64::from(shifted[0]) - 2f64.powi(-10)).abs() < 1e-9);
    }
}
