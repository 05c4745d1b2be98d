//! The f32 tile products of the CPU reference: a register-blocked micro-kernel on operands that
//! staging and the tile loops already laid out as panels.
//!
//! Why not a general sgemm such as matrixmultiply: it packs both operands of every product, and
//! the attention tiles are products of 64–128 steps, so on this project's 2-core AVX2 machine its
//! packing cost 7–9 % of each direction, and its 8-column blocks spent 72 columns on the 65 of the
//! forward's V with a column of ones. Here the operands are staged once per (batch, head) in the
//! panel arrangements the kernel reads, nothing is packed per product, and every product runs on
//! the calling thread, so the outer parallel loops (`crate::parallel`) are never oversubscribed.
//! Callers compile their tile loops for AVX2 + FMA and for the baseline (`MulAdd`'s two flavours);
//! `crate::isa` chooses at run time.

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
/// `perf annotate` on the AVX2 build): the FMA units, not the loads, set the pace, and eight
/// independent accumulators cover the FMA latency. Unlike `sgemm`, nothing is packed per call.
#[inline(always)]
pub(crate) fn micro_kernel<F: MulAdd, A: Borrow<[f32; MR]>, B: Borrow<[f32; NR]>>(
    a: &[A],
    b: impl IntoIterator<Item = B>,
) -> [[f32; MR]; NR] {
    let mut acc = [[0.0f32; MR]; NR];
    for (a, b) in a.iter().zip(b) {
        for (column, &y) in acc.iter_mut().zip(b.borrow()) {
            for (c, &x) in column.iter_mut().zip(a.borrow()) {
                *c = F::mul_add(x, y, *c);
            }
        }
    }
    acc
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
}
