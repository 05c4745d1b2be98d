//! Every buffer a problem binds, checked against the `isize::MAX` bytes one buffer may span
//! (issue 13 item 1), so an oversized graph is declined at planning with its uid, dims and bytes
//! instead of reaching an execute whose slices would be undefined behaviour.

use ragged_core::Decline;
use ragged_core::problem::{IndexWidth, OFFSETS_ROLE, Operand, RaggedSdpaProblem, SINK_ROLE};
use ragged_core::tensor::extent::{Addressing, DeclaredExtent, ExtentTooLarge, check_extents};

/// The decline for the first buffer of `problem` beyond `isize::MAX` bytes: Q, K, V, O and LSE
/// (their strided extent, and for ragged ones the largest extent valid offsets give), every
/// ragged offset aux (`B + 1` entries) and seq_len (`B`), the page tables and the sinks.
pub fn check(problem: &RaggedSdpaProblem) -> Result<(), Decline> {
    // One extent at a time, in the order above: this runs on every accepted graph, and collected
    // lists of them were heap allocations per call.
    let one = |extent: DeclaredExtent<'_>| {
        check_extents(std::slice::from_ref(&extent)).map_err(|e| decline(&e))
    };
    for t in problem.tensors() {
        one(tensor_extent(t))?;
    }
    for t in problem.tensors() {
        if let Some(r) = t.ragged {
            // An aux holds B + 1 entries (schema validation has checked that B + 1 fits in i64).
            let entries = [t.dims[0].saturating_add(1)];
            one(index_extent(r.uid, OFFSETS_ROLE, &entries, r.width))?;
        }
    }
    let batch = [problem.batch()];
    for index in problem.seq_lens() {
        one(index_extent(index.uid, index.role, &batch, index.width))?;
    }
    let tables = problem
        .paged
        .iter()
        .flat_map(|p| p.tables())
        .map(|t| (t.uid, t.role, t.dims(), t.strides()));
    let sinks = problem
        .sinks
        .iter()
        .map(|s| (s.uid, SINK_ROLE, s.dims(), s.strides()));
    for (uid, role, dims, strides) in tables.chain(sinks) {
        one(DeclaredExtent {
            uid,
            role,
            dims: &dims,
            strides: &strides,
            element_size: 4,
            addressing: Addressing::Strided,
        })?;
    }
    Ok(())
}

fn decline(e: &ExtentTooLarge) -> Decline {
    let bytes = e
        .bytes
        .map_or_else(|| "more than 2^128".to_owned(), |b| b.to_string());
    let field = format!("{} byte extent (dims {:?})", e.role, e.dims);
    let need = format!("at most {} bytes, what one buffer may span", e.limit);
    match e.uid {
        Some(uid) => Decline::new(uid, field, bytes, need),
        None => Decline::graph(field, bytes, need),
    }
}

fn index_extent<'a>(
    uid: i64,
    role: &'a str,
    entries: &'a [i64; 1],
    width: IndexWidth,
) -> DeclaredExtent<'a> {
    DeclaredExtent {
        uid,
        role,
        dims: entries,
        strides: &[1],
        element_size: usize::try_from(width.bytes()).unwrap_or(8),
        addressing: Addressing::Packed,
    }
}

fn tensor_extent(t: &Operand) -> DeclaredExtent<'_> {
    DeclaredExtent {
        uid: t.uid,
        role: t.role,
        dims: &t.dims,
        strides: &t.strides,
        element_size: t.dtype.size(),
        addressing: if t.ragged.is_some() {
            Addressing::RaggedMaximum
        } else {
            Addressing::Strided
        },
    }
}
