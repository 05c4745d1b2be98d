//! RFC §4.11.1–§4.11.3: the pre-supplied input bundle, the strict `ragged_offset` check,
//! allocation (ragged primaries sized `ragged_offset[B]`) and the one-pass init.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use half::{bf16, f16};
use ragged_core::tensor::{
    Dense, DenseTensor, Ragged, RaggedLayout, RaggedTensor, Storage, StorageMut, Tensor, TensorMut,
    TensorMutExt, dense_element_space,
};
use ragged_core::{DataType as KernelType, Element, Fp8Format, HostData, HostDataMut, KernelError};
use ragged_schema::model::{DataType, Graph, TensorAttributes};

use crate::host_error::HostError;

/// Tensors the test author supplies, keyed by uid (RFC `PreSuppliedInputs`). Shared ownership
/// lets one aux serve every ragged primary that names it, and both execution paths.
pub type PreSuppliedInputs = HashMap<i64, Arc<dyn Tensor>>;

/// One uid's tensor in a bundle.
pub enum Entry {
    /// From the pre-supplied bundle: the same object in every bundle, never written.
    Shared(Arc<dyn Tensor>),
    /// Allocated by this bundle.
    Owned(Box<dyn TensorMut>),
}

impl Entry {
    pub fn tensor(&self) -> &dyn Tensor {
        match self {
            Entry::Shared(t) => t.as_ref(),
            Entry::Owned(t) => t.as_ref(),
        }
    }
}

/// Every tensor of a graph, resolved pre-supplied-first (RFC `GraphTensorBundle`). Virtual
/// intermediates are kept apart: they never enter a variant pack (the engine allocates its own,
/// as the RFC's executor does), but the reference path writes them and validation reads them.
pub struct Bundle {
    pub entries: BTreeMap<i64, Entry>,
    /// Virtual tensors, allocated like the executor's pass (RFC §4.10.1): ragged ones on the
    /// real aux their attribute names, never a synthesized one; sentinel-filled at init.
    pub virtuals: BTreeMap<i64, Box<dyn TensorMut>>,
}

/// The tensor SDK's element type for a graph data type: the five it stores as numbers and the
/// four FP8 data formats it stores as codes (FP8_E8M0 is a scale format, not a data format).
pub fn kernel_type(attrs: &TensorAttributes) -> Result<KernelType, HostError> {
    Ok(match attrs.data_type {
        DataType::Float => KernelType::F32,
        DataType::Half => KernelType::F16,
        DataType::BFloat16 => KernelType::BF16,
        DataType::Int32 => KernelType::I32,
        DataType::Int64 => KernelType::I64,
        DataType::Fp8E4m3 => KernelType::Fp8(Fp8Format::E4M3),
        DataType::Fp8E5m2 => KernelType::Fp8(Fp8Format::E5M2),
        DataType::Fp8E4m3Fnuz => KernelType::Fp8(Fp8Format::E4M3Fnuz),
        DataType::Fp8E5m2Fnuz => KernelType::Fp8(Fp8Format::E5M2Fnuz),
        other => {
            return Err(HostError::Harness(format!(
                "tensor uid {} has data_type {other:?}, which the harness cannot allocate",
                attrs.uid
            )));
        }
    })
}

/// RFC §4.11.1 strict check: every `ragged_offset` uid a tensor references — input, output or
/// virtual intermediate — must be pre-supplied, because random offsets are structurally invalid,
/// and (RFC §4.9) must name a real tensor of the graph: an intermediate reuses an existing aux.
pub fn check_ragged_offsets_supplied(
    graph: &Graph,
    pre_supplied: &PreSuppliedInputs,
) -> Result<(), HostError> {
    for t in &graph.tensors {
        let Some(aux) = t.ragged_offset_tensor_uid else {
            continue;
        };
        let kind = if t.is_virtual { "virtual " } else { "" };
        match graph.tensor(aux) {
            None => {
                return Err(HostError::Harness(format!(
                    "ragged_offset uid {aux} (referenced by {kind}tensor uid {} '{}') is not a tensor of the graph",
                    t.uid, t.name
                )));
            }
            Some(a) if a.is_virtual => {
                return Err(HostError::Harness(format!(
                    "ragged_offset uid {aux} (referenced by {kind}tensor uid {} '{}') is virtual; \
                     an aux must be a real tensor of the graph",
                    t.uid, t.name
                )));
            }
            Some(_) => {}
        }
        if !pre_supplied.contains_key(&aux) {
            return Err(HostError::Harness(format!(
                "ragged_offset uid {aux} (referenced by {kind}tensor uid {} '{}') is not in the pre-supplied inputs; \
                 ragged offsets cannot be randomised, supply them",
                t.uid, t.name
            )));
        }
    }
    Ok(())
}

impl Bundle {
    /// RFC §4.11.2: allocates every non-pre-supplied tensor; ragged primaries are built on
    /// their shared aux and sized `ragged_offset[B]` (× multiplier). Virtual tensors go to
    /// [`Bundle::virtuals`] by the same factory, so an intermediate is sized exactly as a real
    /// tensor of its attributes would be.
    pub fn allocate(graph: &Graph, pre_supplied: &PreSuppliedInputs) -> Result<Bundle, HostError> {
        check_ragged_offsets_supplied(graph, pre_supplied)?;
        let mut entries = BTreeMap::new();
        let mut virtuals = BTreeMap::new();
        for attrs in &graph.tensors {
            if attrs.is_virtual {
                virtuals.insert(
                    attrs.uid,
                    create_tensor_from_attribute(attrs, pre_supplied)?,
                );
                continue;
            }
            let entry = match pre_supplied.get(&attrs.uid) {
                Some(shared) => Entry::Shared(Arc::clone(shared)),
                None => Entry::Owned(create_tensor_from_attribute(attrs, pre_supplied)?),
            };
            entries.insert(attrs.uid, entry);
        }
        Ok(Bundle { entries, virtuals })
    }

    /// RFC §4.11.3 init pass. Pre-supplied: untouched. Outputs: sentinel (the RFC says so for
    /// ragged outputs; dense outputs get it too, because SDPA leaves their padding rows unwritten
    /// as well). Other inputs: uniform random from `seed` mixed with the uid, so two bundles
    /// initialised with the same seed are byte-identical.
    /// Virtual tensors get the sentinel, as the executor's pass fills them.
    pub fn initialise(&mut self, outputs: &BTreeSet<i64>, seed: u64) {
        for tensor in self.virtuals.values_mut() {
            tensor.fill_sentinel();
        }
        for (uid, entry) in &mut self.entries {
            if let Entry::Owned(tensor) = entry {
                if outputs.contains(uid) {
                    tensor.fill_sentinel();
                } else {
                    tensor.fill_random(seed ^ (*uid as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                }
            }
        }
    }

    /// A real tensor, else a virtual one.
    pub fn get(&self, uid: i64) -> Result<&dyn Tensor, HostError> {
        self.entries
            .get(&uid)
            .map(Entry::tensor)
            .or_else(|| self.virtuals.get(&uid).map(|t| t.as_ref() as &dyn Tensor))
            .ok_or_else(|| HostError::Harness(format!("tensor uid {uid} is not in the bundle")))
    }

    /// The writable buffer of an output or a virtual tensor (what a node writes).
    pub fn writable(&mut self, uid: i64) -> Result<&mut dyn TensorMut, HostError> {
        if let Some(t) = self.virtuals.get_mut(&uid) {
            return Ok(t.as_mut());
        }
        match self.entries.get_mut(&uid) {
            Some(Entry::Owned(t)) => Ok(t.as_mut()),
            Some(Entry::Shared(_)) => Err(HostError::Harness(format!(
                "tensor uid {uid} is pre-supplied, so it cannot be an output"
            ))),
            None => Err(HostError::Harness(format!(
                "tensor uid {uid} is not in the bundle"
            ))),
        }
    }

    /// Takes an owned (writable) entry out, for an operation that needs `&mut` to it while
    /// reading others; put it back with [`Bundle::restore`].
    pub fn take_owned(&mut self, uid: i64) -> Result<Box<dyn TensorMut>, HostError> {
        match self.entries.remove(&uid) {
            Some(Entry::Owned(t)) => Ok(t),
            Some(shared @ Entry::Shared(_)) => {
                self.entries.insert(uid, shared);
                Err(HostError::Harness(format!(
                    "tensor uid {uid} is pre-supplied, so it cannot be an output"
                )))
            }
            None => Err(HostError::Harness(format!(
                "tensor uid {uid} is not in the bundle"
            ))),
        }
    }

    pub fn restore(&mut self, uid: i64, tensor: Box<dyn TensorMut>) {
        self.entries.insert(uid, Entry::Owned(tensor));
    }
}

/// RFC §4.10.1's `createTensorFromAttribute`: an owning tensor, zero-filled, shaped as `attrs`
/// says. A dense tensor is sized by dims and strides; a ragged primary by its `ragged_offset`
/// aux, which must already be in `pre_supplied` (random offsets would be structurally invalid).
/// The one place the harness and `hipdnn-shim` turn attributes into storage, so both size ragged
/// tensors identically.
pub fn create_tensor_from_attribute(
    attrs: &TensorAttributes,
    pre_supplied: &PreSuppliedInputs,
) -> Result<Box<dyn TensorMut>, HostError> {
    let dtype = kernel_type(attrs)?;
    let allocation = |source| HostError::Allocation {
        uid: attrs.uid,
        name: attrs.name.clone(),
        source,
    };
    match attrs.ragged_offset_tensor_uid {
        None => match dtype {
            KernelType::F32 => dense::<f32>(attrs),
            KernelType::F16 => dense::<f16>(attrs),
            KernelType::BF16 => dense::<bf16>(attrs),
            KernelType::I32 => dense::<i32>(attrs),
            KernelType::I64 => dense::<i64>(attrs),
            KernelType::Fp8(format) => dense_fp8(attrs, format),
        }
        .map_err(allocation),
        Some(aux_uid) => {
            let aux = pre_supplied
                .get(&aux_uid)
                .ok_or(HostError::RaggedOffsetNotSupplied {
                    uid: attrs.uid,
                    aux_uid,
                })?;
            match dtype {
                KernelType::F32 => ragged::<f32>(attrs, aux),
                KernelType::F16 => ragged::<f16>(attrs, aux),
                KernelType::BF16 => ragged::<bf16>(attrs, aux),
                KernelType::I32 => ragged::<i32>(attrs, aux),
                KernelType::I64 => ragged::<i64>(attrs, aux),
                KernelType::Fp8(format) => ragged_fp8(attrs, aux, format),
            }
            .map_err(allocation)
        }
    }
}

/// An owning buffer of FP8 codes: the SDK's owning tensors are generic over numeric element
/// types, and a code means nothing without its format, so the format travels with the bytes.
#[derive(Debug, Clone)]
pub struct Fp8Codes {
    format: Fp8Format,
    codes: Vec<u8>,
}

impl Fp8Codes {
    /// `len` zero codes (the value 0 in every format).
    pub fn zeroed(format: Fp8Format, len: usize) -> Fp8Codes {
        Fp8Codes {
            format,
            codes: vec![0; len],
        }
    }
}

impl Storage for Fp8Codes {
    fn view(&self) -> HostData<'_> {
        HostData::Fp8(self.format, &self.codes)
    }
}

impl StorageMut for Fp8Codes {
    fn view_mut(&mut self) -> HostDataMut<'_> {
        HostDataMut::Fp8(self.format, &mut self.codes)
    }
}

fn dense_fp8(a: &TensorAttributes, format: Fp8Format) -> Result<Box<dyn TensorMut>, KernelError> {
    let space = dense_element_space(&a.dims, &a.strides)?;
    Ok(Box::new(Dense::from_storage(
        Fp8Codes::zeroed(format, space),
        a.dims.clone(),
        a.strides.clone(),
    )?))
}

fn ragged_fp8(
    a: &TensorAttributes,
    aux: &Arc<dyn Tensor>,
    format: Fp8Format,
) -> Result<Box<dyn TensorMut>, KernelError> {
    let layout = RaggedLayout::new(
        a.dims.clone(),
        a.strides.clone(),
        3 - a.sdpa_head_axis(),
        Arc::clone(aux),
        a.ragged_offset_multiplier,
    )?;
    let len = usize::try_from(layout.total_elements()).map_err(|_| KernelError::Overflow {
        what: "ragged FP8 tensor elements",
    })?;
    Ok(Box::new(Ragged::from_layout(
        Fp8Codes::zeroed(format, len),
        layout,
    )?))
}

fn dense<T: Element>(a: &TensorAttributes) -> Result<Box<dyn TensorMut>, KernelError> {
    Ok(Box::new(DenseTensor::<T>::new(
        a.dims.clone(),
        a.strides.clone(),
    )?))
}

fn ragged<T: Element>(
    a: &TensorAttributes,
    aux: &Arc<dyn Tensor>,
) -> Result<Box<dyn TensorMut>, KernelError> {
    Ok(Box::new(RaggedTensor::<T>::new(
        a.dims.clone(),
        a.strides.clone(),
        3 - a.sdpa_head_axis(),
        Arc::clone(aux),
        a.ragged_offset_multiplier,
        None,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::RaggedSdpaSpec;

    #[test]
    fn strict_check_names_the_missing_offset_uid_and_its_primary() {
        let graph = RaggedSdpaSpec::packed("t", &[2, 3], &[4, 1]).graph();
        let err = match Bundle::allocate(&graph, &PreSuppliedInputs::new()) {
            Ok(_) => panic!("allocation without offsets must fail"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.starts_with("ragged_offset uid 5 (referenced by tensor uid 1 'q')"),
            "{err}"
        );
    }

    #[test]
    fn the_factory_names_the_tensor_in_each_error() {
        let graph = RaggedSdpaSpec::packed("t", &[2, 3], &[4, 1]).graph();
        let q = graph.tensor(1).unwrap_or_else(|| panic!("q is uid 1"));
        let missing = create_tensor_from_attribute(q, &PreSuppliedInputs::new()).err();
        assert!(
            matches!(
                missing,
                Some(HostError::RaggedOffsetNotSupplied { uid: 1, aux_uid: 5 })
            ),
            "{missing:?}"
        );

        let mut pre = PreSuppliedInputs::new();
        let decreasing: Arc<dyn Tensor> = Arc::new(
            DenseTensor::from_vec(vec![0i32, 256, 128], vec![3, 1, 1, 1], vec![1, 1, 1, 1])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        pre.insert(5, decreasing);
        let invalid = create_tensor_from_attribute(q, &pre).err();
        let message = invalid
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            matches!(invalid, Some(HostError::Allocation { uid: 1, .. }))
                && message.starts_with("allocating tensor uid 1 'q': "),
            "{message}"
        );

        let mut int8 = q.clone();
        int8.data_type = DataType::Int8;
        let unstorable = create_tensor_from_attribute(&int8, &pre).err();
        assert!(
            unstorable
                .map(|e| e.to_string())
                .is_some_and(|m| m.starts_with("tensor uid 1 has data_type")),
        );
    }

    #[test]
    fn the_factory_sizes_a_dense_tensor_by_its_strides() {
        let attrs = TensorAttributes::new()
            .set_uid(9)
            .set_data_type(DataType::Half)
            .set_dims(vec![2, 3, 1, 1])
            .set_strides(vec![4, 1, 1, 1]);
        let tensor = create_tensor_from_attribute(&attrs, &PreSuppliedInputs::new())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tensor.data_type(), KernelType::F16);
        assert_eq!((tensor.element_count(), tensor.element_space()), (6, 7));
    }

    #[test]
    fn ragged_primaries_are_sized_by_the_last_offset() {
        let spec = RaggedSdpaSpec::packed("t", &[2, 0, 3], &[4, 1, 1]);
        let graph = spec.graph();
        let mut pre = PreSuppliedInputs::new();
        let aux = |v: Vec<i32>| -> Arc<dyn Tensor> {
            let n = v.len() as i64;
            Arc::new(
                DenseTensor::from_vec(v, vec![n, 1, 1, 1], vec![1, 1, 1, 1])
                    .unwrap_or_else(|e| panic!("{e}")),
            )
        };
        // Q/O: 2+0+3 tokens x 2 heads x 64 = 640 elements; K/V: 4+1+1 tokens = 768.
        pre.insert(5, aux(vec![0, 256, 256, 640]));
        pre.insert(6, aux(vec![0, 512, 640, 768]));
        let bundle = Bundle::allocate(&graph, &pre).unwrap_or_else(|e| panic!("{e}"));
        let len = |uid| bundle.get(uid).map(|t| t.host_data().len()).unwrap_or(0);
        assert_eq!((len(1), len(2), len(3), len(4)), (640, 768, 768, 640));
        assert!(matches!(bundle.entries.get(&5), Some(Entry::Shared(_))));
    }
}
