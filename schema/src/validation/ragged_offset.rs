//! Per-tensor rules: alignment, and the ragged offset aux of RFC §4.2 ("exists in the graph by
//! uid, has rank 4, first dim equals B + 1") plus its element type (RFC §4.5: int32 or int64).

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
    let expected = batch.saturating_add(1);
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
