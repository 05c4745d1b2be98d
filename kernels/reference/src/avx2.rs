//! Eight f32 lanes in one AVX2 register: the AVX2 build's forms of what `crate::avx512` does
//! with sixteen, for the loops LLVM does not vectorise well on its own.
//!
//! The arithmetic is `std::arch` intrinsics, safe to call inside functions compiled with the
//! same target features; only the memory moves need `unsafe`, and they take array references
//! or slices, so every call is in bounds by construction. Callers reach these functions from
//! their own `#[target_feature]` code, after `crate::isa` has reported AVX2 and FMA.

use std::arch::x86_64::*;

use ragged_core::dtype::FloatElement;

/// The 8 lanes of `x`.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn load(x: &[f32; 8]) -> __m256 {
    // SAFETY: `x` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// `x` into the 8 entries of `to`.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn store(x: __m256, to: &mut [f32; 8]) {
    // SAFETY: `to` is 32 writable bytes, borrowed exclusively; `storeu` needs no alignment.
    unsafe { _mm256_storeu_ps(to.as_mut_ptr(), x) }
}

/// `dst[i] = T::from_f32(src[i])` (as long as the shorter), the 64-byte-aligned runs stored
/// with non-temporal stores, as `crate::avx512::stream_row` does (two 32-byte stores a line).
/// The caller orders them with [`fence`].
#[target_feature(enable = "avx2,fma")]
pub(crate) fn stream_row<T: FloatElement>(dst: &mut [T], src: &[f32]) {
    crate::stream::convert_lines(dst, src, |to, from| {
        let (to, from) = (
            to.as_mut_ptr().cast::<__m256i>(),
            from.as_ptr().cast::<__m256i>(),
        );
        // SAFETY: `from` holds at least 64 readable bytes; `to` is 64 writable bytes borrowed
        // exclusively, on a 64-byte boundary (`convert_lines`), so both halves are 32-byte
        // aligned.
        unsafe {
            _mm256_stream_si256(to, _mm256_loadu_si256(from));
            _mm256_stream_si256(to.add(1), _mm256_loadu_si256(from.add(1)));
        }
    });
}

/// Orders the non-temporal stores of [`stream_row`] before every later store.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn fence() {
    _mm_sfence();
}

/// Four rows of 16 as sixteen columns of 4: `out[4·j + t] = rows[t][j]`, eight columns per
/// twelve shuffles (LLVM made the element-wise copy sixty-four loads and inserts).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn transpose_4x16(rows: [&[f32; 16]; 4], out: &mut [[f32; 4]; 16]) {
    let (lines, _) = out.as_flattened_mut().as_chunks_mut::<8>();
    for (half, lines) in lines.chunks_exact_mut(4).enumerate() {
        let [r0, r1, r2, r3] = rows.map(|row| load(&row.as_chunks::<8>().0[half]));
        // Within each 128-bit lane: t0 = (r0[0], r1[0], r0[1], r1[1]), t1 = (r0[2], r1[2], ...).
        let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
        let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
        // u_k holds columns k and k + 4, one per 128-bit lane.
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let outs = [
            _mm256_permute2f128_ps::<0x20>(u0, u1),
            _mm256_permute2f128_ps::<0x20>(u2, u3),
            _mm256_permute2f128_ps::<0x31>(u0, u1),
            _mm256_permute2f128_ps::<0x31>(u2, u3),
        ];
        for (line, x) in lines.iter_mut().zip(outs) {
            store(x, line);
        }
    }
}

/// All ones in the lanes `i` with `lo ≤ first + i < hi`: a key range as a mask over 8
/// consecutive keys.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn lanes_between(first: i32, lo: i32, hi: i32) -> __m256 {
    let key = _mm256_add_epi32(
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        _mm256_set1_epi32(first),
    );
    let below_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), key);
    let below_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), key);
    _mm256_castsi256_ps(_mm256_andnot_si256(below_lo, below_hi))
}

/// `2^x` per lane for `x ≤ 0` (NaN propagates): `crate::sdpa::softmax::exp2_nonpositive_with`
/// with fused multiply-adds, step for step, so the same bits; results below `2^-126` are 0.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn exp2_nonpositive(x: __m256) -> __m256 {
    use crate::sdpa::softmax::{EXP2_COEFFS as C, EXP2_ROUNDER as ROUNDER};
    let low = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-126.0));
    let clamped = _mm256_blendv_ps(x, _mm256_set1_ps(-127.0), low);
    let shifted = _mm256_add_ps(clamped, _mm256_set1_ps(ROUNDER));
    let n = _mm256_sub_ps(shifted, _mm256_set1_ps(ROUNDER));
    let r = _mm256_sub_ps(clamped, n);
    let n_bits = _mm256_sub_epi32(
        _mm256_castps_si256(shifted),
        _mm256_set1_epi32(ROUNDER.to_bits() as i32),
    );
    let two_to_n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        n_bits,
        _mm256_set1_epi32(127),
    )));
    let mut p = _mm256_set1_ps(C[5]);
    for c in [C[4], C[3], C[2], C[1], C[0]] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    _mm256_mul_ps(p, two_to_n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::Fused;
    use crate::sdpa::softmax::exp2_nonpositive_with;

    fn avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx2,fma")]
    fn exp2_lanes(x: [f32; 8]) -> [f32; 8] {
        let mut out = [0.0; 8];
        store(exp2_nonpositive(load(&x)), &mut out);
        out
    }

    #[test]
    fn exp2_lanes_have_the_portable_bits() {
        if !avx2() {
            println!("skipped: this CPU has no AVX2 and FMA");
            return;
        }
        let edges = [
            0.0,
            -1.0,
            f32::NEG_INFINITY,
            f32::NAN,
            -126.0,
            -126.5,
            -127.0,
            -1e30,
        ];
        let blocks =
            (0..30_000).map(|block| std::array::from_fn(|i| -((8 * block + i) as f32) * 1.1e-3));
        for x in std::iter::once(edges).chain(blocks) {
            // SAFETY: AVX2 and FMA were detected above.
            let got = unsafe { exp2_lanes(x) };
            for (&x, &ours) in x.iter().zip(&got) {
                let want = exp2_nonpositive_with::<Fused>(x);
                assert!(
                    ours.to_bits() == want.to_bits() || ours.is_nan() && want.is_nan(),
                    "{x}"
                );
            }
        }
    }

    #[test]
    fn streamed_rows_match_the_element_wise_conversion() {
        if !avx2() {
            println!("skipped: this CPU has no AVX2 and FMA");
            return;
        }
        let src: Vec<f32> = (0..300u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)))
            .collect();
        for start in 0..40 {
            for len in [0, 1, 15, 16, 17, 33, 64, 100, 250] {
                let src = &src[start..start + len];
                let mut wide = vec![0.0f32; len + 16];
                let mut narrow = vec![half::f16::ZERO; len + 40];
                let (wide, narrow) = (&mut wide[start % 16..][..len], &mut narrow[start..][..len]);
                // SAFETY: AVX2 and FMA were detected above.
                unsafe {
                    stream_row(wide, src);
                    stream_row(narrow, src);
                    fence();
                }
                for ((&x, &y), &z) in src.iter().zip(wide.iter()).zip(narrow.iter()) {
                    assert_eq!(x.to_bits(), y.to_bits(), "f32 {x}");
                    let want = half::f16::from_f32(x);
                    assert!(
                        z.to_bits() == want.to_bits() || z.is_nan() && want.is_nan(),
                        "{x}"
                    );
                }
            }
        }
    }

    #[test]
    fn transposed_rows_are_columns() {
        if !avx2() {
            println!("skipped: this CPU has no AVX2 and FMA");
            return;
        }
        let rows: [[f32; 16]; 4] =
            std::array::from_fn(|t| std::array::from_fn(|j| (16 * t + j) as f32));
        let mut out = [[0.0; 4]; 16];
        // SAFETY: AVX2 and FMA were detected above.
        unsafe { transpose_4x16([&rows[0], &rows[1], &rows[2], &rows[3]], &mut out) };
        for (j, column) in out.iter().enumerate() {
            assert_eq!(*column, std::array::from_fn(|t| rows[t][j]), "column {j}");
        }
    }

    #[target_feature(enable = "avx2,fma")]
    fn mask_lanes(first: i32, lo: i32, hi: i32) -> [u32; 8] {
        let mut out = [0.0f32; 8];
        store(lanes_between(first, lo, hi), &mut out);
        out.map(f32::to_bits)
    }

    #[test]
    fn lanes_between_marks_the_range() {
        if !avx2() {
            println!("skipped: this CPU has no AVX2 and FMA");
            return;
        }
        for (first, lo, hi) in [(0, 0, 8), (16, 18, 21), (8, 0, 8), (8, 12, 40), (0, 3, 3)] {
            // SAFETY: AVX2 and FMA were detected above.
            let got = unsafe { mask_lanes(first, lo, hi) };
            for (i, &bits) in got.iter().enumerate() {
                let key = first + i as i32;
                let want = if lo <= key && key < hi { u32::MAX } else { 0 };
                assert_eq!(bits, want, "({first}, {lo}, {hi}) lane {i}");
            }
        }
    }
}
