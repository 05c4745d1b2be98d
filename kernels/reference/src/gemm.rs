//! The f32 tile products of the CPU reference: a register-blocked micro-kernel on operands that
//! staging and the tile loops already laid out as panels.
//!
//! Why not a general sgemm such as matrixmultiply: it packs both operands of every product, and
//! the attention tiles are products of 64–128 steps, so on this project's 2-core AVX2 machine its
//! packing cost 7–9 % of each direction, and its 8-column blocks spent 72 columns on the 65 of the
//! forward's V with a column of ones. Here the operands are staged once per (batch, head) in the
//! panel arrangements the kernel reads, nothing is packed per product, and every product runs on
//! the calling thread, so the outer parallel loops (`crate::parallel`) are never oversubscribed.
//! Callers compile their tile loops three times — AVX-512 with 2 × 2 register blocks ([`Wide`]),
//! AVX2 + FMA with each half of an A panel against three B panels ([`Split`]), the baseline with
//! one micro-tile at a time ([`Narrow`]) — and `crate::isa` chooses at run time.

use std::borrow::Borrow;

/// Rows of a micro-tile: two 8-wide registers.
pub(crate) const MR: usize = 16;
/// Columns of a micro-tile.
pub(crate) const NR: usize = 4;

/// One step of k of an A panel: MR rows of one column, on its own cache line (a 32-byte load
/// that straddles two lines costs two).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Lane(pub [f32; MR]);

impl Lane {
    pub const ZERO: Lane = Lane([0.0; MR]);
}

impl Borrow<[f32; MR]> for Lane {
    fn borrow(&self) -> &[f32; MR] {
        &self.0
    }
}

/// How a multiply-add is computed: fused where the CPU has FMA (the caller is compiled for it),
/// separately elsewhere, where `f32::mul_add` would be a libm call per element.
pub(crate) trait MulAdd {
    fn mul_add(x: f32, y: f32, acc: f32) -> f32;
}

/// One rounding, one instruction under `target_feature(enable = "fma")`.
pub(crate) struct Fused;
impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(x: f32, y: f32, acc: f32) -> f32 {
        x.mul_add(y, acc)
    }
}

/// A multiply, then an add.
pub(crate) struct Separate;
impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(x: f32, y: f32, acc: f32) -> f32 {
        acc + x * y
    }
}

/// The MR × NR product of an A panel (`a[k]` = column k of MR rows) and a B panel (`b[k]` = row
/// k of NR columns; any iterator, so a B panel may be gathered on the fly), over as many steps
/// as the shorter has; result by column.
///
/// Written over fixed-size arrays so that LLVM keeps the 16 × 4 block in eight 8-wide registers
/// and emits, per step, two loads of A, four broadcasts of B and eight FMAs (checked with
/// `perf annotate` on an AVX2 build): the FMA units, not the loads, set the pace, and eight
/// independent accumulators just cover two pipes of latency 4 ([`half_by_three`] has twelve).
/// Unlike `sgemm`, nothing is packed per call.
#[inline(always)]
pub(crate) fn micro_kernel<F: MulAdd, A: Borrow<[f32; MR]>, B: Borrow<[f32; NR]>>(
    a: &[A],
    b: impl IntoIterator<Item = B>,
) -> [[f32; MR]; NR] {
    let mut acc = [[0.0f32; MR]; NR];
    for (a, b) in a.iter().zip(b) {
        step::<F>(&mut acc, a.borrow(), b.borrow());
    }
    acc
}

/// One step of k into a 16 × 4 accumulator block.
#[inline(always)]
fn step<F: MulAdd>(acc: &mut [[f32; MR]; NR], x: &[f32; MR], y: &[f32; NR]) {
    for (column, &y) in acc.iter_mut().zip(y) {
        for (c, &x) in column.iter_mut().zip(x) {
            *c = F::mul_add(x, y, *c);
        }
    }
}

/// The four micro-tiles of two A panels against two B panels at once, over as many steps as
/// the shortest has; results indexed `[a][b]`.
///
/// With 16-wide registers that is sixteen accumulators, two loads and eight broadcasts per
/// sixteen FMAs: enough independent chains to cover two 512-bit FMA pipes, with half the loads
/// per FMA of one micro-tile. The four blocks are separate locals so that LLVM promotes each to
/// registers as it does the one block of [`micro_kernel`] (one 256-element array it left in
/// memory, updated by gathers and scatters). AVX2's sixteen 8-wide registers hold only one block.
#[inline(always)]
fn micro_kernel_2x2<F: MulAdd, A: Borrow<[f32; MR]>, B: Borrow<[f32; NR]>>(
    a: [&[A]; 2],
    b: [impl IntoIterator<Item = B>; 2],
) -> [[[[f32; MR]; NR]; 2]; 2] {
    let zero = [[0.0f32; MR]; NR];
    let (mut c00, mut c01, mut c10, mut c11) = (zero, zero, zero, zero);
    let [b0, b1] = b;
    for (((x0, x1), y0), y1) in a[0].iter().zip(a[1]).zip(b0).zip(b1) {
        let (x0, x1, y0, y1) = (x0.borrow(), x1.borrow(), y0.borrow(), y1.borrow());
        step::<F>(&mut c00, x0, y0);
        step::<F>(&mut c10, x1, y0);
        step::<F>(&mut c01, x0, y1);
        step::<F>(&mut c11, x1, y1);
    }
    [[c00, c01], [c10, c11]]
}

/// Rows of half an A panel: one AVX2 register.
const HALF: usize = MR / 2;

/// Half `half` of an A panel (8 rows) against three B panels, over as many steps as the
/// shortest has, into that half of each column of `out` (by B panel, then column).
///
/// Twelve 8-wide accumulators, one A load and twelve broadcasts per twelve FMAs: with AVX2's
/// sixteen registers the 16 × 4 block of [`micro_kernel`] has only eight independent chains,
/// which two FMA pipes of latency 4 keep busy only when nothing else stalls; twelve leave slack.
/// Written on registers: from arrays of f32, LLVM assembled each A row from pieces and spilled
/// accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn half_by_three<A: Borrow<[f32; MR]>, B: Borrow<[f32; NR]>>(
    a: &[A],
    half: usize,
    b: [impl IntoIterator<Item = B>; 3],
    out: &mut [[[f32; MR]; NR]; 3],
) {
    use std::arch::x86_64::*;

    let mut acc = [[_mm256_setzero_ps(); NR]; 3];
    let [b0, b1, b2] = b;
    for (((x, y0), y1), y2) in a.iter().zip(b0).zip(b1).zip(b2) {
        let x: &[f32; HALF] = &x.borrow().as_chunks::<HALF>().0[half];
        // SAFETY: `x` is 32 readable bytes; `loadu` has no alignment requirement.
        let x = unsafe { _mm256_loadu_ps(x.as_ptr()) };
        for (acc, y) in acc.iter_mut().zip([y0.borrow(), y1.borrow(), y2.borrow()]) {
            for (acc, &y) in acc.iter_mut().zip(y) {
                *acc = _mm256_fmadd_ps(x, _mm256_set1_ps(y), *acc);
            }
        }
    }
    for (out, acc) in out.iter_mut().zip(&acc) {
        for (out, &acc) in out.iter_mut().zip(acc) {
            let out: &mut [f32; HALF] = &mut out.as_chunks_mut::<HALF>().0[half];
            // SAFETY: `out` is 32 writable bytes, borrowed exclusively; `storeu` needs no
            // alignment.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        }
    }
}

/// How many panels of each operand one register block takes.
pub(crate) trait Blocking {
    /// Two A panels against two B panels.
    const WIDE: bool;
    /// Each half of one A panel against three B panels.
    const SPLIT: bool = false;
}

/// One A panel against one B panel: the baseline build.
pub(crate) struct Narrow;
impl Blocking for Narrow {
    const WIDE: bool = false;
}

/// Two A panels against two B panels where both are there: the AVX-512 build.
pub(crate) struct Wide;
impl Blocking for Wide {
    const WIDE: bool = true;
}

/// The halves of one A panel against three B panels where three are there: the AVX2 build.
pub(crate) struct Split;
impl Blocking for Split {
    const WIDE: bool = false;
    const SPLIT: bool = true;
}

/// The product of `na` A panels and `nb` B panels, block by block: `store(i, j, block)` receives
/// the MR × NR result of A panel `i` and B panel `j` (by column, as from [`micro_kernel`]), each
/// pair exactly once, in an order the caller must not rely on.
#[inline(always)]
pub(crate) fn product<'a, F, K, A, B, I>(
    na: usize,
    nb: usize,
    a: impl Fn(usize) -> &'a [A],
    b: impl Fn(usize) -> I,
    mut store: impl FnMut(usize, usize, &[[f32; MR]; NR]),
) where
    F: MulAdd,
    K: Blocking,
    A: Borrow<[f32; MR]> + 'a,
    B: Borrow<[f32; NR]>,
    I: IntoIterator<Item = B>,
{
    #[cfg(target_arch = "x86_64")]
    if K::SPLIT {
        for i in 0..na {
            let mut j = 0;
            let mut blocks = [[[0.0f32; MR]; NR]; 3];
            while j + 3 <= nb {
                for half in 0..2 {
                    let b = [b(j), b(j + 1), b(j + 2)];
                    // SAFETY: the split blocking is compiled and chosen only where
                    // `crate::isa` reported AVX2 and FMA (its callers' dispatch).
                    unsafe { half_by_three(a(i), half, b, &mut blocks) };
                }
                for (t, block) in blocks.iter().enumerate() {
                    store(i, j + t, block);
                }
                j += 3;
            }
            for j in j..nb {
                store(i, j, &micro_kernel::<F, _, _>(a(i), b(j)));
            }
        }
        return;
    }
    let (pa, pb) = if K::WIDE { (2, 2) } else { (1, 1) };
    for i in (0..na).step_by(pa) {
        for j in (0..nb).step_by(pb) {
            if K::WIDE && i + 1 < na && j + 1 < nb {
                let block = micro_kernel_2x2::<F, _, _>([a(i), a(i + 1)], [b(j), b(j + 1)]);
                for (di, row) in block.iter().enumerate() {
                    for (dj, block) in row.iter().enumerate() {
                        store(i + di, j + dj, block);
                    }
                }
            } else {
                // The odd panel at an edge, one micro-tile at a time.
                for i in i..(i + pa).min(na) {
                    for j in j..(j + pb).min(nb) {
                        store(i, j, &micro_kernel::<F, _, _>(a(i), b(j)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_kernel_matches_a_plain_product() {
        let k = 9;
        let a: Vec<Lane> = (0..k)
            .map(|p| Lane(std::array::from_fn(|i| (i as f32 - 3.0 * p as f32) * 0.25)))
            .collect();
        let b: Vec<[f32; NR]> = (0..k)
            .map(|p| std::array::from_fn(|j| 1.0 + j as f32 - p as f32 * 0.5))
            .collect();
        for result in [
            micro_kernel::<Fused, _, _>(&a, &b),
            micro_kernel::<Separate, _, _>(&a, &b),
        ] {
            for (j, column) in result.iter().enumerate() {
                for (i, &x) in column.iter().enumerate() {
                    // Every term is a multiple of 1/8 below 2^10: exact in f32 either way.
                    let want: f32 = (0..k).map(|p| a[p].0[i] * b[p][j]).sum();
                    assert_eq!(x, want, "({i}, {j})");
                }
            }
        }
    }

    /// Every (A panel, B panel) pair of a blocked product, edges included, equals the plain
    /// product of that pair, and each is stored exactly once.
    #[test]
    fn product_covers_every_pair_once_in_both_blockings() {
        let k = 7;
        let (na, nb) = (5, 5);
        let a: Vec<Vec<Lane>> = (0..na)
            .map(|i| {
                (0..k)
                    .map(|p| Lane(std::array::from_fn(|r| (r + 3 * i) as f32 - p as f32 * 0.5)))
                    .collect()
            })
            .collect();
        let b: Vec<Vec<[f32; NR]>> = (0..nb)
            .map(|j| {
                (0..k)
                    .map(|p| std::array::from_fn(|c| (c + j) as f32 * 0.25 + p as f32))
                    .collect()
            })
            .collect();
        fn run<K: Blocking>(
            a: &[Vec<Lane>],
            b: &[Vec<[f32; NR]>],
        ) -> Vec<Vec<([[f32; MR]; NR], u32)>> {
            let mut seen = vec![vec![([[0.0; MR]; NR], 0u32); b.len()]; a.len()];
            product::<Fused, K, _, _, _>(
                a.len(),
                b.len(),
                |i| &a[i],
                |j| &b[j],
                |i, j, block| {
                    seen[i][j].0 = *block;
                    seen[i][j].1 += 1;
                },
            );
            seen
        }
        for seen in [
            run::<Narrow>(&a, &b),
            run::<Wide>(&a, &b),
            run::<Split>(&a, &b),
        ] {
            for (i, row) in seen.iter().enumerate() {
                for (j, (block, count)) in row.iter().enumerate() {
                    assert_eq!(*count, 1, "pair ({i}, {j})");
                    for (c, column) in block.iter().enumerate() {
                        for (r, &x) in column.iter().enumerate() {
                            // Multiples of 1/8 below 2^12: exact in f32 in any order.
                            let want: f32 = (0..k).map(|p| a[i][p].0[r] * b[j][p][c]).sum();
                            assert_eq!(x, want, "pair ({i}, {j}) element ({r}, {c})");
                        }
                    }
                }
            }
        }
    }
}
