//! The inputs of a generated case that cannot be random: every `ragged_offset` aux (the harness
//! requires them pre-supplied, RFC §4.11) and the `seq_lens` tensors. Shared by the conformance
//! suites and the shim's own tests, so both feed a case the same offsets.

use std::sync::Arc;

use ragged_core::tensor::{DenseTensor, Tensor};
use ragged_schema::model::DataType;

use crate::HostError;
use crate::graphs::{RaggedSdpaSpec, uid};
use crate::harness::PreSuppliedInputs;

fn index_tensor(values: &[i64], index_type: DataType) -> Result<Arc<dyn Tensor>, HostError> {
    let n = values.len() as i64;
    let dims = vec![n, 1, 1, 1];
    let strides = vec![1, 1, 1, 1];
    let wrap = |e: ragged_core::KernelError| HostError::Harness(format!("index tensor: {e}"));
    Ok(match index_type {
        DataType::Int64 => {
            Arc::new(DenseTensor::from_vec(values.to_vec(), dims, strides).map_err(wrap)?)
        }
        _ => {
            let narrowed = values
                .iter()
                .map(|v| {
                    i32::try_from(*v)
                        .map_err(|_| HostError::Harness(format!("offset {v} does not fit INT32")))
                })
                .collect::<Result<Vec<i32>, _>>()?;
            Arc::new(DenseTensor::from_vec(narrowed, dims, strides).map_err(wrap)?)
        }
    })
}

/// The pre-supplied bundle of a case: every `ragged_offset` aux (strictly required) and the
/// `seq_lens` tensors (deterministic by choice).
pub fn pre_supplied(spec: &RaggedSdpaSpec) -> Result<PreSuppliedInputs, HostError> {
    let mut pre = PreSuppliedInputs::new();
    let (aq, ak, av, ao) = spec.aux_uids();
    for (aux, offsets) in [
        (aq, spec.offsets_q()),
        (ak, spec.offsets_kv()),
        (av, spec.offsets_kv()),
        (ao, spec.offsets_q()),
    ] {
        if let std::collections::hash_map::Entry::Vacant(slot) = pre.entry(aux) {
            slot.insert(index_tensor(&offsets, spec.index_type)?);
        }
    }
    if let Some(lens) = &spec.seq_len_q {
        pre.insert(uid::SEQ_LEN_Q, index_tensor(lens, spec.index_type)?);
    }
    if let Some(lens) = &spec.seq_len_kv {
        pre.insert(uid::SEQ_LEN_KV, index_tensor(lens, spec.index_type)?);
    }
    Ok(pre)
}
