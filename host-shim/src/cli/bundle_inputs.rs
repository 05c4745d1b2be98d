//! What a bundle case's metadata pins: `seed` (the random inputs' seed) and `inputs`, per tensor
//! uid (a decimal string) an object whose `values` array is that tensor's contents.
//!
//! Upstream leaves structured inputs (`seq_len`, ragged offsets) to a fill it has not pinned;
//! random offsets are structurally invalid, so a ragged case must pin them this way. Entries
//! without `values` (upstream's own fill recipes) and other metadata keys are ignored.

use std::sync::Arc;

use half::{bf16, f16};
use hipdnn_shim::harness::PreSuppliedInputs;
use ragged_core::DenseTensor;
use ragged_core::tensor::Tensor;
use ragged_schema::model::{DataType, Graph, TensorAttributes};
use serde_json::{Map, Value};

/// The random inputs' seed: metadata `seed`, else `default`.
pub fn seed(metadata: &Map<String, Value>, default: u64) -> u64 {
    metadata
        .get("seed")
        .and_then(Value::as_u64)
        .unwrap_or(default)
}

/// The tensors metadata `inputs` pins, as pre-supplied inputs of the harness.
pub fn pinned_inputs(
    graph: &Graph,
    metadata: &Map<String, Value>,
) -> Result<PreSuppliedInputs, String> {
    let mut pre = PreSuppliedInputs::new();
    let Some(inputs) = metadata.get("inputs") else {
        return Ok(pre);
    };
    let inputs = inputs
        .as_object()
        .ok_or("metadata inputs is not an object")?;
    for (key, entry) in inputs {
        let Some(values) = entry.get("values") else {
            continue;
        };
        let uid: i64 = key
            .parse()
            .map_err(|_| format!("metadata inputs key '{key}' is not a tensor uid"))?;
        let attrs = graph
            .tensor(uid)
            .ok_or_else(|| format!("metadata inputs: uid {uid} is not in the graph"))?;
        let values = values
            .as_array()
            .ok_or_else(|| format!("metadata inputs.{key}.values is not an array"))?;
        pre.insert(uid, tensor_from_values(attrs, values)?);
    }
    Ok(pre)
}

fn tensor_from_values(
    attrs: &TensorAttributes,
    values: &[Value],
) -> Result<Arc<dyn Tensor>, String> {
    let uid = attrs.uid;
    if attrs.is_ragged() {
        return Err(format!(
            "metadata inputs: uid {uid} is ragged; pin its offsets, its contents are random"
        ));
    }
    let integers = || {
        values
            .iter()
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| format!("metadata inputs.{uid}: {v} is not an integer"))
            })
            .collect::<Result<Vec<i64>, String>>()
    };
    let numbers = || {
        values
            .iter()
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| format!("metadata inputs.{uid}: {v} is not a number"))
            })
            .collect::<Result<Vec<f64>, String>>()
    };
    let (dims, strides) = (attrs.dims.clone(), attrs.strides.clone());
    let wrap = |e: ragged_core::KernelError| format!("metadata inputs.{uid}: {e}");
    Ok(match attrs.data_type {
        DataType::Int64 => {
            Arc::new(DenseTensor::from_vec(integers()?, dims, strides).map_err(wrap)?)
        }
        DataType::Int32 => {
            let narrowed = integers()?
                .into_iter()
                .map(|v| {
                    i32::try_from(v)
                        .map_err(|_| format!("metadata inputs.{uid}: {v} does not fit INT32"))
                })
                .collect::<Result<Vec<i32>, String>>()?;
            Arc::new(DenseTensor::from_vec(narrowed, dims, strides).map_err(wrap)?)
        }
        DataType::Float => {
            let v = numbers()?.into_iter().map(|x| x as f32).collect();
            Arc::new(DenseTensor::from_vec(v, dims, strides).map_err(wrap)?)
        }
        DataType::Half => {
            let v = numbers()?.into_iter().map(f16::from_f64).collect();
            Arc::new(DenseTensor::from_vec(v, dims, strides).map_err(wrap)?)
        }
        DataType::BFloat16 => {
            let v = numbers()?.into_iter().map(bf16::from_f64).collect();
            Arc::new(DenseTensor::from_vec(v, dims, strides).map_err(wrap)?)
        }
        other => {
            return Err(format!(
                "metadata inputs.{uid}: data type {other} cannot be pinned"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::graphs::RaggedSdpaSpec;
    use serde_json::json;

    use super::*;

    fn pin(inputs: Value) -> Result<PreSuppliedInputs, String> {
        let graph = RaggedSdpaSpec::packed("pin", &[2, 3], &[4, 1]).graph();
        let meta = json!({"format_version": 1, "inputs": inputs});
        pinned_inputs(&graph, meta.as_object().unwrap_or(&Map::new()))
    }

    #[test]
    fn offsets_are_pinned_with_the_declared_type() {
        let pre = pin(json!({"5": {"values": [0, 256, 640]}, "6": {"fill": "free"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            pre.len(),
            1,
            "an entry without values is upstream's fill recipe"
        );
        let aux = pre.get(&5).unwrap_or_else(|| panic!("uid 5 pinned"));
        assert_eq!(aux.data_type(), ragged_core::DataType::I32);
    }

    #[test]
    fn bad_pins_name_the_uid() {
        let e = |v| pin(v).err().unwrap_or_default();
        assert_eq!(
            e(json!({"5": {"values": [0, 256, 4294967296_i64]}})),
            "metadata inputs.5: 4294967296 does not fit INT32"
        );
        assert_eq!(
            e(json!({"1": {"values": [0.5]}})),
            "metadata inputs: uid 1 is ragged; pin its offsets, its contents are random"
        );
        assert_eq!(
            e(json!({"99": {"values": [1]}})),
            "metadata inputs: uid 99 is not in the graph"
        );
        assert_eq!(
            e(json!({"q": {"values": [1]}})),
            "metadata inputs key 'q' is not a tensor uid"
        );
    }
}
