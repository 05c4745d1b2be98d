//! One test per validation error: ragged construction (RFC §4.5 item 5) and SDPA operands
//! (ragged-sdpa.md §3, §4). Each asserts the exact variant and values the error names.

use std::sync::Arc;

use half::f16;
use ragged_core::tensor::packed_strides;
use ragged_core::{
    BSHD_SEQ_AXIS, DataType, DenseTensor, HostData, KernelError, RaggedTensor, Role,
    ShallowRaggedTensor, Tensor, TensorMut, TensorMutExt,
};
use ragged_reference::{SdpaParams, sdpa_forward};

fn aux<T: ragged_core::Element>(values: &[T], dims: Vec<i64>) -> Arc<dyn Tensor> {
    let strides = packed_strides(&dims);
    Arc::new(DenseTensor::from_vec(values.to_vec(), dims, strides).unwrap())
}

fn aux4(values: &[i32]) -> Arc<dyn Tensor> {
    aux(values, vec![values.len() as i64, 1, 1, 1])
}

/// B = 2, S_max = 3, H = 1, D = 2 (row = 2 elements).
fn ragged(offsets: &[i32]) -> Result<RaggedTensor<f32>, KernelError> {
    ragged_with(
        vec![2, 3, 1, 2],
        vec![6, 2, 2, 1],
        BSHD_SEQ_AXIS,
        aux4(offsets),
        1,
    )
}

fn ragged_with(
    dims: Vec<i64>,
    strides: Vec<i64>,
    seq_axis: usize,
    aux: Arc<dyn Tensor>,
    multiplier: i64,
) -> Result<RaggedTensor<f32>, KernelError> {
    RaggedTensor::new(dims, strides, seq_axis, aux, multiplier, None)
}

// ---- ragged construction: structural pass ------------------------------------------------

#[test]
fn empty_dims() {
    let err = ragged_with(vec![], vec![], 1, aux4(&[0]), 1).unwrap_err();
    assert_eq!(err, KernelError::RaggedDimsEmpty);
}

#[test]
fn dims_and_strides_differ_in_length() {
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 1], 1, aux4(&[0, 2, 4]), 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::StridesRankMismatch {
            dims: 4,
            strides: 3
        }
    );
}

#[test]
fn negative_dim() {
    let err = ragged_with(vec![2, 3, -1, 2], vec![6, 2, 2, 1], 1, aux4(&[0, 2, 4]), 1).unwrap_err();
    assert_eq!(err, KernelError::NegativeDim { axis: 2, value: -1 });
}

#[test]
fn negative_non_sequence_stride() {
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, -1], 1, aux4(&[0, 2, 4]), 1).unwrap_err();
    assert_eq!(err, KernelError::NegativeStride { axis: 3, value: -1 });
}

#[test]
fn sequence_axis_outside_the_non_batch_axes() {
    for seq_axis in [0, 4] {
        let err = ragged_with(
            vec![2, 3, 1, 2],
            vec![6, 2, 2, 1],
            seq_axis,
            aux4(&[0, 2, 4]),
            1,
        )
        .unwrap_err();
        assert_eq!(err, KernelError::SeqAxisOutOfRange { seq_axis, rank: 4 });
    }
}

#[test]
fn aux_without_b_plus_one_elements() {
    let err = ragged(&[0, 2]).unwrap_err();
    assert_eq!(
        err,
        KernelError::AuxElementCount {
            expected: 3,
            actual: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "ragged_offset has 2 elements, expected B + 1 = 3"
    );
}

#[test]
fn aux_not_rank_4() {
    let err = ragged_with(
        vec![2, 3, 1, 2],
        vec![6, 2, 2, 1],
        1,
        aux(&[0, 2, 4], vec![3]),
        1,
    )
    .unwrap_err();
    assert_eq!(err, KernelError::AuxRank { rank: 1 });
}

#[test]
fn aux_of_a_non_integer_type() {
    let floats = aux(&[0.0f32, 2.0, 4.0], vec![3, 1, 1, 1]);
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, 1], 1, floats, 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::AuxElementType {
            dtype: DataType::F32,
            size: 4
        }
    );
    let halves = aux(&[f16::ZERO, f16::ONE, f16::ONE], vec![3, 1, 1, 1]);
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, 1], 1, halves, 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::AuxElementType {
            dtype: DataType::F16,
            size: 2
        }
    );
}

#[test]
fn aux_not_packed() {
    let strided: Arc<dyn Tensor> = Arc::new(
        DenseTensor::from_vec(vec![0i32, 9, 2, 9, 4], vec![3, 1, 1, 1], vec![2, 1, 1, 1]).unwrap(),
    );
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, 1], 1, strided, 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::AuxNotPacked {
            dims: vec![3, 1, 1, 1],
            strides: vec![2, 1, 1, 1]
        }
    );
}

#[test]
fn multiplier_below_one() {
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, 1], 1, aux4(&[0, 2, 4]), 0).unwrap_err();
    assert_eq!(err, KernelError::MultiplierNotPositive { multiplier: 0 });
}

// ---- ragged construction: content pass ---------------------------------------------------

#[test]
fn offset_times_multiplier_overflows() {
    let big = aux(&[0i64, 2, i64::MAX / 2], vec![3, 1, 1, 1]);
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 2, 2, 1], 1, big, 4).unwrap_err();
    assert_eq!(
        err,
        KernelError::OffsetOverflow {
            batch: 2,
            stored: i64::MAX / 2,
            multiplier: 4
        }
    );
}

#[test]
fn first_offset_not_zero() {
    assert_eq!(
        ragged(&[2, 2, 4]).unwrap_err(),
        KernelError::FirstOffsetNotZero { value: 2 }
    );
}

#[test]
fn offsets_decrease() {
    let err = ragged(&[0, 4, 2]).unwrap_err();
    assert_eq!(
        err,
        KernelError::OffsetsDecrease {
            batch: 1,
            value: 4,
            next_batch: 2,
            next: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "ragged_offset[2] = 2 is below ragged_offset[1] = 4"
    );
}

#[test]
fn sequence_stride_not_positive() {
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, 0, 2, 1], 1, aux4(&[0, 2, 4]), 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::SeqStrideNotPositive {
            seq_axis: 1,
            stride: 0
        }
    );
    let err = ragged_with(vec![2, 3, 1, 2], vec![6, -2, 2, 1], 1, aux4(&[0, 2, 4]), 1).unwrap_err();
    assert_eq!(
        err,
        KernelError::SeqStrideNotPositive {
            seq_axis: 1,
            stride: -2
        }
    );
}

#[test]
fn batch_block_not_whole_rows() {
    let err = ragged(&[0, 2, 5]).unwrap_err();
    assert_eq!(
        err,
        KernelError::PartialRow {
            batch: 1,
            elements: 3,
            multiplier: 1,
            seq_stride: 2
        }
    );
}

#[test]
fn batch_extent_above_s_max() {
    let err = ragged(&[0, 8, 10]).unwrap_err();
    assert_eq!(
        err,
        KernelError::ExtentAboveMax {
            batch: 0,
            extent: 4,
            s_max: 3
        }
    );
}

#[test]
fn offsets_beyond_the_borrowed_buffer() {
    let buffer = [0.0f32; 5];
    let err = ShallowRaggedTensor::new(
        HostData::F32(&buffer),
        vec![2, 3, 1, 2],
        vec![6, 2, 2, 1],
        BSHD_SEQ_AXIS,
        aux4(&[0, 2, 6]),
        1,
    )
    .unwrap_err();
    assert_eq!(
        err,
        KernelError::OffsetsBeyondBuffer {
            total: 6,
            buffer_len: 5
        }
    );
    let err = RaggedTensor::<f32>::new(
        vec![2, 3, 1, 2],
        vec![6, 2, 2, 1],
        BSHD_SEQ_AXIS,
        aux4(&[0, 2, 6]),
        1,
        Some(4),
    )
    .unwrap_err();
    assert_eq!(
        err,
        KernelError::OffsetsBeyondBuffer {
            total: 6,
            buffer_len: 4
        }
    );
}

#[test]
fn callers_attach_the_graph_uid() {
    let err = ragged(&[2, 2, 4]).unwrap_err().for_tensor(17);
    assert_eq!(
        err.to_string(),
        "tensor uid 17: ragged_offset[0] = 2 (in elements), expected 0"
    );
}

// ---- SDPA operands ---------------------------------------------------------------------------

/// A valid problem: B = 2, Q/O ragged with extents [2, 3], K/V dense with S = 4, H_q = 2,
/// H_kv = 1, D = 4, f32.
struct Operands {
    q: Box<dyn TensorMut>,
    k: Box<dyn TensorMut>,
    v: Box<dyn TensorMut>,
    o: Box<dyn TensorMut>,
}

fn q_side(dims_h: i64, d: i64, offsets: &[i32]) -> Box<dyn TensorMut> {
    let dims = vec![2, 3, dims_h, d];
    let strides = packed_strides(&dims);
    let mut t =
        RaggedTensor::<f32>::new(dims, strides, 1, aux4(offsets), dims_h * d, None).unwrap();
    t.fill_random(1);
    Box::new(t)
}

fn dense(dims: Vec<i64>) -> Box<dyn TensorMut> {
    let mut t = DenseTensor::<f32>::packed(dims).unwrap();
    t.fill_random(2);
    Box::new(t)
}

fn valid() -> Operands {
    Operands {
        q: q_side(2, 4, &[0, 2, 5]),
        k: dense(vec![2, 1, 4, 4]),
        v: dense(vec![2, 1, 4, 4]),
        o: q_side(2, 4, &[0, 2, 5]),
    }
}

fn run(
    ops: &mut Operands,
    lse: Option<&mut dyn TensorMut>,
    slq: Option<&dyn Tensor>,
) -> Result<(), KernelError> {
    sdpa_forward(
        ops.q.as_ref(),
        ops.k.as_ref(),
        ops.v.as_ref(),
        ops.o.as_mut(),
        lse,
        slq,
        None,
        &SdpaParams::default(),
    )
}

fn lens(values: &[i32]) -> DenseTensor<i32> {
    let dims = vec![values.len() as i64, 1, 1, 1];
    DenseTensor::from_vec(values.to_vec(), dims.clone(), packed_strides(&dims)).unwrap()
}

#[test]
fn the_valid_problem_runs() {
    let mut ops = valid();
    run(&mut ops, None, None).unwrap();
}

#[test]
fn operand_not_rank_4() {
    let mut ops = valid();
    ops.k = dense(vec![2, 4, 4]);
    assert_eq!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::SdpaRank {
            role: Role::K,
            rank: 3
        }
    );
}

#[test]
fn element_types() {
    let mut ops = valid();
    ops.v = Box::new(DenseTensor::<f16>::packed(vec![2, 1, 4, 4]).unwrap());
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "V: element type f16, expected f32 (as Q)");

    let mut ops = valid();
    ops.q = Box::new(DenseTensor::<i32>::packed(vec![2, 2, 3, 4]).unwrap());
    assert!(matches!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::SdpaDataType {
            role: Role::Q,
            dtype: DataType::I32,
            ..
        }
    ));

    let mut ops = valid();
    let mut lse = DenseTensor::<f16>::packed(vec![2, 2, 3, 1]).unwrap();
    assert!(matches!(
        run(&mut ops, Some(&mut lse), None).unwrap_err(),
        KernelError::SdpaDataType {
            role: Role::Lse,
            dtype: DataType::F16,
            ..
        }
    ));

    let mut ops = valid();
    let float_lens = DenseTensor::<f32>::packed(vec![2, 1, 1, 1]).unwrap();
    assert!(matches!(
        run(&mut ops, None, Some(&float_lens)).unwrap_err(),
        KernelError::SdpaDataType {
            role: Role::SeqLenQ,
            dtype: DataType::F32,
            ..
        }
    ));
}

#[test]
fn batch_mismatch() {
    let mut ops = valid();
    ops.v = dense(vec![3, 1, 4, 4]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "V: batch = 3, expected 2 (as Q)");
}

#[test]
fn query_heads_not_a_multiple_of_kv_heads() {
    let mut ops = valid();
    ops.k = dense(vec![2, 3, 4, 4]);
    ops.v = dense(vec![2, 3, 4, 4]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "K: heads = 3, expected a divisor of H_q = 2"
    );
}

#[test]
fn value_heads_differ_from_key_heads() {
    let mut ops = valid();
    ops.v = dense(vec![2, 2, 4, 4]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "V: heads = 2, expected 1 (as K)");
}

#[test]
fn output_heads_differ_from_query_heads() {
    let mut ops = valid();
    ops.o = q_side(1, 8, &[0, 2, 5]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "O: heads = 1, expected 2 (as Q)");
}

#[test]
fn head_dims_disagree() {
    let mut ops = valid();
    ops.k = dense(vec![2, 1, 4, 3]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "K: head_dim = 3, expected 4 (as Q)");

    let mut ops = valid();
    ops.v = dense(vec![2, 1, 4, 2]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "O: head_dim = 4, expected 2 (as V)");
}

#[test]
fn empty_head_dims() {
    let mut ops = valid();
    ops.q = dense(vec![2, 2, 3, 0]);
    ops.k = dense(vec![2, 1, 4, 0]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "Q: head_dim = 0, expected at least 1");
    let mut ops = valid();
    ops.v = dense(vec![2, 1, 4, 0]);
    ops.o = dense(vec![2, 2, 3, 0]);
    let err = run(&mut ops, None, None).unwrap_err();
    assert_eq!(err.to_string(), "V: head_dim = 0, expected at least 1");
}

#[test]
fn lse_last_dim_not_one() {
    let mut ops = valid();
    let mut lse = DenseTensor::<f32>::packed(vec![2, 2, 3, 2]).unwrap();
    let err = run(&mut ops, Some(&mut lse), None).unwrap_err();
    assert_eq!(err.to_string(), "LSE: last dim = 2, expected 1");
}

#[test]
fn ragged_operand_whose_sequence_axis_is_the_head_dim() {
    // Axes 1 and 2 are both legal sequence axes (the two upstream dims orders); axis 3 is not.
    let mut ops = valid();
    let dims = vec![2, 2, 2, 8];
    let strides = vec![32, 4, 2, 1];
    ops.q =
        Box::new(RaggedTensor::<f32>::new(dims, strides, 3, aux4(&[0, 8, 16]), 1, None).unwrap());
    assert_eq!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::SdpaSeqAxis {
            role: Role::Q,
            seq_axis: 3
        }
    );
}

#[test]
fn ragged_rows_spill_into_the_next_batch() {
    let mut ops = valid();
    // Head stride 5 instead of 4: each row reaches one element past its 8-element slot.
    let dims = vec![2, 3, 2, 4];
    ops.q = Box::new(
        RaggedTensor::<f32>::new(dims, vec![24, 8, 5, 1], 1, aux4(&[0, 16, 40]), 1, Some(41))
            .unwrap(),
    );
    assert_eq!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::RowsOutsideBatch {
            role: Role::Q,
            batch: 0,
            end: 17,
            next_batch: 1,
            limit: 16
        }
    );
}

#[test]
fn ragged_query_and_output_split_batches_differently() {
    let mut ops = valid();
    ops.o = q_side(2, 4, &[0, 3, 5]);
    assert_eq!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::ExtentMismatch {
            role: Role::O,
            batch: 0,
            extent: 3,
            other: Role::Q,
            other_extent: 2
        }
    );
}

#[test]
fn dense_output_shorter_than_the_query_rows() {
    let mut ops = valid();
    ops.o = dense(vec![2, 2, 2, 4]);
    assert_eq!(
        run(&mut ops, None, None).unwrap_err(),
        KernelError::RowsBeyondExtent {
            role: Role::O,
            batch: 1,
            extent: 2,
            rows: 3,
            source_role: Role::Q
        }
    );
}

#[test]
fn seq_lens_outside_the_extent() {
    let mut ops = valid();
    let err = run(&mut ops, None, Some(&lens(&[2, 4]))).unwrap_err();
    assert_eq!(
        err,
        KernelError::SeqLenOutOfRange {
            role: Role::SeqLenQ,
            batch: 1,
            value: 4,
            extent: 3
        }
    );
    assert_eq!(err.to_string(), "seq_len_q[1] = 4 is outside 0..=3");
    let err = run(&mut ops, None, Some(&lens(&[-1, 0]))).unwrap_err();
    assert_eq!(
        err,
        KernelError::SeqLenOutOfRange {
            role: Role::SeqLenQ,
            batch: 0,
            value: -1,
            extent: 2
        }
    );
}

#[test]
fn seq_lens_with_the_wrong_count() {
    let mut ops = valid();
    let err = run(&mut ops, None, Some(&lens(&[1, 1, 1]))).unwrap_err();
    assert!(matches!(
        err,
        KernelError::SdpaDim {
            role: Role::SeqLenQ,
            field: "element count",
            value: 3,
            ..
        }
    ));
}

/// A foreign tensor implementation reporting whatever geometry and counts a test gives it, so a
/// test can hand the CPU reference what no SDK constructor would build.
struct Foreign {
    dims: [i64; 4],
    strides: [i64; 4],
    element_count: usize,
    element_space: usize,
    data: Vec<f32>,
}

impl Tensor for Foreign {
    fn dims(&self) -> &[i64] {
        &self.dims
    }
    fn strides(&self) -> &[i64] {
        &self.strides
    }
    fn data_type(&self) -> DataType {
        DataType::F32
    }
    fn element_count(&self) -> usize {
        self.element_count
    }
    fn element_space(&self) -> usize {
        self.element_space
    }
    fn is_packed(&self) -> bool {
        false
    }
    fn host_data(&self) -> HostData<'_> {
        HostData::F32(&self.data)
    }
}

#[test]
fn operand_reaching_beyond_its_buffer() {
    let mut ops = valid();
    // Its geometry addresses 48 elements; the buffer holds 40.
    let lying = Foreign {
        dims: [2, 1, 4, 4],
        strides: [32, 16, 4, 1],
        element_count: 32,
        element_space: 48,
        data: vec![0.0; 40],
    };
    let err = sdpa_forward(
        ops.q.as_ref(),
        &lying,
        ops.v.as_ref(),
        ops.o.as_mut(),
        None,
        None,
        None,
        &SdpaParams::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        KernelError::BufferTooSmall {
            required: 48,
            available: 40
        }
    );
}

#[test]
fn a_batch_stride_whose_batch_bases_overflow_is_an_error() {
    let q = DenseTensor::<f32>::packed(vec![4, 1, 1, 4]).unwrap();
    // A batch stride that times the batch index overflows usize.
    let k = Foreign {
        dims: [4, 1, 1, 4],
        strides: [i64::MAX, 4, 4, 1],
        element_count: 16,
        element_space: 16,
        data: vec![0.0; 16],
    };
    let v = DenseTensor::<f32>::packed(vec![4, 1, 1, 4]).unwrap();
    let mut o = DenseTensor::<f32>::packed(vec![4, 1, 1, 4]).unwrap();
    let err = sdpa_forward(&q, &k, &v, &mut o, None, None, None, &SdpaParams::default());
    let err = err.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "K: batch stride = {}, expected (B - 1) · stride within 64 bits for B = 4",
            i64::MAX
        )
    );
}

/// K and V broadcast one element over 2^40 key rows through zero strides: the buffer is tiny, the
/// staged copy would be 2^46 f32. That must be an error, not an aborted process.
#[test]
fn a_staging_copy_too_large_to_allocate_is_an_error() {
    let rows = 1i64 << 40;
    let q = DenseTensor::<f32>::packed(vec![1, 1, 1, 64]).unwrap();
    let k =
        DenseTensor::<f32>::from_vec(vec![0.5], vec![1, 1, rows, 64], vec![0, 0, 0, 0]).unwrap();
    let v =
        DenseTensor::<f32>::from_vec(vec![0.5], vec![1, 1, rows, 64], vec![0, 0, 0, 0]).unwrap();
    let mut o = DenseTensor::<f32>::packed(vec![1, 1, 1, 64]).unwrap();
    o.fill_sentinel();
    let err = sdpa_forward(&q, &k, &v, &mut o, None, None, None, &SdpaParams::default());
    assert_eq!(
        err,
        Err(KernelError::StagingTooLarge {
            role: Role::K,
            elements: (1u64 << 46).to_string(),
        })
    );
    assert!(
        o.as_slice()
            .iter()
            .all(|x| x.to_bits() == ragged_core::dtype::SENTINEL_F32_BITS)
    );
}

#[test]
fn an_error_writes_nothing() {
    let mut ops = valid();
    ops.o.fill_sentinel();
    let mut lse = DenseTensor::<f32>::packed(vec![2, 2, 3, 1]).unwrap();
    lse.fill_sentinel();
    let err = run(&mut ops, Some(&mut lse), Some(&lens(&[2, 9])));
    assert!(err.is_err());
    let untouched = |data: HostData<'_>| match data {
        HostData::F32(s) => s
            .iter()
            .all(|x| x.to_bits() == ragged_core::dtype::SENTINEL_F32_BITS),
        _ => false,
    };
    assert!(untouched(ops.o.host_data()));
    assert!(untouched(lse.host_data()));
    // The same call with valid lengths writes.
    run(&mut ops, Some(&mut lse), Some(&lens(&[2, 1]))).unwrap();
    assert!(!untouched(ops.o.host_data()));
}
