//! AMX's bf16 tiles emulated with AVX-512 BF16 (`vdpbf16ps`), for CPUs that have the bf16 dot
//! product but no tile registers: the `crate::tiles::TileUnit` the bf16 passes run on there.
//!
//! The tiles live in a per-thread block of memory (8 KiB, in L1 while a pass runs): loads and
//! stores copy 16 rows of 64 bytes, and a product keeps C rows in registers for its dot products
//! (per pair of A columns, one row of B and, for each C row, one `vdpbf16ps` against the
//! broadcast A pair). The broadcast is an instruction of its own and, on Zen 4, competes with
//! the products for the same pipes: one per product reached 0.72 products per cycle (1.45× an
//! f32 FMA's multiply-adds), so the callers pair products that share an A tile
//! ([`TileUnit::dot_pair`]), which runs 8 rows against both B tiles at a time (16 accumulators,
//! one broadcast per two products): 1.95× an f32 FMA's on the 2-vCPU Zen 4 dev machine.

use std::arch::x86_64::*;

use crate::avx512;
use crate::tiles::{A, B, Bf16Bits, C, ROW_BYTES, ROWS, TileUnit};

/// Whether the CPU has the AVX-512 F and BF16 instructions these tiles are computed with.
pub(crate) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bf16")
}

/// One 64-byte tile row on its own cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Row<T>(T);

type CTile = [Row<[f32; 16]>; ROWS];
type ATile = [Row<[u8; ROW_BYTES]>; ROWS];
type BTile = [Row<[u32; 16]>; ROWS];

/// Four C tiles, two A and two B, in memory.
pub(crate) struct DotTiles {
    c: [CTile; 4],
    a: [ATile; 2],
    b: [BTile; 2],
}

impl TileUnit for DotTiles {
    fn configure() -> DotTiles {
        assert!(available(), "AVX-512 BF16 tiles used on a CPU without them");
        DotTiles {
            c: [[Row([0.0; 16]); ROWS]; 4],
            a: [[Row([0; ROW_BYTES]); ROWS]; 2],
            b: [[Row([0; 16]); ROWS]; 2],
        }
    }

    #[inline(always)]
    fn zero(&mut self, c: C) {
        self.c[c as usize] = [Row([0.0; 16]); ROWS];
    }

    #[inline(always)]
    fn load_c(&mut self, c: C, data: &[f32], offset: usize, stride: usize) {
        load_rows(&mut self.c[c as usize], data, offset, stride);
    }

    #[inline(always)]
    fn store_c(&mut self, c: C, data: &mut [f32], offset: usize, stride: usize) {
        for (r, row) in self.c[c as usize].iter().enumerate() {
            let start = offset + r * stride;
            data[start..start + 16].copy_from_slice(&row.0);
        }
    }

    #[inline(always)]
    fn load_a<T: Bf16Bits>(&mut self, a: A, data: &[T], offset: usize, stride: usize) {
        for (r, row) in self.a[a as usize].iter_mut().enumerate() {
            let start = offset + r * stride;
            row.0 = T::row_bytes(&data[start..start + ROW_BYTES / size_of::<T>()]);
        }
    }

    #[inline(always)]
    fn load_b(&mut self, b: B, data: &[u32], offset: usize, stride: usize) {
        load_rows(&mut self.b[b as usize], data, offset, stride);
    }

    #[inline(always)]
    fn dot_pair(&mut self, [left, right]: [C; 2], a: A) {
        let [c_left, c_right] = self
            .c
            .get_disjoint_mut([left as usize, right as usize])
            .expect("two distinct C tiles");
        // SAFETY: a `DotTiles` exists only after `configure` found AVX-512 F and BF16.
        unsafe { dot_pair(c_left, c_right, &self.a[a as usize], &self.b) }
    }

    #[inline(always)]
    fn dot(&mut self, c: C, a: A, b: B) {
        // SAFETY: a `DotTiles` exists only after `configure` found AVX-512 F and BF16.
        unsafe {
            dot(
                &mut self.c[c as usize],
                &self.a[a as usize],
                &self.b[b as usize],
            )
        }
    }
}

/// The tile's 16 rows of 16 from `data[offset + r·stride ..]`.
#[inline(always)]
fn load_rows<T: Copy>(tile: &mut [Row<[T; 16]>; ROWS], data: &[T], offset: usize, stride: usize) {
    for (r, row) in tile.iter_mut().enumerate() {
        let start = offset + r * stride;
        row.0.copy_from_slice(&data[start..start + 16]);
    }
}

/// `c += a · b`: c's rows in registers, for each pair of A columns one B row and sixteen dot
/// products against the broadcast pairs.
#[target_feature(enable = "avx512f,avx512bf16")]
fn dot(c: &mut CTile, a: &ATile, b: &BTile) {
    let mut acc = [_mm512_setzero_ps(); ROWS];
    for (x, row) in acc.iter_mut().zip(c.iter()) {
        *x = avx512::load(&row.0);
    }
    for (p, b_row) in b.iter().enumerate() {
        let column = bf16_lanes(avx512::load_u32(&b_row.0));
        for (x, a_row) in acc.iter_mut().zip(a.iter()) {
            let pair = u32::from_le_bytes(a_row.0.as_chunks::<4>().0[p]);
            *x = _mm512_dpbf16_ps(*x, bf16_lanes(_mm512_set1_epi32(pair as i32)), column);
        }
    }
    for (x, row) in acc.iter().zip(c.iter_mut()) {
        avx512::store(*x, &mut row.0);
    }
}

/// `left += a · b[0]`, `right += a · b[1]`, eight rows at a time: each broadcast A pair feeds
/// two products.
#[target_feature(enable = "avx512f,avx512bf16")]
fn dot_pair(left: &mut CTile, right: &mut CTile, a: &ATile, b: &[BTile; 2]) {
    const HALF: usize = ROWS / 2;
    for half in 0..2 {
        let rows = half * HALF..(half + 1) * HALF;
        let mut acc_l = [_mm512_setzero_ps(); HALF];
        let mut acc_r = [_mm512_setzero_ps(); HALF];
        for ((l, r), (row_l, row_r)) in acc_l
            .iter_mut()
            .zip(acc_r.iter_mut())
            .zip(left[rows.clone()].iter().zip(&right[rows.clone()]))
        {
            *l = avx512::load(&row_l.0);
            *r = avx512::load(&row_r.0);
        }
        for (p, (b_l, b_r)) in b[0].iter().zip(&b[1]).enumerate() {
            let column_l = bf16_lanes(avx512::load_u32(&b_l.0));
            let column_r = bf16_lanes(avx512::load_u32(&b_r.0));
            for ((l, r), a_row) in acc_l.iter_mut().zip(acc_r.iter_mut()).zip(&a[rows.clone()]) {
                let pair = u32::from_le_bytes(a_row.0.as_chunks::<4>().0[p]);
                let x = bf16_lanes(_mm512_set1_epi32(pair as i32));
                *l = _mm512_dpbf16_ps(*l, x, column_l);
                *r = _mm512_dpbf16_ps(*r, x, column_r);
            }
        }
        for ((l, r), (row_l, row_r)) in acc_l
            .iter()
            .zip(&acc_r)
            .zip(left[rows.clone()].iter_mut().zip(&mut right[rows]))
        {
            avx512::store(*l, &mut row_l.0);
            avx512::store(*r, &mut row_r.0);
        }
    }
}

/// 32 bf16 lanes from their bits.
#[target_feature(enable = "avx512f,avx512bf16")]
fn bf16_lanes(bits: __m512i) -> __m512bh {
    // SAFETY: both are 512-bit vectors of plain bits; every pattern is valid in either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_tiles_multiply() {
        if !available() {
            println!("skipped: this CPU has no AVX-512 BF16");
            return;
        }
        crate::tiles::tests::a_product_matches_the_plain_product::<DotTiles>();
    }
}
