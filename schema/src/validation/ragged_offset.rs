//! Per-tensor rules: alignment, and the ragged offset aux of RFC §4.2 ("exists in the graph by
//! uid, has rank 4, first dim equals B + 1") plus its element type (RFC §4.5: int32 or int64),
//! and RFC §4.9: the aux is a real tensor (every aux comes from the pre-supplied bundle, so a
//! ragged intermediate reuses an existing one and the executor never synthesizes one).

use crate::error::ValidationError;
use crate::model::{Graph, TensorAttributes};

/// The RFC fixes the offset aux's rank (the test code's `[B+1, 1, 1, 1]`).
const OFFSET_AUX_RANK: usize = 4;

pub(super) fn check_tensor(
    graph: &Graph,
    tensor: &TensorAttributes,
) -> Result<(), ValidationError> {
    let uid = tensor.uid;
    if tensor.alignment < 1 {
        return Err(ValidationError::AlignmentTooSmall {
            uid,
            alignment: tensor.alignment,
        });
    }
    let Some(aux_uid) = tensor.ragged_offset_tensor_uid else {
        return Ok(());
    };
    if tensor.ragged_offset_multiplier < 1 {
        return Err(ValidationError::RaggedOffsetMultiplierTooSmall {
            uid,
            multiplier: tensor.ragged_offset_multiplier,
        });
    }
    if aux_uid == uid {
        return Err(ValidationError::RaggedOffsetSelf { uid });
    }
    let Some(aux) = graph.tensor(aux_uid) else {
        return Err(ValidationError::RaggedOffsetMissing { uid, aux_uid });
    };
    if aux.is_virtual {
        return Err(ValidationError::RaggedOffsetVirtual { uid, aux_uid });
    }
    let Some(&batch) = tensor.dims.first() else {
        return Err(ValidationError::RaggedPrimaryWithoutDims {
            uid,
            dims: tensor.dims.clone(),
        });
    };
    if aux.dims.len() != OFFSET_AUX_RANK {
        return Err(ValidationError::RaggedOffsetRank {
            uid,
            aux_uid,
            dims: aux.dims.clone(),
        });
    }
    // B + 1 must exist as an i64 for any aux to match it; a negative B has no batches at all.
    let Some(expected) = batch.checked_add(1).filter(|_| batch >= 0) else {
        return Err(ValidationError::RaggedBatchOutOfRange { uid, batch });
    };
    if aux.dims[0] != expected {
        return Err(ValidationError::RaggedOffsetBatch {
            uid,
            aux_uid,
            expected,
            actual: aux.dims[0],
        });
    }
    if !aux.data_type.is_index_type() {
        return Err(ValidationError::RaggedOffsetDataType {
            uid,
            aux_uid,
            data_type: aux.data_type,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DataType;

    fn graph_with_batch(batch: i64, aux_batch: i64) -> Graph {
        let aux = TensorAttributes::new()
            .set_uid(5)
            .set_data_type(DataType::Int32)
            .set_dims(vec![aux_batch, 1, 1, 1]);
        let q = TensorAttributes::new()
            .set_uid(1)
            .set_dims(vec![batch, 3, 2, 16])
            .set_ragged_offset(&aux);
        Graph::new("g").add_tensor(aux).add_tensor(q)
    }

    fn check_q(graph: &Graph) -> Result<(), ValidationError> {
        check_tensor(graph, &graph.tensors[1])
    }

    #[test]
    fn a_batch_whose_b_plus_one_overflows_is_rejected_not_matched() {
        // Saturating B + 1 used to equal i64::MAX, so this aux passed as "B + 1 entries".
        let g = graph_with_batch(i64::MAX, i64::MAX);
        assert_eq!(
            check_q(&g),
            Err(ValidationError::RaggedBatchOutOfRange {
                uid: 1,
                batch: i64::MAX
            })
        );
    }

    #[test]
    fn a_negative_batch_is_rejected_even_with_a_matching_aux() {
        let g = graph_with_batch(-1, 0);
        let error = check_q(&g).err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "tensor uid 1: field dims[0] (the batch B) = -1 is out of range; the ragged \
                 offset aux needs B + 1 entries, so 0 <= B < 9223372036854775807"
            )
        );
    }

    #[test]
    fn the_aux_holds_b_plus_one_entries() {
        assert_eq!(check_q(&graph_with_batch(2, 3)), Ok(()));
        assert!(matches!(
            check_q(&graph_with_batch(2, 2)),
            Err(ValidationError::RaggedOffsetBatch {
                expected: 3,
                actual: 2,
                ..
            })
        ));
    }
}
