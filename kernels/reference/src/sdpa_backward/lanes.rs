//! P and dS of one lane of 16 keys, and dS's transposed copy, in each build's registers: the
//! backward's element-wise steps between its products (`super::passes`).

use std::ops::Range;

use crate::gemm::{Blocking, Lane, MR, MulAdd, NR};
use crate::sdpa::softmax::exp2_nonpositive_with;

/// `P = 2^(S·scale·log2e − LSE·log2e)` into `p_lane` (which holds S) and `dS = P ∘ (dP − Δ)`
/// into `ds_lane` (which holds dP) for keys `first..first + MR` of one row, on the keys of
/// `admitted`, exactly 0 elsewhere; `(scale_log2, l, d)` = (scale·log2e, LSE·log2e, Δ).
#[inline(always)]
pub(super) fn p_and_ds<F: MulAdd, K: Blocking>(
    (p_lane, ds_lane): (&mut Lane, &mut Lane),
    admitted: &Range<usize>,
    first: usize,
    (scale_log2, l, d): (f32, f32, f32),
) {
    #[cfg(target_arch = "x86_64")]
    if K::WIDE {
        // SAFETY: the wide blocking is compiled and chosen only where `isa()` reported
        // AVX-512 F/BW/VL, AVX2 and FMA (`super::passes::run_item`).
        return unsafe { ds_lane_wide((p_lane, ds_lane), admitted, first, (scale_log2, l, d)) };
    }
    #[cfg(target_arch = "x86_64")]
    if K::SPLIT {
        // SAFETY: the split blocking is compiled and chosen only where `isa()` reported AVX2
        // and FMA (`super::passes::run_item`).
        return unsafe { ds_lane_avx2((p_lane, ds_lane), admitted, first, (scale_log2, l, d)) };
    }
    for (jj, (x, g)) in p_lane.0.iter_mut().zip(&mut ds_lane.0).enumerate() {
        let inside = admitted.start <= first + jj && first + jj < admitted.end;
        let prob = exp2_nonpositive_with::<F>(F::mul_add(*x, scale_log2, -l));
        let prob = if inside { prob } else { 0.0 };
        *g = if inside { prob * (*g - d) } else { 0.0 };
        *x = prob;
    }
}

/// Four lanes of dSᵀ (NR rows of up to MR keys) as NR rows per key: `quads[j][t] =
/// lanes[t][j]`.
#[inline(always)]
pub(super) fn transpose<K: Blocking>(lanes: &[Lane], quads: &mut [[f32; NR]]) {
    #[cfg(target_arch = "x86_64")]
    if let (true, Ok(quads)) = (K::WIDE, <&mut [[f32; NR]; MR]>::try_from(&mut *quads)) {
        let rows = std::array::from_fn(|t| &lanes[t].0);
        // SAFETY: the wide blocking is compiled and chosen only where `isa()` reported
        // AVX-512 F/BW/VL, AVX2 and FMA (`super::passes::run_item`).
        return unsafe { crate::avx512::transpose_4x16(rows, quads) };
    }
    #[cfg(target_arch = "x86_64")]
    if let (true, Ok(quads)) = (K::SPLIT, <&mut [[f32; NR]; MR]>::try_from(&mut *quads)) {
        let rows = std::array::from_fn(|t| &lanes[t].0);
        // SAFETY: the split blocking is compiled and chosen only where `isa()` reported AVX2
        // and FMA (`super::passes::run_item`).
        return unsafe { crate::avx2::transpose_4x16(rows, quads) };
    }
    for (jj, quad) in quads.iter_mut().enumerate() {
        *quad = std::array::from_fn(|t| lanes[t].0[jj]);
    }
}

/// [`p_and_ds`] on AVX-512 registers: the exponent with one fused multiply-add and
/// `crate::avx512::exp2_nonpositive` (the portable polynomial without fusion took twice the
/// instructions).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
fn ds_lane_wide(
    (p_lane, ds_lane): (&mut Lane, &mut Lane),
    admitted: &Range<usize>,
    first: usize,
    (scale_log2, l, d): (f32, f32, f32),
) {
    use std::arch::x86_64::*;

    use crate::avx512;

    let clip = |key: usize| key.clamp(first, first + MR) as i32;
    let inside = avx512::lanes_between(first as i32, clip(admitted.start), clip(admitted.end));
    let x = _mm512_fmadd_ps(
        avx512::load(&p_lane.0),
        _mm512_set1_ps(scale_log2),
        _mm512_set1_ps(-l),
    );
    let prob = _mm512_maskz_mov_ps(inside, avx512::exp2_nonpositive(x));
    let dp = _mm512_sub_ps(avx512::load(&ds_lane.0), _mm512_set1_ps(d));
    avx512::store(_mm512_maskz_mul_ps(inside, prob, dp), &mut ds_lane.0);
    avx512::store(prob, &mut p_lane.0);
}

/// [`ds_lane_wide`] on two AVX2 registers, with `crate::avx2::exp2_nonpositive` (the portable
/// polynomial's bits); marked for inlining, which LLVM left a call per lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ds_lane_avx2(
    (p_lane, ds_lane): (&mut Lane, &mut Lane),
    admitted: &Range<usize>,
    first: usize,
    (scale_log2, l, d): (f32, f32, f32),
) {
    use std::arch::x86_64::*;

    use crate::avx2;

    let clip = |key: usize| key.clamp(first, first + MR) as i32;
    let (lo, hi) = (clip(admitted.start), clip(admitted.end));
    let (p_halves, _) = p_lane.0.as_chunks_mut::<8>();
    let (ds_halves, _) = ds_lane.0.as_chunks_mut::<8>();
    for (h, (p, ds)) in p_halves.iter_mut().zip(ds_halves).enumerate() {
        let inside = avx2::lanes_between((first + 8 * h) as i32, lo, hi);
        let x = _mm256_fmadd_ps(
            avx2::load(p),
            _mm256_set1_ps(scale_log2),
            _mm256_set1_ps(-l),
        );
        let prob = _mm256_and_ps(inside, avx2::exp2_nonpositive(x));
        let dp = _mm256_sub_ps(avx2::load(ds), _mm256_set1_ps(d));
        avx2::store(_mm256_and_ps(inside, _mm256_mul_ps(prob, dp)), ds);
        avx2::store(prob, p);
    }
}
