//! The run's pre-supplied inputs (RFC §4.11.1): ragged offsets and seq_lens from the graph's
//! companion file, then any input found as `.npy` in the inputs directory. Everything else is
//! seeded random.
//!
//! Companion file (`<graph stem>.offsets.json` next to the graph unless `--offsets` names one):
//!
//! ```json
//! { "ragged_offsets": { "ragged_offset_q": [0, 1536, 1536, 4608, 6656] },
//!   "seq_lens":       { "11": [3, 0, 6, 4] } }
//! ```
//!
//! Keys are tensor names or uids (decimal); values are the tensor's elements, stored with the
//! element type the graph declares (INT32 or INT64). Offsets are in elements (times the primary's
//! `ragged_offset_multiplier`), as the variant pack would carry them. A paged graph's page tables
//! go in a `page_tables` section, row by row (`[B, MP]` flattened), page ids along the pools'
//! first axis.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hipdnn_shim::HostError;
use hipdnn_shim::harness::bundle::kernel_type;
use hipdnn_shim::harness::{PreSuppliedInputs, create_tensor_from_attribute};
use ragged_core::DataType as KernelType;
use ragged_core::tensor::{DenseTensor, Tensor, TensorMut};
use ragged_schema::model::{Graph, TensorAttributes};

use crate::error::ShimError;
use crate::npy;

/// The default companion path of a graph file.
pub fn default_companion(graph: &Path) -> PathBuf {
    let stem = graph
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    graph.with_file_name(format!("{stem}.offsets.json"))
}

fn resolve<'g>(graph: &'g Graph, key: &str) -> Option<&'g TensorAttributes> {
    key.parse::<i64>()
        .ok()
        .and_then(|uid| graph.tensor(uid))
        .or_else(|| graph.tensors.iter().find(|t| t.name == key))
}

fn index_tensor(attrs: &TensorAttributes, values: &[i64]) -> Result<Arc<dyn Tensor>, String> {
    // The dims come from the graph file: their product may overflow and must not panic.
    let expected = attrs
        .dims
        .iter()
        .try_fold(1i64, |count, &dim| count.checked_mul(dim));
    if expected.and_then(|e| usize::try_from(e).ok()) != Some(values.len()) {
        let count = expected.map_or_else(|| "overflowing int64".to_owned(), |e| e.to_string());
        return Err(format!(
            "tensor uid {} '{}' has dims {:?} ({count} elements), the file gives {}",
            attrs.uid,
            attrs.name,
            attrs.dims,
            values.len()
        ));
    }
    let (dims, strides) = (attrs.dims.clone(), attrs.strides.clone());
    let wrap = |e: ragged_core::KernelError| format!("tensor uid {}: {e}", attrs.uid);
    match kernel_type(attrs).map_err(|e| e.to_string())? {
        KernelType::I64 => Ok(Arc::new(
            DenseTensor::from_vec(values.to_vec(), dims, strides).map_err(wrap)?,
        )),
        KernelType::I32 => {
            let narrowed = values
                .iter()
                .map(|v| {
                    i32::try_from(*v).map_err(|_| {
                        format!("tensor uid {}: value {v} does not fit INT32", attrs.uid)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(
                DenseTensor::from_vec(narrowed, dims, strides).map_err(wrap)?,
            ))
        }
        other => Err(format!(
            "tensor uid {} is {other}, but offsets, seq_lens and page tables must be INT32 or \
             INT64",
            attrs.uid
        )),
    }
}

/// Reads the companion file into `pre`. A missing file is not an error (offsets may come as
/// `.npy`); the strict check later names any offset still missing.
pub fn load_companion(
    graph: &Graph,
    path: &Path,
    required: bool,
    pre: &mut PreSuppliedInputs,
) -> Result<(), ShimError> {
    let err = |message: String| ShimError::Companion {
        path: path.to_path_buf(),
        message,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ShimError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let parsed: BTreeMap<String, BTreeMap<String, Vec<i64>>> =
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    let ragged_offset_uids: Vec<i64> = graph
        .tensors
        .iter()
        .filter_map(|t| t.ragged_offset_tensor_uid)
        .collect();
    let page_table_uids: Vec<i64> = graph
        .nodes
        .iter()
        .filter_map(|n| n.attributes.as_sdpa())
        .flat_map(|a| [a.page_table_k_tensor_uid, a.page_table_v_tensor_uid])
        .flatten()
        .collect();
    for (section, entries) in &parsed {
        if !["ragged_offsets", "seq_lens", "page_tables"].contains(&section.as_str()) {
            return Err(err(format!(
                "unknown section '{section}' (expected ragged_offsets, seq_lens, page_tables)"
            )));
        }
        for (key, values) in entries {
            let attrs = resolve(graph, key)
                .ok_or_else(|| err(format!("{section}: no tensor named or numbered '{key}'")))?;
            if section == "ragged_offsets" && !ragged_offset_uids.contains(&attrs.uid) {
                return Err(err(format!(
                    "ragged_offsets: tensor uid {} '{}' is no tensor's ragged_offset_tensor_uid",
                    attrs.uid, attrs.name
                )));
            }
            if section == "page_tables" && !page_table_uids.contains(&attrs.uid) {
                return Err(err(format!(
                    "page_tables: tensor uid {} '{}' is no SDPA node's page table",
                    attrs.uid, attrs.name
                )));
            }
            pre.insert(attrs.uid, index_tensor(attrs, values).map_err(err)?);
        }
    }
    Ok(())
}

fn npy_path(dir: &Path, attrs: &TensorAttributes) -> Option<PathBuf> {
    [format!("{}.npy", attrs.uid), format!("{}.npy", attrs.name)]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

/// Loads every non-virtual, non-output tensor found in `dir` (dense ones first, so that ragged
/// primaries find their offsets already supplied). A `dir` that is not a directory is an error:
/// a mistyped path must not turn into a run on random data.
pub fn load_npy_dir(
    graph: &Graph,
    dir: &Path,
    outputs: &std::collections::BTreeSet<i64>,
    pre: &mut PreSuppliedInputs,
) -> Result<Vec<i64>, ShimError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ShimError::InputsDir {
                path: dir.to_path_buf(),
                reason: "not a directory".to_owned(),
            });
        }
        Err(e) => {
            return Err(ShimError::InputsDir {
                path: dir.to_path_buf(),
                reason: if e.kind() == std::io::ErrorKind::NotFound {
                    "no such directory".to_owned()
                } else {
                    e.to_string()
                },
            });
        }
    }
    let mut loaded = Vec::new();
    let candidates = graph
        .tensors
        .iter()
        .filter(|t| !t.is_virtual && !outputs.contains(&t.uid) && !pre.contains_key(&t.uid));
    let (dense, ragged): (Vec<_>, Vec<_>) = candidates.partition(|t| !t.is_ragged());
    for attrs in dense.into_iter().chain(ragged) {
        let Some(path) = npy_path(dir, attrs) else {
            continue;
        };
        let fail = |message: String| ShimError::Npy {
            path: path.clone(),
            uid: attrs.uid,
            name: attrs.name.clone(),
            message,
        };
        let array = npy::read(&path).map_err(fail)?;
        let mut tensor = allocate(attrs, pre).map_err(fail)?;
        npy::check_input_shape(&array.shape, &*tensor).map_err(fail)?;
        npy::fill(&array.values, tensor.host_data_mut()).map_err(fail)?;
        let shared: Arc<dyn TensorMut> = Arc::from(tensor);
        pre.insert(attrs.uid, shared as Arc<dyn Tensor>);
        loaded.push(attrs.uid);
    }
    Ok(loaded)
}

/// An empty tensor shaped as the graph says (ragged: sized by its supplied offsets), with the
/// shim's wording for offsets that are missing: the user supplies them through files.
fn allocate(
    attrs: &TensorAttributes,
    pre: &PreSuppliedInputs,
) -> Result<Box<dyn TensorMut>, String> {
    create_tensor_from_attribute(attrs, pre).map_err(|error| match error {
        HostError::RaggedOffsetNotSupplied { aux_uid, .. } => format!(
            "its ragged_offset uid {aux_uid} must be supplied (companion file or {aux_uid}.npy)"
        ),
        HostError::Allocation { source, .. } => source.to_string(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipdnn_shim::graphs::RaggedSdpaSpec;

    fn companion(text: &str) -> Result<PreSuppliedInputs, String> {
        let graph = RaggedSdpaSpec::packed("c", &[2, 3], &[4, 1]).graph();
        let path = std::env::temp_dir().join(format!(
            "hipdnn-shim-companion-{}-{}.json",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        let mut pre = PreSuppliedInputs::new();
        let result = load_companion(&graph, &path, true, &mut pre);
        let _ = std::fs::remove_file(&path);
        result.map(|()| pre).map_err(|e| e.to_string())
    }

    #[test]
    fn offsets_resolve_by_name_or_uid_with_the_declared_type() {
        let pre = companion(
            r#"{"ragged_offsets": {"ragged_offset_5": [0, 256, 640], "6": [0, 512, 640]}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let q = pre.get(&5).unwrap_or_else(|| panic!("uid 5 missing"));
        assert_eq!(q.data_type(), KernelType::I32);
        assert!(pre.contains_key(&6));
    }

    #[test]
    fn errors_name_the_key_the_tensor_and_the_lengths() {
        let e = companion(r#"{"ragged_offsets": {"nope": [0]}}"#)
            .err()
            .unwrap_or_default();
        assert!(e.contains("no tensor named or numbered 'nope'"), "{e}");
        let e = companion(r#"{"ragged_offsets": {"5": [0, 64]}}"#)
            .err()
            .unwrap_or_default();
        assert!(e.contains("tensor uid 5 'ragged_offset_5' has dims [3, 1, 1, 1] (3 elements), the file gives 2"), "{e}");
        let e = companion(r#"{"ragged_offsets": {"1": [0, 1, 2]}}"#)
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("tensor uid 1 'q' is no tensor's ragged_offset_tensor_uid"),
            "{e}"
        );
        let e = companion(r#"{"ragged_offsets": {"5": [0, 64, 4294967296]}}"#)
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("tensor uid 5: value 4294967296 does not fit INT32"),
            "{e}"
        );
        let e = companion(r#"{"offsets": {}}"#).err().unwrap_or_default();
        assert!(e.contains("unknown section 'offsets'"), "{e}");
    }
    #[test]
    fn dims_whose_product_overflows_are_named_not_a_panic() {
        let mut graph = RaggedSdpaSpec::packed("c", &[2, 3], &[4, 1]).graph();
        let Some(aux) = graph.tensors.iter_mut().find(|t| t.uid == 5) else {
            panic!("uid 5 is Q's ragged_offset");
        };
        aux.dims = vec![1 << 40, 1 << 40, 1, 1];
        let e = index_tensor(aux, &[0, 1]).err().unwrap_or_default();
        assert!(
            e.contains("(overflowing int64 elements), the file gives 2"),
            "{e}"
        );
    }

    #[test]
    fn allocation_words_a_missing_offset_for_files_and_passes_kernel_errors_through() {
        let graph = RaggedSdpaSpec::packed("c", &[2, 3], &[4, 1]).graph();
        let q = graph.tensor(1).ok_or("q is uid 1");
        let missing = q.map(|q| allocate(q, &PreSuppliedInputs::new()).err());
        assert_eq!(
            missing,
            Ok(Some(
                "its ragged_offset uid 5 must be supplied (companion file or 5.npy)".to_owned()
            ))
        );

        let mut pre = PreSuppliedInputs::new();
        let decreasing =
            DenseTensor::from_vec(vec![0i32, 256, 128], vec![3, 1, 1, 1], vec![1, 1, 1, 1])
                .map_err(|e| e.to_string());
        pre.insert(5, Arc::new(decreasing.unwrap_or_else(|e| panic!("{e}"))));
        let invalid = q.map(|q| allocate(q, &pre).err());
        assert_eq!(
            invalid,
            Ok(Some(
                "ragged_offset[2] = 128 is below ragged_offset[1] = 256".to_owned()
            )),
            "the kernel's message alone: the caller adds the file and uid"
        );
    }
}
