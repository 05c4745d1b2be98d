//! Where the forward writes O: every work item converts its finished rows (sinks folded in)
//! straight into O's rows, so no staged f32 copy of O round-trips through memory and no
//! scatter pass follows the kernels.

use ragged_core::dtype::{Element, FloatElement};
use ragged_core::error::{KernelError, Role};

use super::layout::AttnLayout;
use super::paged::fold_sink;
use super::problem::Problem;
use super::stage::convert_row;

/// Where O's rows start.
pub(crate) struct RowStarts {
    /// The start of every row, in the items' order (batch, head, row).
    starts: Vec<usize>,
    /// Indices of `starts` by increasing start.
    order: Vec<usize>,
}

/// Where O's rows start, when they are unit-stride and pairwise disjoint (every layout the
/// graph side builds); `None` otherwise.
pub(crate) fn row_starts(problem: &Problem) -> Option<RowStarts> {
    rows_of(&problem.o, &problem.len_q, problem.heads_q, problem.dim_v)
}

/// Where the rows (`width` wide) of `heads` heads of `lens` tokens per batch start in `layout`,
/// in (batch, head, row) order, when they are unit-stride and pairwise disjoint; `None`
/// otherwise.
pub(crate) fn rows_of(
    layout: &AttnLayout,
    lens: &[usize],
    heads: usize,
    width: usize,
) -> Option<RowStarts> {
    if layout.stride_d != 1 && width > 1 {
        return None;
    }
    let mut starts = Vec::new();
    for (b, &len) in lens.iter().enumerate() {
        for h in 0..heads {
            starts.extend((0..len).map(|s| layout.position(b, s, h, 0)));
        }
    }
    let order = memory_order(heads, lens, &starts);
    let disjoint = order
        .windows(2)
        .all(|w| starts[w[0]] + width <= starts[w[1]]);
    disjoint.then_some(RowStarts { starts, order })
}

/// Indices of `starts` by increasing start: the common layouts' orders are tried before a sort.
fn memory_order(heads: usize, lens: &[usize], starts: &[usize]) -> Vec<usize> {
    let mut first = Vec::with_capacity(lens.len());
    let mut next = 0;
    for &len in lens {
        first.push(next);
        next += heads * len;
    }
    let staged: Vec<usize> = (0..starts.len()).collect();
    let token_major: Vec<usize> = lens
        .iter()
        .zip(&first)
        .flat_map(|(&len, &f)| (0..len).flat_map(move |s| (0..heads).map(move |h| f + h * len + s)))
        .collect();
    for order in [token_major, staged] {
        if order.is_sorted_by_key(|&i| starts[i]) {
            return order;
        }
    }
    let mut order: Vec<usize> = (0..starts.len()).collect();
    order.sort_unstable_by_key(|&i| starts[i]);
    order
}

/// `dst` carved into rows of `width` elements, in the order of `rows`' starts.
pub(crate) fn carve<'a, T>(dst: &'a mut [T], rows: &RowStarts, width: usize) -> Vec<&'a mut [T]> {
    let mut out: Vec<Option<&'a mut [T]>> = (0..rows.starts.len()).map(|_| None).collect();
    let mut rest = dst;
    let mut consumed = 0;
    for &i in &rows.order {
        let start = rows.starts[i];
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
        let (row, tail) = tail.split_at_mut(width);
        out[i] = Some(row);
        rest = tail;
        consumed = start + width;
    }
    out.into_iter().flatten().collect()
}

/// A row-major buffer for every O row, for the layouts [`row_starts`] declines; reserved
/// fallibly, as the staging buffers are.
pub(crate) fn spill<T: FloatElement>(problem: &Problem) -> Result<Vec<T>, KernelError> {
    let rows: usize = problem.len_q.iter().sum::<usize>() * problem.heads_q;
    let len = rows.checked_mul(problem.dim_v);
    let too_large = || KernelError::StagingTooLarge {
        role: Role::O,
        elements: len.map_or("more than 2^64".to_owned(), |n| n.to_string()),
    };
    let len = len.ok_or_else(too_large)?;
    let mut data = Vec::new();
    data.try_reserve_exact(len).map_err(|_| too_large())?;
    data.resize(len, T::from_f32(0.0));
    Ok(data)
}

/// The rows of a [`spill`] buffer in the items' order.
pub(crate) fn spill_rows<T>(spill: &mut [T], width: usize, rows: usize) -> Vec<&mut [T]> {
    if width == 0 {
        return (0..rows).map(|_| <&mut [T]>::default()).collect();
    }
    spill.chunks_exact_mut(width).collect()
}

/// Writes a [`spill`] buffer to O in the items' order, element by element at O's strides (a
/// later row wins where two overlap, as in a serial loop).
pub(crate) fn write_spill<T: FloatElement>(problem: &Problem, spill: &[T], o: &mut [T]) {
    let (layout, dv) = (&problem.o, problem.dim_v);
    let mut rows = spill.chunks_exact(dv.max(1));
    for (b, &len) in problem.len_q.iter().enumerate() {
        for h in 0..problem.heads_q {
            for s in 0..len {
                let Some(row) = rows.next() else { return };
                for (d, &x) in row.iter().enumerate().take(dv) {
                    o[layout.position(b, s, h, d)] = x;
                }
            }
        }
    }
}

/// Writes finished f32 rows (`width` apart in `rows`, LSE in `lse`) to their O rows, folding
/// in the head's sink first.
pub(crate) fn finish<T: FloatElement>(
    rows: &mut [f32],
    lse: &mut [f32],
    dst: &mut [&mut [T]],
    width: usize,
    sink: Option<f32>,
) {
    if let Some(sink) = sink {
        for (r, lse) in lse.iter_mut().take(dst.len()).enumerate() {
            fold_sink(&mut rows[r * width..(r + 1) * width], lse, sink);
        }
    }
    write_rows(dst.iter_mut().map(|row| &mut **row), rows, width);
}

/// Converts the rows of `acc` (`width` apart) into `rows`, for outputs written once and not
/// read back: on AVX-512 and AVX2 they are streamed past the caches (in the token-major layouts
/// a row per 4 KiB page, whose read for ownership was most of the write's cost).
pub(crate) fn write_rows<'r, T: FloatElement + 'r>(
    rows: impl IntoIterator<Item = &'r mut [T]>,
    acc: &[f32],
    width: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::has_avx512() {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        fn streamed<'r, T: FloatElement + 'r>(
            rows: impl IntoIterator<Item = &'r mut [T]>,
            acc: &[f32],
            width: usize,
        ) {
            for (dst, src) in rows.into_iter().zip(acc.chunks_exact(width)) {
                crate::avx512::stream_row(dst, src);
            }
            crate::avx512::fence();
        }
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
        fn streamed_bf16<'r, T: FloatElement + 'r>(
            rows: impl IntoIterator<Item = &'r mut [T]>,
            acc: &[f32],
            width: usize,
        ) {
            for (dst, src) in rows.into_iter().zip(acc.chunks_exact(width)) {
                if let Some(dst) = half::bf16::slice_mut(T::host_data_mut(dst)) {
                    crate::avx512::stream_row_bf16(dst, src);
                }
            }
            crate::avx512::fence();
        }
        if T::DATA_TYPE == ragged_core::dtype::DataType::BF16
            && crate::isa::isa() >= crate::isa::Isa::Avx512Bf16
        {
            // SAFETY: `isa()` reported AVX-512 BF16 or AMX, which it grants only with AVX-512
            // F/BW/VL and BF16, AVX2 and FMA (`crate::isa`).
            return unsafe { streamed_bf16(rows, acc, width) };
        }
        // SAFETY: `isa()` reported AVX-512 F/BW/VL, AVX2 and FMA (`crate::isa`).
        return unsafe { streamed(rows, acc, width) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::isa::isa() == crate::isa::Isa::Avx2Fma {
        #[target_feature(enable = "avx2,fma")]
        fn streamed<'r, T: FloatElement + 'r>(
            rows: impl IntoIterator<Item = &'r mut [T]>,
            acc: &[f32],
            width: usize,
        ) {
            for (dst, src) in rows.into_iter().zip(acc.chunks_exact(width)) {
                crate::avx2::stream_row(dst, src);
            }
            crate::avx2::fence();
        }
        // SAFETY: `isa()` reported AVX2 and FMA (`crate::isa`).
        return unsafe { streamed(rows, acc, width) };
    }
    for (dst, src) in rows.into_iter().zip(acc.chunks_exact(width)) {
        convert_row(dst, src);
    }
}
