//! bf16 tile products behind one interface, so that the bf16 forward (`sdpa::tile_bf16`) and
//! backward (`sdpa_backward::bf16_tiles`) are written once and run on either unit:
//!
//! * [`crate::amx::AmxTiles`]: Intel AMX tile registers, `tdpbf16ps` (16 × 16 × 32 multiply-adds
//!   per instruction);
//! * [`crate::bf16_dot::DotTiles`]: the same tiles in memory, multiplied with AVX-512 BF16's
//!   `vdpbf16ps` (32 multiply-adds per instruction, twice an f32 FMA's), for CPUs that have
//!   the bf16 dot product but no AMX (AMD Zen 4 and later, Intel Cooper Lake).
//!
//! The register model is AMX's: every tile is 16 rows of 64 bytes. A C tile is 16 × 16 f32, an A
//! tile 16 rows × 32 bf16, a B tile 16 rows of 16 bf16 pairs (the "VNNI" layout: row r holds,
//! for each of 16 columns n, the elements (2r, n) and (2r + 1, n) of the 32 × 16 operand). Four C
//! tiles, two A and two B, so a 2 × 2 block of products reuses each loaded tile twice. Both
//! units accumulate in f32 with round-to-nearest-even and flush denormal inputs and results to
//! zero; they may round a pair's two products in a different order, within the bf16 tolerance
//! every caller is tested to.

/// Bytes per tile row, and rows per tile.
pub(crate) const ROW_BYTES: usize = 64;
pub(crate) const ROWS: usize = 16;

/// A C (accumulator) tile.
#[derive(Clone, Copy, Debug)]
pub(crate) enum C {
    T0,
    T1,
    T2,
    T3,
}

impl C {
    pub(crate) const ALL: [C; 4] = [C::T0, C::T1, C::T2, C::T3];
}

/// An A tile (tmm4 or tmm7 on AMX).
#[derive(Clone, Copy, Debug)]
pub(crate) enum A {
    T4,
    T7,
}

/// A B tile (tmm5 or tmm6 on AMX).
#[derive(Clone, Copy, Debug)]
pub(crate) enum B {
    T5,
    T6,
}

/// Element types an A tile is loaded from: bf16 bits, or pairs of them (the even column in
/// the low half).
pub(crate) trait Bf16Bits: Copy {
    /// Its little-endian bytes into `out` (`size_of::<Self>()` of them).
    fn put_le_bytes(self, out: &mut [u8]);

    /// The little-endian bytes of one 64-byte tile row starting at `row[0]`.
    #[inline(always)]
    fn row_bytes(row: &[Self]) -> [u8; ROW_BYTES] {
        let mut out = [0u8; ROW_BYTES];
        let size = size_of::<Self>();
        for (bytes, &x) in out.chunks_exact_mut(size).zip(&row[..ROW_BYTES / size]) {
            x.put_le_bytes(bytes);
        }
        out
    }
}

impl Bf16Bits for u16 {
    #[inline(always)]
    fn put_le_bytes(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
}

impl Bf16Bits for u32 {
    #[inline(always)]
    fn put_le_bytes(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
}

/// A unit that multiplies bf16 tiles; one per thread, made by [`TileUnit::configure`] where
/// `crate::isa::bf16_tiles` names it. Loads and stores take a slice, the first element's offset
/// and the rows' stride in elements, and panic if any of the 16 rows lies outside the slice.
pub(crate) trait TileUnit {
    /// Sets the unit up on the calling thread (AMX loads its tile configuration).
    fn configure() -> Self;
    /// C ← 0.
    fn zero(&mut self, c: C);
    /// C ← 16 rows of 16 f32 from `data[offset + r·stride ..]`.
    fn load_c(&mut self, c: C, data: &[f32], offset: usize, stride: usize);
    /// 16 rows of 16 f32 of C → `data[offset + r·stride ..]`.
    fn store_c(&mut self, c: C, data: &mut [f32], offset: usize, stride: usize);
    /// A ← 16 rows of 32 bf16 from `data[offset + r·stride ..]`.
    fn load_a<T: Bf16Bits>(&mut self, a: A, data: &[T], offset: usize, stride: usize);
    /// B ← 16 rows of 16 bf16 pairs (each pair one `u32`) from `data[offset + r·stride ..]`.
    fn load_b(&mut self, b: B, data: &[u32], offset: usize, stride: usize);
    /// C += A · B in f32.
    fn dot(&mut self, c: C, a: A, b: B);

    /// The 2 × 2 block of C tiles ← 0.
    #[inline(always)]
    fn zero_block(&mut self) {
        for c in C::ALL {
            self.zero(c);
        }
    }

    /// The 2 × 2 block of C tiles (C0 C1 over C2 C3) ← 32 rows of 32 f32 from
    /// `data[offset + r·stride ..]`, one tile at a time in that order.
    #[inline(always)]
    fn load_block(&mut self, data: &[f32], offset: usize, stride: usize) {
        for (c, at) in C::ALL.into_iter().zip(block_offsets(offset, stride)) {
            self.load_c(c, data, at, stride);
        }
    }

    /// The 2 × 2 block of C tiles → `data[offset + r·stride ..]`, as [`TileUnit::load_block`].
    #[inline(always)]
    fn store_block(&mut self, data: &mut [f32], offset: usize, stride: usize) {
        for (c, at) in C::ALL.into_iter().zip(block_offsets(offset, stride)) {
            self.store_c(c, data, at, stride);
        }
    }

    /// `left += a · B5` and `right += a · B6`: one A tile against both B tiles, which lets a
    /// unit without tile registers read each A element once for two products.
    #[inline(always)]
    fn dot_pair(&mut self, [left, right]: [C; 2], a: A) {
        self.dot(left, a, B::T5);
        self.dot(right, a, B::T6);
    }
}

/// Where each C tile of a 2 × 2 block whose first element is at `offset` starts, rows `stride`
/// apart: C0, C1 16 columns on, C2 16 rows down, C3 both.
#[inline(always)]
fn block_offsets(offset: usize, stride: usize) -> [usize; 4] {
    let down = offset + 16 * stride;
    [offset, offset + 16, down, down + 16]
}

/// Panics unless rows `0..16` of `row_bytes` bytes, `stride` elements apart from `offset`, lie
/// inside a slice of `len` elements of `size` bytes.
pub(crate) fn check_rows(len: usize, size: usize, offset: usize, stride: usize, row_bytes: usize) {
    let last = offset + (ROWS - 1) * stride;
    assert!(
        row_bytes.is_multiple_of(size) && last + row_bytes / size <= len,
        "tile rows {offset} + 15 x {stride} + {} elements outside a slice of {len}",
        row_bytes / size
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn bf16_bits(x: f32) -> u16 {
        half::bf16::from_f32(x).to_bits()
    }

    /// One 16 × 32 by 32 × 16 product on `U`, A loaded from bf16 bits and from pairs, into a
    /// C loaded with ones and into a zeroed one, against the plain product: small integers and
    /// halves, exact in bf16 and in f32 whatever the order of the sums.
    pub(crate) fn a_product_matches_the_plain_product<U: TileUnit>() {
        let a_plain: Vec<u16> = (0..16 * 32)
            .map(|i| bf16_bits((i % 7) as f32 - 3.0))
            .collect();
        let a_pairs: Vec<u32> = a_plain
            .chunks_exact(2)
            .map(|p| p[0] as u32 | (p[1] as u32) << 16)
            .collect();
        let b_plain: Vec<f32> = (0..32 * 16).map(|i| (i % 5) as f32 * 0.5).collect();
        let b: Vec<u32> = (0..16 * 16)
            .map(|i| {
                let (r, n) = (i / 16, i % 16);
                let lo = bf16_bits(b_plain[2 * r * 16 + n]) as u32;
                let hi = bf16_bits(b_plain[(2 * r + 1) * 16 + n]) as u32;
                lo | hi << 16
            })
            .collect();
        // C rows 20 apart inside a larger buffer, so that the stride is exercised.
        let mut ones = vec![1.0f32; 15 * 20 + 16];
        let mut zeroed = vec![7.0f32; 16 * 16];
        let mut tiles = U::configure();
        tiles.load_c(C::T2, &ones, 0, 20);
        tiles.load_a(A::T7, &a_pairs, 0, 16);
        tiles.load_b(B::T6, &b, 0, 16);
        tiles.dot(C::T2, A::T7, B::T6);
        tiles.store_c(C::T2, &mut ones, 0, 20);
        tiles.zero(C::T1);
        tiles.load_a(A::T4, &a_plain, 0, 32);
        tiles.load_b(B::T5, &b, 0, 16);
        tiles.dot(C::T1, A::T4, B::T5);
        tiles.store_c(C::T1, &mut zeroed, 0, 16);
        // The pair: A against B in B5 and, in B6, B with its columns reversed.
        let reversed: Vec<u32> = b
            .chunks_exact(16)
            .flat_map(|row| row.iter().rev())
            .copied()
            .collect();
        let (mut left, mut right) = (vec![0.0f32; 16 * 16], vec![0.0f32; 16 * 16]);
        tiles.zero(C::T0);
        tiles.load_c(C::T3, &right, 0, 16);
        tiles.load_b(B::T6, &reversed, 0, 16);
        tiles.dot_pair([C::T0, C::T3], A::T4);
        tiles.store_c(C::T0, &mut left, 0, 16);
        tiles.store_c(C::T3, &mut right, 0, 16);
        // A 2 × 2 block through the C tiles: 32 rows of 32 at an offset, rows 40 apart, back out
        // to the same places of a zeroed buffer; the rest of the buffer stays zero.
        let source: Vec<f32> = (0..5 + 31 * 40 + 32).map(|i| i as f32).collect();
        let mut copy = vec![0.0f32; source.len()];
        tiles.load_block(&source, 5, 40);
        tiles.store_block(&mut copy, 5, 40);
        for (i, (&x, &y)) in source.iter().zip(&copy).enumerate() {
            let inside = i >= 5 && (i - 5) % 40 < 32;
            assert_eq!(y, if inside { x } else { 0.0 }, "block element {i}");
        }
        tiles.zero_block();
        tiles.store_block(&mut copy, 5, 40);
        assert!(
            copy.iter().all(|&x| x == 0.0),
            "a zeroed block stores zeros"
        );
        drop(tiles);
        for m in 0..16 {
            for n in 0..16 {
                let sum: f32 = (0..32)
                    .map(|k| {
                        half::bf16::from_bits(a_plain[m * 32 + k]).to_f32() * b_plain[k * 16 + n]
                    })
                    .sum();
                assert_eq!(ones[m * 20 + n], 1.0 + sum, "loaded C ({m}, {n})");
                assert_eq!(zeroed[m * 16 + n], sum, "zeroed C ({m}, {n})");
                assert_eq!(left[m * 16 + n], sum, "pair, left C ({m}, {n})");
                assert_eq!(right[m * 16 + 15 - n], sum, "pair, right C ({m}, {n})");
            }
        }
    }

    #[test]
    fn amx_tiles_multiply() {
        if !crate::amx::available() {
            println!("skipped: this CPU or kernel offers no AMX bf16 tiles");
            return;
        }
        a_product_matches_the_plain_product::<crate::amx::AmxTiles>();
    }

    #[test]
    fn tile_rows_must_lie_inside_the_slice() {
        check_rows(16 * 16, 4, 0, 16, ROW_BYTES);
        check_rows(100 + 15 * 40 + 16, 4, 100, 40, ROW_BYTES);
        let outside = std::panic::catch_unwind(|| check_rows(16 * 16 - 1, 4, 0, 16, ROW_BYTES));
        assert!(
            outside.is_err(),
            "the last row's last element is past the slice"
        );
        let outside = std::panic::catch_unwind(|| check_rows(16 * 16, 4, 1, 16, ROW_BYTES));
        assert!(outside.is_err(), "an offset shifts every row");
    }

    #[test]
    fn row_bytes_put_the_even_column_first() {
        let pairs: Vec<u16> = (0..40).collect();
        let bytes = u16::row_bytes(&pairs[2..]);
        assert_eq!(&bytes[..4], &[2, 0, 3, 0]);
        let words: Vec<u32> = (0..20).map(|i| 3 | i << 16).collect();
        let bytes = u32::row_bytes(&words[1..]);
        assert_eq!(&bytes[..8], &[3, 0, 1, 0, 3, 0, 2, 0]);
    }
}
