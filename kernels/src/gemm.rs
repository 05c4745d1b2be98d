//! Safe front for `matrixmultiply::sgemm`, the f32 tile products of the CPU reference.
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

#[cfg(test)]
mod tests {
    use super::*;

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
