//! Semantics of the ragged tensor types (RFC §4.5–4.7) through the public API.

use std::sync::Arc;

use half::f16;
use ragged_core::tensor::{RaggedLayout, packed_strides, read_offset};
use ragged_core::{
    BSHD_SEQ_AXIS, DataType, DenseTensor, Element, HostData, HostDataMut, KernelError,
    RaggedTensor, ShallowRaggedTensor, ShallowRaggedTensorMut, Tensor, TensorExt, TensorMutExt,
    read_scalar_f32,
};

const H: i64 = 2;
const D: i64 = 3;
const ROW: i64 = H * D;

fn aux_i32(values: &[i32]) -> Arc<dyn Tensor> {
    let dims = vec![values.len() as i64, 1, 1, 1];
    Arc::new(DenseTensor::from_vec(values.to_vec(), dims.clone(), packed_strides(&dims)).unwrap())
}

fn aux_i64(values: &[i64]) -> Arc<dyn Tensor> {
    let dims = vec![values.len() as i64, 1, 1, 1];
    Arc::new(DenseTensor::from_vec(values.to_vec(), dims.clone(), packed_strides(&dims)).unwrap())
}

/// Three batches of 2, 0 and 3 rows, S_max = 4, [B, S, H, D] packed.
fn dims() -> (Vec<i64>, Vec<i64>) {
    let dims = vec![3, 4, H, D];
    let strides = packed_strides(&dims);
    (dims, strides)
}

fn offsets() -> Vec<i32> {
    vec![0, 2 * ROW as i32, 2 * ROW as i32, 5 * ROW as i32]
}

fn example() -> RaggedTensor<f32> {
    let (dims, strides) = dims();
    RaggedTensor::new(dims, strides, BSHD_SEQ_AXIS, aux_i32(&offsets()), 1, None).unwrap()
}

#[test]
fn counts_follow_the_offsets_not_the_padded_dims() {
    let t = example();
    assert_eq!(t.dims(), &[3, 4, H, D]);
    assert_eq!(t.element_count(), 5 * ROW as usize);
    assert_eq!(t.element_space(), 5 * ROW as usize);
    assert!(!t.is_packed());
    assert_eq!(t.as_slice().len(), 30);
}

#[test]
fn iteration_visits_every_batch_range_exactly_once_in_order() {
    let t = example();
    let visited: Vec<Vec<i64>> = t.indices().collect();
    assert_eq!(visited.len(), t.element_count());
    assert_eq!(visited.first(), Some(&vec![0, 0, 0, 0]));
    assert_eq!(
        visited[ROW as usize * 2],
        vec![2, 0, 0, 0],
        "batch 1 is empty"
    );
    assert_eq!(visited.last(), Some(&vec![2, 2, H - 1, D - 1]));
    let positions: Vec<usize> = visited.iter().map(|i| t.get_index(i).unwrap()).collect();
    assert_eq!(positions, (0..30).collect::<Vec<_>>());
}

#[test]
fn dense_iteration_is_row_major_over_dims() {
    let t = DenseTensor::<f32>::packed(vec![2, 1, 3]).unwrap();
    let visited: Vec<Vec<i64>> = t.indices().collect();
    assert_eq!(
        visited,
        vec![
            vec![0, 0, 0],
            vec![0, 0, 1],
            vec![0, 0, 2],
            vec![1, 0, 0],
            vec![1, 0, 1],
            vec![1, 0, 2]
        ]
    );
    assert_eq!(
        DenseTensor::<f32>::packed(vec![2, 0])
            .unwrap()
            .indices()
            .count(),
        0
    );
}

#[test]
fn addressing_bases_each_batch_at_its_offset() {
    let mut t = example();
    t.set(&[2, 1, 1, 2], 7.5f32).unwrap();
    // off[2] = 12, row 1 → +6, head 1 → +3, d 2 → +2.
    assert_eq!(t.as_slice()[12 + 6 + 3 + 2], 7.5);
    assert_eq!(t.get::<f32>(&[2, 1, 1, 2]).unwrap(), 7.5);
}

#[test]
fn access_beyond_a_batch_extent_is_an_error_even_below_s_max() {
    let t = example();
    assert_eq!(
        t.get::<f32>(&[0, 2, 0, 0]).unwrap_err(),
        KernelError::SeqIndexOutOfBounds {
            batch: 0,
            index: 2,
            extent: 2
        }
    );
    assert_eq!(
        t.get::<f32>(&[1, 0, 0, 0]).unwrap_err(),
        KernelError::SeqIndexOutOfBounds {
            batch: 1,
            index: 0,
            extent: 0
        }
    );
    assert_eq!(
        t.get::<f32>(&[3, 0, 0, 0]).unwrap_err(),
        KernelError::IndexOutOfBounds {
            axis: 0,
            index: 3,
            extent: 3
        }
    );
    assert_eq!(
        t.get::<f32>(&[0, 0, 2, 0]).unwrap_err(),
        KernelError::IndexOutOfBounds {
            axis: 2,
            index: 2,
            extent: H
        }
    );
    let message = t.get::<f32>(&[0, 2, 0, 0]).unwrap_err().to_string();
    assert_eq!(message, "sequence index 2 is outside batch 0's extent 0..2");
}

#[test]
fn int64_offsets_and_token_multipliers_address_the_same_elements() {
    let (dims, strides) = dims();
    let elements = example();
    let wide = RaggedTensor::<f32>::new(
        dims.clone(),
        strides.clone(),
        BSHD_SEQ_AXIS,
        aux_i64(&[0, 12, 12, 30]),
        1,
        None,
    )
    .unwrap();
    let tokens = RaggedTensor::<f32>::new(
        dims,
        strides,
        BSHD_SEQ_AXIS,
        aux_i32(&[0, 2, 2, 5]),
        ROW,
        None,
    )
    .unwrap();
    for index in elements.indices() {
        let expected = elements.get_index(&index).unwrap();
        assert_eq!(wide.get_index(&index).unwrap(), expected);
        assert_eq!(tokens.get_index(&index).unwrap(), expected);
    }
    assert_eq!(tokens.element_count(), 30);
    assert_eq!(
        read_offset(tokens.ragged_offset().as_ref(), 3, ROW).unwrap(),
        30
    );
    assert_eq!(
        read_offset(wide.ragged_offset().as_ref(), 1, 1).unwrap(),
        12
    );
}

#[test]
fn two_primaries_share_one_aux() {
    let (dims, strides) = dims();
    let aux = aux_i32(&offsets());
    let q = RaggedTensor::<f32>::new(dims.clone(), strides.clone(), 1, Arc::clone(&aux), 1, None)
        .unwrap();
    let o = RaggedTensor::<f16>::new(dims, strides, 1, Arc::clone(&aux), 1, None).unwrap();
    assert_eq!(Arc::strong_count(&aux), 3);
    assert!(Arc::ptr_eq(q.ragged_offset(), o.ragged_offset()));
    assert_eq!(q.element_count(), o.element_count());
}

#[test]
fn random_fill_is_byte_identical_per_seed_across_owning_and_shallow() {
    let (dims, strides) = dims();
    let mut owning = example();
    owning.fill_random(42);
    let mut buffer = vec![0.0f32; 30];
    let mut shallow = ShallowRaggedTensorMut::new(
        HostDataMut::F32(&mut buffer),
        dims,
        strides,
        BSHD_SEQ_AXIS,
        aux_i32(&offsets()),
        1,
    )
    .unwrap();
    shallow.fill_random(42);
    drop(shallow);
    let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(owning.as_slice()), bits(&buffer));
    assert!(buffer.iter().all(|x| (-1.0..1.0).contains(x)));
    let mut other = example();
    other.fill_random(43);
    assert_ne!(bits(owning.as_slice()), bits(other.as_slice()));
}

#[test]
fn value_and_sentinel_fills_cover_only_the_batch_ranges() {
    let (dims, strides) = dims();
    // A buffer two elements longer than ragged_offset[B]: the tail is not the tensor's.
    let mut t =
        RaggedTensor::<f32>::new(dims, strides, 1, aux_i32(&offsets()), 1, Some(32)).unwrap();
    assert_eq!((t.element_count(), t.element_space()), (30, 32));
    t.fill_value(2.5);
    assert!(t.as_slice()[..30].iter().all(|&x| x == 2.5));
    assert_eq!(&t.as_slice()[30..], &[0.0, 0.0]);
    t.fill_sentinel();
    assert!(
        t.as_slice()[..30]
            .iter()
            .all(|x| x.to_bits() == f32::sentinel().to_bits())
    );
    assert_eq!(&t.as_slice()[30..], &[0.0, 0.0]);
}

#[test]
fn shallow_ragged_tensor_over_a_c_pointer_reads_the_borrowed_buffer() {
    let (dims, strides) = dims();
    let buffer: Vec<f32> = (0..30).map(|i| i as f32).collect();
    // SAFETY: `buffer` outlives the view and is not written while it exists.
    let view = unsafe {
        ShallowRaggedTensor::from_raw(
            buffer.as_ptr().cast(),
            DataType::F32,
            buffer.len() * 4,
            dims,
            strides,
            BSHD_SEQ_AXIS,
            aux_i32(&offsets()),
            1,
        )
    }
    .unwrap();
    assert_eq!(view.get::<f32>(&[2, 0, 0, 0]).unwrap(), 12.0);
    assert!(matches!(view.host_data(), HostData::F32(s) if s.len() == 30));
    assert_eq!(view.layout().extent(2), 3);
    assert_eq!(view.layout().offset(2), 12);
}

#[test]
fn the_layout_snapshot_is_reported_for_iteration() {
    let t = example();
    let info = t.ragged_iteration_info().unwrap();
    assert_eq!(&*info.row_offsets, &[0, 12, 12, 30]);
    assert_eq!((info.seq_axis, info.seq_stride), (1, ROW));
    assert_eq!((info.extent(0), info.extent(1), info.extent(2)), (2, 0, 3));
    let layout = RaggedLayout::new(dims().0, dims().1, 1, aux_i32(&offsets()), 1).unwrap();
    assert_eq!(layout.total_elements(), 30);
}

#[test]
fn scalar_tensors_of_any_float_type_read_as_f32() {
    let half = DenseTensor::from_vec(
        vec![f16::from_f32(0.125)],
        vec![1, 1, 1, 1],
        vec![1, 1, 1, 1],
    )
    .unwrap();
    assert_eq!(read_scalar_f32(&half).unwrap(), 0.125);
    let two = DenseTensor::<f32>::packed(vec![2]).unwrap();
    assert_eq!(
        read_scalar_f32(&two).unwrap_err().to_string(),
        "scalar: 2 elements, expected a scalar (1 element)"
    );
    let int = DenseTensor::<i32>::packed(vec![1]).unwrap();
    assert!(matches!(
        read_scalar_f32(&int).unwrap_err(),
        KernelError::SdpaDataType {
            dtype: DataType::I32,
            ..
        }
    ));
}

/// Construction validates whole rows per batch but not the head and head-dim strides, so an index
/// inside every dim can still reach past its batch: that must be an error, not the next batch's
/// element.
#[test]
fn an_index_whose_strides_leave_its_batch_is_an_error() {
    // B = 2, S_max = 2, H = 2, D = 2; rows 2 elements apart but heads 4 apart.
    let dims = vec![2, 2, 2, 2];
    let strides = vec![8, 2, 4, 1];
    let t = RaggedTensor::<f32>::new(dims, strides, BSHD_SEQ_AXIS, aux_i32(&[0, 4, 8]), 1, None)
        .unwrap();
    assert_eq!(t.get_index(&[0, 1, 0, 1]).unwrap(), 3);
    // 0 + 1·2 + 1·4 + 1 = 7 lies in batch 1's range 4..8.
    let error = t.get_index(&[0, 1, 1, 1]).unwrap_err();
    assert_eq!(
        error,
        KernelError::ElementOutsideBatch {
            index: vec![0, 1, 1, 1],
            batch: 0,
            position: 7,
            start: 0,
            next_batch: 1,
            limit: 4,
        }
    );
    assert_eq!(
        error.to_string(),
        "index [0, 1, 1, 1] of batch 0 addresses element 7, outside \
         ragged_offset[0]..ragged_offset[1] = 0..4"
    );
}

#[test]
fn an_index_whose_position_overflows_int64_is_an_error() {
    let dims = vec![1, 1, 2, 2];
    let strides = vec![1, 1, i64::MAX, i64::MAX];
    let t =
        RaggedTensor::<f32>::new(dims, strides, BSHD_SEQ_AXIS, aux_i32(&[0, 1]), 1, None).unwrap();
    assert_eq!(
        t.get_index(&[0, 0, 1, 1]).unwrap_err(),
        KernelError::Overflow {
            what: "element position"
        }
    );
}

/// An aux whose element count equals its span but whose strides alias two elements is not
/// packed: reading it as a flat B + 1 array would use values its own indexing never shows.
#[test]
fn an_aux_with_aliasing_strides_is_not_packed() {
    let aux: Arc<dyn Tensor> =
        Arc::new(DenseTensor::from_vec(vec![0i32; 8], vec![2, 2, 2, 1], vec![1, 1, 5, 1]).unwrap());
    let dims = vec![7, 1, 1, 1];
    let strides = packed_strides(&dims);
    assert_eq!(
        RaggedTensor::<f32>::new(dims, strides, BSHD_SEQ_AXIS, aux, 1, None).unwrap_err(),
        KernelError::AuxNotPacked {
            dims: vec![2, 2, 2, 1],
            strides: vec![1, 1, 5, 1]
        }
    );
}
