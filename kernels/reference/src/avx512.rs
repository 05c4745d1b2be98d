//! Sixteen f32 lanes in one AVX-512 register, for the loops LLVM does not vectorise well on its
//! own (the AMX forward's softmax kept its running sums in memory behind masked stores).
//!
//! The arithmetic is `std::arch` intrinsics, safe to call inside functions compiled with the
//! same target features; only the two memory moves need `unsafe`, and they take array
//! references, so every call is in bounds by construction. Callers reach these functions from
//! their own `#[target_feature]` code, after `crate::isa` has reported AVX-512.

use std::arch::x86_64::*;

use ragged_core::dtype::FloatElement;

/// The 16 lanes of `x`.
#[target_feature(enable = "avx512f")]
pub(crate) fn load(x: &[f32; 16]) -> __m512 {
    // SAFETY: `x` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(x.as_ptr()) }
}

/// The 16 lanes of `x`.
#[target_feature(enable = "avx512f")]
pub(crate) fn load_u32(x: &[u32; 16]) -> __m512i {
    // SAFETY: `x` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(x.as_ptr().cast()) }
}

/// `x` into the 16 entries of `to`.
#[target_feature(enable = "avx512f")]
pub(crate) fn store(x: __m512, to: &mut [f32; 16]) {
    // SAFETY: `to` is 64 writable bytes, borrowed exclusively; `storeu` needs no alignment.
    unsafe { _mm512_storeu_ps(to.as_mut_ptr(), x) }
}

/// Sixteen 16-bit lanes into `to`.
#[target_feature(enable = "avx512f")]
pub(crate) fn store_u16(x: __m256i, to: &mut [u16; 16]) {
    // SAFETY: `to` is 32 writable bytes, borrowed exclusively; `storeu` needs no alignment.
    unsafe { _mm256_storeu_si256(to.as_mut_ptr().cast(), x) }
}

/// Sixteen 32-bit lanes into `to`.
#[target_feature(enable = "avx512f")]
pub(crate) fn store_u32(x: __m512i, to: &mut [u32; 16]) {
    // SAFETY: `to` is 64 writable bytes, borrowed exclusively; `storeu` needs no alignment.
    unsafe { _mm512_storeu_si512(to.as_mut_ptr().cast(), x) }
}

/// `dst[i] = T::from_f32(src[i])` (as long as the shorter), the 64-byte-aligned runs stored
/// with non-temporal stores: rows written once and not read again skip the read for ownership
/// that an ordinary store makes of every line. The caller orders them with [`fence`].
#[target_feature(enable = "avx512f")]
pub(crate) fn stream_row<T: FloatElement>(dst: &mut [T], src: &[f32]) {
    crate::stream::convert_lines(dst, src, |to, from| {
        // SAFETY: `from` holds at least 64 readable bytes; `to` is 64 writable bytes borrowed
        // exclusively, on a 64-byte boundary (`convert_lines`).
        unsafe {
            _mm512_stream_si512(
                to.as_mut_ptr().cast(),
                _mm512_loadu_si512(from.as_ptr().cast()),
            )
        }
    });
}

/// [`stream_row`] for bf16 on `vcvtneps2bf16`, 32 elements per line: the same bits as
/// `half`'s round to nearest even (NaN quieted the same way); lines with a denormal input, which
/// the instruction reads as zero, are converted element by element instead.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) fn stream_row_bf16(dst: &mut [half::bf16], src: &[f32]) {
    const PER: usize = 32;
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    let head = dst.as_ptr().align_offset(64).min(len);
    let (dst_head, dst_body) = dst.split_at_mut(head);
    let (src_head, src_body) = src.split_at(head);
    for (y, &x) in dst_head.iter_mut().zip(src_head) {
        *y = half::bf16::from_f32(x);
    }
    let (dst_lines, dst_tail) = dst_body.as_chunks_mut::<PER>();
    let (src_lines, src_tail) = src_body.as_chunks::<PER>();
    let tiny = |x: __m512| {
        let small =
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_abs_ps(x), _mm512_set1_ps(f32::MIN_POSITIVE));
        small & _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(x, _mm512_setzero_ps())
    };
    for (to, from) in dst_lines.iter_mut().zip(src_lines) {
        let (halves, _) = from.as_chunks::<16>();
        let (lo, hi) = (load(&halves[0]), load(&halves[1]));
        if tiny(lo) | tiny(hi) != 0 {
            for (y, &x) in to.iter_mut().zip(from) {
                *y = half::bf16::from_f32(x);
            }
            continue;
        }
        let bits =
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(to_bf16_bits(lo)), to_bf16_bits(hi));
        // SAFETY: `to` is 32 bf16, 64 writable bytes borrowed exclusively, on a 64-byte boundary
        // (the lines start at an aligned element).
        unsafe { _mm512_stream_si512(to.as_mut_ptr().cast(), bits) }
    }
    for (y, &x) in dst_tail.iter_mut().zip(src_tail) {
        *y = half::bf16::from_f32(x);
    }
}

/// Four rows of 16 as sixteen columns of 4: `out[4·j + t] = rows[t][j]`, in twelve shuffles
/// (LLVM made the element-wise copy sixty-four loads and inserts).
#[target_feature(enable = "avx512f")]
pub(crate) fn transpose_4x16(rows: [&[f32; 16]; 4], out: &mut [[f32; 4]; 16]) {
    let outs = quads_4x16(rows.map(|row| load(row)));
    let (lines, _) = out.as_flattened_mut().as_chunks_mut::<16>();
    for (line, x) in lines.iter_mut().zip(outs) {
        store(x, line);
    }
}

/// [`transpose_4x16`] on registers: output register i holds columns 4i..4i + 4, each as the
/// four rows' entries.
#[target_feature(enable = "avx512f")]
fn quads_4x16([r0, r1, r2, r3]: [__m512; 4]) -> [__m512; 4] {
    // Within each 128-bit lane: t0 = (r0[0], r1[0], r0[1], r1[1]), t1 = (r0[2], r1[2], ...).
    let (t0, t1) = (_mm512_unpacklo_ps(r0, r1), _mm512_unpackhi_ps(r0, r1));
    let (t2, t3) = (_mm512_unpacklo_ps(r2, r3), _mm512_unpackhi_ps(r2, r3));
    // u_k holds column k of each lane's four: columns k, k + 4, k + 8, k + 12 by lane.
    let u0 = _mm512_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm512_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm512_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm512_shuffle_ps::<0xEE>(t1, t3);
    // The 4 × 4 transpose of 128-bit blocks puts columns 4i..4i + 4 in output register i.
    transpose_blocks([u0, u1, u2, u3])
}

/// The 4 × 4 transpose of four registers' 128-bit blocks: block c of output i is block i of
/// input c.
#[target_feature(enable = "avx512f")]
fn transpose_blocks([u0, u1, u2, u3]: [__m512; 4]) -> [__m512; 4] {
    let v0 = _mm512_shuffle_f32x4::<0x44>(u0, u1);
    let v1 = _mm512_shuffle_f32x4::<0xEE>(u0, u1);
    let v2 = _mm512_shuffle_f32x4::<0x44>(u2, u3);
    let v3 = _mm512_shuffle_f32x4::<0xEE>(u2, u3);
    [
        _mm512_shuffle_f32x4::<0x88>(v0, v2),
        _mm512_shuffle_f32x4::<0xDD>(v0, v2),
        _mm512_shuffle_f32x4::<0x88>(v1, v3),
        _mm512_shuffle_f32x4::<0xDD>(v1, v3),
    ]
}

/// Sixteen rows of 16 as sixteen columns: `out[j][t] = rows[t][j]`. Each group of four rows
/// becomes quads of columns ([`quads_4x16`]: register i, block c = column 4i + c); column
/// 4i + c is block c of register i of each group in turn, one more block transpose per i (80
/// shuffles in all, where an element-wise copy into columns is a scatter per 8 entries).
#[target_feature(enable = "avx512f")]
pub(crate) fn transpose_16x16(rows: [&[f32; 16]; 16], out: [&mut [f32; 16]; 16]) {
    let groups: [[__m512; 4]; 4] =
        std::array::from_fn(|g| quads_4x16(std::array::from_fn(|t| load(rows[4 * g + t]))));
    for i in 0..4 {
        let columns = transpose_blocks(groups.map(|group| group[i]));
        for (c, x) in columns.into_iter().enumerate() {
            store(x, out[4 * i + c]);
        }
    }
}

/// Orders the non-temporal stores of [`stream_row`] before every later store.
#[target_feature(enable = "avx512f")]
pub(crate) fn fence() {
    _mm_sfence();
}

/// The lanes `i` with `lo ≤ first + i < hi`: a key range as a mask over 16 consecutive keys.
#[target_feature(enable = "avx512f")]
pub(crate) fn lanes_between(first: i32, lo: i32, hi: i32) -> __mmask16 {
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let key = _mm512_add_epi32(lanes, _mm512_set1_epi32(first));
    _mm512_cmpge_epi32_mask(key, _mm512_set1_epi32(lo))
        & _mm512_cmplt_epi32_mask(key, _mm512_set1_epi32(hi))
}

/// `2^x` per lane for `x ≤ 0` (NaN propagates), the polynomial of
/// `crate::sdpa::softmax::exp2_nonpositive` evaluated with fused multiply-adds; results below
/// `2^-126` are 0.
#[target_feature(enable = "avx512f")]
pub(crate) fn exp2_nonpositive(x: __m512) -> __m512 {
    use crate::sdpa::softmax::EXP2_COEFFS as C;
    // Lanes at or above −126, NaN included (an unordered compare): the others become an exact
    // 0 through the zero-masked scaling, whatever the polynomial made of them (−∞ gives NaN).
    let kept = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, _mm512_set1_ps(-126.0));
    // Nearest integer, ties to even, in one instruction: the same n as adding and subtracting
    // 1.5·2²³ for every |x| below 2²², and whatever it gives beyond is masked off above.
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
    let r = _mm512_sub_ps(x, n);
    let mut p = _mm512_set1_ps(C[5]);
    for c in [C[4], C[3], C[2], C[1], C[0]] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    // p · 2ⁿ in one instruction rather than building 2ⁿ's bits from n: exact for the normal
    // results this function gives.
    _mm512_maskz_scalef_ps(kept, p, n)
}

/// Each lane rounded to the nearest bf16, ties to even, as bits (`vcvtneps2bf16`); NaN becomes
/// a quiet NaN, and denormal inputs read as zero (the instruction's rule; the softmax never
/// produces them, and a denormal dS is below anything bf16 products resolve).
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) fn to_bf16_bits(x: __m512) -> __m256i {
    // SAFETY: both are 256-bit vectors of plain bits; every pattern is valid in either.
    unsafe { std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }

    #[target_feature(enable = "avx512f")]
    fn exp2_lanes(x: [f32; 16]) -> [f32; 16] {
        let mut out = [0.0; 16];
        store(exp2_nonpositive(load(&x)), &mut out);
        out
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn bf16_lanes(x: [f32; 16]) -> [u16; 16] {
        let mut out = [0; 16];
        store_u16(to_bf16_bits(load(&x)), &mut out);
        out
    }

    #[test]
    fn exp2_lanes_match_the_exact_power_to_a_few_ulps() {
        if !avx512() {
            println!("skipped: this CPU has no AVX-512");
            return;
        }
        let mut worst: f64 = 0.0;
        for block in 0..12_500 {
            let x: [f32; 16] = std::array::from_fn(|i| -((16 * block + i) as f32) * 1.2e-3);
            // SAFETY: AVX-512 F was detected above.
            let got = unsafe { exp2_lanes(x) };
            for (&x, &ours) in x.iter().zip(&got) {
                let exact = 2f64.powf(f64::from(x));
                if exact >= f64::from(f32::MIN_POSITIVE) {
                    worst = worst.max(((f64::from(ours) - exact) / exact).abs());
                } else {
                    assert!(
                        f64::from(ours) <= f64::from(f32::MIN_POSITIVE),
                        "{x}: {ours}"
                    );
                }
            }
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
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
        let mut x = [0.0f32; 16];
        x[..edges.len()].copy_from_slice(&edges);
        // SAFETY: as above.
        let got = unsafe { exp2_lanes(x) };
        assert_eq!(&got[..3], &[1.0, 0.5, 0.0]);
        assert!(got[3].is_nan());
        assert_eq!(got[4], f32::MIN_POSITIVE);
        assert_eq!(&got[5..8], &[0.0, 0.0, 0.0]);
    }

    /// Every element of rows at every alignment, heads and tails included, as the element-wise
    /// conversion gives it: f32 copied, bf16 with `half`'s bits (denormals and NaN included).
    #[test]
    fn streamed_rows_match_the_element_wise_conversion() {
        if !(avx512() && std::arch::is_x86_feature_detected!("avx512bf16")) {
            println!("skipped: this CPU has no AVX-512 BF16");
            return;
        }
        let src: Vec<f32> = (0..300u32)
            .map(|i| match i % 37 {
                0 => f32::from_bits(0x0000_1234 + i),
                1 => f32::NAN,
                2 => -f32::from_bits(0x0040_0000),
                _ => f32::from_bits(i.wrapping_mul(2_654_435_761)),
            })
            .collect();
        for start in 0..40 {
            for len in [0, 1, 31, 32, 33, 64, 100, 250] {
                let src = &src[start..start + len];
                let mut wide = vec![0.0f32; len + 16];
                let mut narrow = vec![half::bf16::ZERO; len + 40];
                let (wide, narrow) = (&mut wide[start % 16..][..len], &mut narrow[start..][..len]);
                // SAFETY: AVX-512 F and BF16 were detected above.
                unsafe {
                    stream_row(wide, src);
                    stream_row_bf16(narrow, src);
                    fence();
                }
                for ((&x, &y), &z) in src.iter().zip(wide.iter()).zip(narrow.iter()) {
                    assert_eq!(x.to_bits(), y.to_bits(), "f32 {x}");
                    let want = half::bf16::from_f32(x);
                    if x.is_nan() {
                        assert!(z.is_nan(), "{x}");
                    } else {
                        assert_eq!(z.to_bits(), want.to_bits(), "{x} ({:#x})", x.to_bits());
                    }
                }
            }
        }
    }

    #[test]
    fn transposed_rows_are_columns() {
        if !avx512() {
            println!("skipped: this CPU has no AVX-512");
            return;
        }
        let rows: [[f32; 16]; 4] =
            std::array::from_fn(|t| std::array::from_fn(|j| (16 * t + j) as f32));
        let mut out = [[0.0; 4]; 16];
        // SAFETY: AVX-512 F was detected above.
        unsafe { transpose_4x16([&rows[0], &rows[1], &rows[2], &rows[3]], &mut out) };
        for (j, column) in out.iter().enumerate() {
            assert_eq!(*column, std::array::from_fn(|t| rows[t][j]), "column {j}");
        }
    }

    #[test]
    fn bf16_lanes_round_like_the_half_crate() {
        if !(avx512() && std::arch::is_x86_feature_detected!("avx512bf16")) {
            println!("skipped: this CPU has no AVX-512 BF16");
            return;
        }
        for block in 0..20_000u32 {
            let x: [f32; 16] = std::array::from_fn(|i| {
                f32::from_bits((16 * block + i as u32).wrapping_mul(2_654_435_761))
            });
            // SAFETY: AVX-512 F and BF16 were detected above.
            let got = unsafe { bf16_lanes(x) };
            for (&x, &bits) in x.iter().zip(&got) {
                // Denormals read as zero, keeping their sign.
                let x = if x.is_subnormal() {
                    0.0f32.copysign(x)
                } else {
                    x
                };
                let want = half::bf16::from_f32(x);
                if x.is_nan() {
                    assert!(half::bf16::from_bits(bits).is_nan(), "{x}");
                } else {
                    assert_eq!(bits, want.to_bits(), "{x} ({:#x})", x.to_bits());
                }
            }
        }
    }
}
