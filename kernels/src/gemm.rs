//! The f32 tile products of the CPU reference: a safe front for `matrixmultiply::sgemm` (the
//! backward's strided products), and the forward's register-blocked micro-kernel on operands
//! that staging already laid out as panels.
//!
//! matrixmultiply picks AVX-512/AVX2+FMA kernels at run time and takes arbitrary strides, which is
//! what lets a portable build run at full speed. It is built without its `threading` feature, so
//! every product runs on the calling thread and the outer parallel loops (`crate::parallel`) are never
//! oversubscribed, whatever the tile sizes.

/// A read-only strided f32 matrix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

/// A writable strided f32 matrix.
#[derive(Debug)]
pub(crate) struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

/// One past the largest position a strided matrix touches.
fn span(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    }
}

/// `c ← alpha · a · b + beta · c`.
///
/// Panics on mismatched shapes or out-of-bounds views: callers build these from validated
/// geometry, so a failure here is a bug in this crate, never bad input.
pub(crate) fn sgemm(alpha: f32, a: MatRef<'_>, b: MatRef<'_>, beta: f32, c: MatMut<'_>) {
    assert_eq!(a.cols, b.rows, "inner dimensions differ");
    assert_eq!((c.rows, c.cols), (a.rows, b.cols), "output shape differs");
    assert!(span(a.rows, a.cols, a.row_stride, a.col_stride) <= a.data.len());
    assert!(span(b.rows, b.cols, b.row_stride, b.col_stride) <= b.data.len());
    assert!(span(c.rows, c.cols, c.row_stride, c.col_stride) <= c.data.len());
    let stride = |s: usize| isize::try_from(s).expect("stride fits isize: it indexes a slice");
    // SAFETY: the asserts above keep every element each matrix addresses inside its slice; `c`
    // is an exclusive borrow, so it aliases neither `a` nor `b`; strides fit isize because they
    // index existing slices.
    unsafe {
        matrixmultiply::sgemm(
            a.rows,
            a.cols,
            b.cols,
            alpha,
            a.data.as_ptr(),
            stride(a.row_stride),
            stride(a.col_stride),
            b.data.as_ptr(),
            stride(b.row_stride),
            stride(b.col_stride),
            beta,
            c.data.as_mut_ptr(),
            stride(c.row_stride),
            stride(c.col_stride),
        );
    }
}

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
/// k of NR columns), over `min(a.len(), b.len())` steps; result by column.
///
/// Written over fixed-size arrays so that LLVM keeps the 16 × 4 block in eight 8-wide registers
/// and emits, per step, two loads of A, four broadcasts of B and eight FMAs (checked with
/// `perf annotate` on the AVX2 build): the FMA units, not the loads, set the pace, and eight
/// independent accumulators cover the FMA latency. Unlike `sgemm`, nothing is packed per call.
#[inline(always)]
pub(crate) fn micro_kernel<F: MulAdd>(a: &[Lane], b: &[[f32; NR]]) -> [[f32; MR]; NR] {
    let mut acc = [[0.0f32; MR]; NR];
    for (a, b) in a.iter().zip(b) {
        for (column, &y) in acc.iter_mut().zip(b) {
            for (c, &x) in column.iter_mut().zip(&a.0) {
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
            micro_kernel::<Fused>(&a, &b),
            micro_kernel::<Separate>(&a, &b),
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

    #[test]
    fn multiplies_strided_views() {
        // a = [[1, 2, 3], [4, 5, 6]] row-major; b = aᵀ read through swapped strides.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut c = [1.0f32; 4];
        sgemm(
            2.0,
            MatRef {
                data: &a,
                rows: 2,
                cols: 3,
                row_stride: 3,
                col_stride: 1,
            },
            MatRef {
                data: &a,
                rows: 3,
                cols: 2,
                row_stride: 1,
                col_stride: 3,
            },
            1.0,
            MatMut {
                data: &mut c,
                rows: 2,
                cols: 2,
                row_stride: 2,
                col_stride: 1,
            },
        );
        // a·aᵀ = [[14, 32], [32, 77]]; 2·that + 1.
        assert_eq!(c, [29.0, 65.0, 65.0, 155.0]);
    }

    #[test]
    #[should_panic(expected = "inner dimensions differ")]
    fn refuses_mismatched_shapes() {
        let a = [0.0f32; 4];
        let mut c = [0.0f32; 4];
        sgemm(
            1.0,
            MatRef {
                data: &a,
                rows: 2,
                cols: 2,
                row_stride: 2,
                col_stride: 1,
            },
            MatRef {
                data: &a,
                rows: 1,
                cols: 2,
                row_stride: 2,
                col_stride: 1,
            },
            0.0,
            MatMut {
                data: &mut c,
                rows: 2,
                cols: 2,
                row_stride: 2,
                col_stride: 1,
            },
        );
    }
}
