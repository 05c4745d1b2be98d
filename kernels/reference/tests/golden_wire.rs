//! The reference on the golden problem of `shared/testdata/wire` (files copied to
//! `tests/golden/`): inputs and float64 expected outputs produced outside this repository.
//!
//! bf16, B = 2, H_q = 2, H_kv = 1 (GQA), D = 16, all four primaries ragged `[B, S, H, D]` with Q/O
//! sharing one int32 aux and K/V another, causal bottom-right (batch 1 has more queries than
//! keys, so its top rows admit nothing), scale 0.25, dense LSE `[B, H, S, 1]`. Expected arrays
//! hold NaN where nothing may be written.

use std::sync::Arc;

use half::bf16;
use ragged_core::tensor::packed_strides;
use ragged_core::{BSHD_SEQ_AXIS, DenseTensor, MaskBand, RaggedTensor, Tensor, TensorMutExt};
use ragged_reference::{SdpaParams, sdpa_forward};

/// Minimal reader for the little-endian, C-order `.npy` files used here: returns the dtype
/// descriptor, the shape and the raw data bytes.
fn npy(bytes: &[u8]) -> (String, Vec<usize>, &[u8]) {
    assert_eq!(&bytes[..6], b"\x93NUMPY", "not an .npy file");
    let (header_len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len]).unwrap();
    let field = |name: &str| {
        let at = header.find(name).unwrap() + name.len();
        header[at..].trim_start_matches([':', ' ', '\''])
    };
    let descr = field("'descr'").split('\'').next().unwrap().to_owned();
    assert!(field("'fortran_order'").starts_with("False"));
    let shape_text = field("'shape'");
    let shape = shape_text[1..shape_text.find(')').unwrap()]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    (descr, shape, &bytes[start + header_len..])
}

fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

fn f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bf16_input(bytes: &[u8], dims: Vec<i64>, aux: &Arc<dyn Tensor>) -> RaggedTensor<bf16> {
    let (descr, _, data) = npy(bytes);
    assert_eq!(descr, "<u2", "bf16 is stored as uint16 bit patterns");
    let strides = packed_strides(&dims);
    let mut t = RaggedTensor::new(dims, strides, BSHD_SEQ_AXIS, Arc::clone(aux), 1, None).unwrap();
    let values: Vec<bf16> = u16s(data).into_iter().map(bf16::from_bits).collect();
    assert_eq!(
        values.len(),
        t.as_slice().len(),
        "buffer is exactly ragged_offset[B] elements"
    );
    t.as_mut_slice().copy_from_slice(&values);
    t
}

fn offsets(bytes: &[u8]) -> Arc<dyn Tensor> {
    let (descr, shape, data) = npy(bytes);
    assert_eq!(
        (descr.as_str(), shape.as_slice()),
        ("<i4", &[3, 1, 1, 1][..])
    );
    Arc::new(DenseTensor::from_vec(i32s(data), vec![3, 1, 1, 1], vec![1, 1, 1, 1]).unwrap())
}

#[test]
fn golden_bf16_gqa_causal_bottom_right_problem() {
    let aux_q = offsets(include_bytes!("golden/inputs_5.npy"));
    let aux_kv = offsets(include_bytes!("golden/inputs_6.npy"));
    let q = bf16_input(
        include_bytes!("golden/inputs_1.npy"),
        vec![2, 3, 2, 16],
        &aux_q,
    );
    let k = bf16_input(
        include_bytes!("golden/inputs_2.npy"),
        vec![2, 4, 1, 16],
        &aux_kv,
    );
    let v = bf16_input(
        include_bytes!("golden/inputs_3.npy"),
        vec![2, 4, 1, 16],
        &aux_kv,
    );
    let mut o = RaggedTensor::<bf16>::new(
        vec![2, 3, 2, 16],
        packed_strides(&[2, 3, 2, 16]),
        1,
        aux_q,
        1,
        None,
    )
    .unwrap();
    o.fill_sentinel();
    let mut lse = DenseTensor::<f32>::new(vec![2, 2, 3, 1], vec![6, 3, 1, 1]).unwrap();
    lse.fill_sentinel();
    let params = SdpaParams {
        scale: 0.25,
        band: MaskBand::causal_bottom_right(),
    };
    sdpa_forward(&q, &k, &v, &mut o, Some(&mut lse), None, None, &params).unwrap();

    let (_, shape, data) = npy(include_bytes!("golden/expected_4.npy"));
    assert_eq!(shape, [5, 2, 16]);
    let expected_o = f64s(data);
    for (got, want) in o.as_slice().iter().zip(&expected_o) {
        let got = got.to_f64();
        // ragged-sdpa.md §8, bf16: atol = rtol = 1e-2.
        assert!(
            (got - want).abs() <= 1e-2 + 1e-2 * want.abs(),
            "O {got} vs {want}"
        );
    }
    // Batch 1 (rows 2..5 of the buffer) has 3 queries and 1 key: rows 0 and 1 admit nothing.
    assert!(
        o.as_slice()[2 * 32..4 * 32]
            .iter()
            .all(|x| x.to_f32() == 0.0)
    );

    let (_, shape, data) = npy(include_bytes!("golden/expected_9.npy"));
    assert_eq!(shape, [2, 2, 3]);
    for (got, want) in lse.as_slice().iter().zip(f64s(data)) {
        if want.is_nan() {
            assert_eq!(
                got.to_bits(),
                ragged_core::dtype::SENTINEL_F32_BITS,
                "unwritten LSE"
            );
        } else if want == f64::NEG_INFINITY {
            assert_eq!(*got, f32::NEG_INFINITY);
        } else {
            let got = f64::from(*got);
            assert!(
                (got - want).abs() <= 1e-3 + 1e-3 * want.abs(),
                "LSE {got} vs {want}"
            );
        }
    }
}
