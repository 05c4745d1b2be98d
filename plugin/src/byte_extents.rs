//! Every buffer a plan binds, checked against the `isize::MAX` bytes one buffer may span
//! (issue 13 item 1), so an oversized graph is declined at planning with its uid, dims and bytes
//! instead of reaching an execute whose slices would be undefined behaviour.

use ragged_kernels::tensor::extent::{Addressing, DeclaredExtent, check_extents};
use ragged_schema::DataType;

use crate::plan::{SdpaPlan, TensorPlan};

/// The decline reason for the first buffer of `plan` beyond `isize::MAX` bytes: Q, K, V, O and
/// LSE (their strided extent, and for ragged ones the largest extent valid offsets give), every
/// ragged offset aux (`B + 1` entries) and seq_len (`B`).
pub fn check(plan: &SdpaPlan) -> Result<(), String> {
    let tensors: Vec<&TensorPlan> = [&plan.q, &plan.k, &plan.v, &plan.o]
        .into_iter()
        .chain(plan.stats.as_ref())
        .collect();
    // An aux holds B + 1 entries (ragged_plan has checked that B + 1 fits in i64).
    let aux_entries: Vec<[i64; 1]> = tensors
        .iter()
        .map(|t| [t.dims[0].saturating_add(1)])
        .collect();
    let batch = [plan.q.dims[0]];
    let mut extents: Vec<DeclaredExtent<'_>> = tensors.iter().map(|t| tensor_extent(t)).collect();
    for (t, entries) in tensors.iter().zip(&aux_entries) {
        if let Some(r) = t.ragged {
            extents.push(index_extent(
                r.aux_uid,
                "ragged_offset_tensor_uid",
                entries,
                r.aux_data_type,
            ));
        }
    }
    for index in [plan.seq_len_q, plan.seq_len_kv].into_iter().flatten() {
        extents.push(index_extent(index.uid, index.role, &batch, index.data_type));
    }
    check_extents(&extents).map_err(|e| e.to_string())
}

fn index_extent<'a>(
    uid: i64,
    role: &'a str,
    entries: &'a [i64; 1],
    data_type: DataType,
) -> DeclaredExtent<'a> {
    DeclaredExtent {
        uid,
        role,
        dims: entries,
        strides: &[1],
        element_size: if data_type == DataType::Int32 { 4 } else { 8 },
        addressing: Addressing::Packed,
    }
}

fn tensor_extent(t: &TensorPlan) -> DeclaredExtent<'_> {
    DeclaredExtent {
        uid: t.uid,
        role: t.role,
        dims: &t.dims,
        strides: &t.strides,
        element_size: element_size(t.data_type),
        addressing: if t.ragged.is_some() {
            Addressing::RaggedMaximum
        } else {
            Addressing::Strided
        },
    }
}

/// Bytes per element; types no engine stores count as 8, the widest, so the check never passes
/// a tensor a later stage would size larger.
fn element_size(data_type: DataType) -> usize {
    crate::plan::kernel_type(data_type).map_or(8, |t| t.size())
}
