//! `.npy` arrays in the conventions of the golden wire files: physical buffers in C order,
//! bf16 and fp16 as `uint16` bit patterns (NumPy has no bf16), everything else native.

use std::io::Read;
use std::path::Path;

use half::{bf16, f16};
use ragged_core::tensor::{Tensor, packed_strides};
use ragged_core::{HostData, HostDataMut};

/// An array read from a file: its header's shape and its values in C order.
pub struct NpyArray {
    pub shape: Vec<u64>,
    pub values: NpyValues,
}

/// Values read from a file, before conversion to a tensor's element type.
pub enum NpyValues {
    Float(Vec<f64>),
    /// `<u2`: 16-bit patterns of a bf16 or fp16 tensor.
    Bits16(Vec<u16>),
    /// `<f2`: IEEE half values.
    Half(Vec<f16>),
    Int(Vec<i64>),
}

impl NpyValues {
    fn len(&self) -> usize {
        match self {
            NpyValues::Float(v) => v.len(),
            NpyValues::Bits16(v) => v.len(),
            NpyValues::Half(v) => v.len(),
            NpyValues::Int(v) => v.len(),
        }
    }
}

/// Reads a little-endian, C-order array of any shape.
pub fn read(path: &Path) -> Result<NpyArray, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let npy = npyz::NpyFile::new(std::io::BufReader::new(file)).map_err(|e| e.to_string())?;
    if npy.order() != npyz::Order::C {
        return Err("Fortran-order arrays are not supported".into());
    }
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(format!("unsupported dtype {other:?}")),
    };
    let width = match descr.as_str() {
        "<f8" | "<i8" => 8,
        "<f4" | "<i4" => 4,
        "<u2" | "<f2" => 2,
        other => {
            return Err(format!(
                "dtype '{other}' (supported: <f8 <f4 <f2 <u2 <i8 <i4)"
            ));
        }
    };
    let shape = npy.shape().to_vec();
    // The shape is the file's claim: a size that cannot exist is an error, not an overflow.
    let count = npy.len();
    let promised = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(width))
        .ok_or_else(|| {
            format!(
                "header shape {:?} promises {count} x {width} bytes, beyond addressable memory",
                npy.shape()
            )
        })?;
    let mut bytes = Vec::new();
    npy.into_inner()
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() < promised {
        return Err(format!(
            "file holds {} data bytes, its header promises {count} x {width}",
            bytes.len()
        ));
    }
    let chunks = bytes[..promised].chunks_exact(width);
    let arr = |c: &[u8]| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..c.len()].copy_from_slice(c);
        a
    };
    let values = match descr.as_str() {
        "<f8" => NpyValues::Float(chunks.map(|c| f64::from_le_bytes(arr(c))).collect()),
        "<f4" => NpyValues::Float(
            chunks
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        "<i8" => NpyValues::Int(chunks.map(|c| i64::from_le_bytes(arr(c))).collect()),
        "<i4" => NpyValues::Int(
            chunks
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
        ),
        "<u2" => NpyValues::Bits16(chunks.map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
        _ => NpyValues::Half(
            chunks
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
        ),
    };
    Ok(NpyArray { shape, values })
}

/// The shape an output is written with: `[tokens, H, D]` for ragged buffers (as the golden files
/// store them), the dims for row-major packed dense ones, flat otherwise.
///
/// `.npy` stores C order, so the dims are only true of a buffer whose strides are row-major: a
/// gap-free but permuted buffer (a dense `[B, H, S, D]` O in BSHD memory order, the common case)
/// labelled with its dims would read back transposed.
pub fn shape_of(t: &dyn Tensor) -> Vec<u64> {
    let len = t.host_data().len() as u64;
    let dims: Vec<u64> = t.dims().iter().map(|d| *d as u64).collect();
    if let Some(info) = t.ragged_iteration_info()
        && dims.len() == 4
        && matches!(info.seq_axis, 1 | 2)
    {
        // The head axis is the middle axis that is not the sequence (either dims order).
        let heads = dims[3 - info.seq_axis];
        let row = heads * dims[3];
        if row > 0 && len.is_multiple_of(row) {
            return vec![len / row, heads, dims[3]];
        }
    }
    if t.ragged_iteration_info().is_none()
        && t.strides() == packed_strides(t.dims())
        && dims.iter().try_fold(1u64, |n, d| n.checked_mul(*d)) == Some(len)
    {
        return dims;
    }
    vec![len]
}

/// Checks that an input array of `shape` describes `t`'s buffer: the shape [`shape_of`] writes
/// for it, the flat buffer, or a 0-d array for a one-element buffer. An array of the right element
/// count in any other shape is refused: its C order would put other elements where the buffer
/// expects these (a `[B, S, H, D]` array for a ragged `[tokens, H, D]` buffer, a transposed dense
/// one), and the run would compute on silently permuted data.
pub fn check_input_shape(shape: &[u64], t: &dyn Tensor) -> Result<(), String> {
    let len = t.host_data().len() as u64;
    let written = shape_of(t);
    if shape == written.as_slice() || shape == [len] || (shape.is_empty() && len == 1) {
        return Ok(());
    }
    let accepted = if written.len() == 1 {
        format!("the flat buffer {}", shape_text(&written))
    } else {
        let what = if t.ragged_iteration_info().is_some() {
            "[tokens, H, D]"
        } else {
            "its dims"
        };
        format!(
            "{} ({what}) or the flat buffer {}",
            shape_text(&written),
            shape_text(&[len])
        )
    };
    Err(format!(
        "array shape {} does not match the tensor, which takes {accepted}",
        shape_text(shape)
    ))
}

/// A shape as NumPy prints it: `(5, 2, 16)`, `(160,)`, `()`.
fn shape_text(shape: &[u64]) -> String {
    match shape {
        [] => "()".to_owned(),
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Copies `values` into a tensor buffer of the same length, converting to its element type.
pub fn fill(values: &NpyValues, target: HostDataMut<'_>) -> Result<(), String> {
    if values.len() != target.len() {
        return Err(format!(
            "array has {} elements, the tensor's buffer {}",
            values.len(),
            target.len()
        ));
    }
    match (values, target) {
        (NpyValues::Float(v), HostDataMut::F32(t)) => {
            t.iter_mut().zip(v).for_each(|(t, v)| *t = *v as f32)
        }
        (NpyValues::Float(v), HostDataMut::F16(t)) => t
            .iter_mut()
            .zip(v)
            .for_each(|(t, v)| *t = f16::from_f64(*v)),
        (NpyValues::Float(v), HostDataMut::BF16(t)) => t
            .iter_mut()
            .zip(v)
            .for_each(|(t, v)| *t = bf16::from_f64(*v)),
        (NpyValues::Half(v), HostDataMut::F16(t)) => t.copy_from_slice(v),
        (NpyValues::Bits16(v), HostDataMut::F16(t)) => t
            .iter_mut()
            .zip(v)
            .for_each(|(t, v)| *t = f16::from_bits(*v)),
        (NpyValues::Bits16(v), HostDataMut::BF16(t)) => t
            .iter_mut()
            .zip(v)
            .for_each(|(t, v)| *t = bf16::from_bits(*v)),
        (NpyValues::Int(v), HostDataMut::I64(t)) => t.copy_from_slice(v),
        (NpyValues::Int(v), HostDataMut::I32(t)) => {
            for (t, v) in t.iter_mut().zip(v) {
                *t = i32::try_from(*v).map_err(|_| format!("value {v} does not fit INT32"))?;
            }
        }
        (_, target) => {
            return Err(format!(
                "array dtype cannot be stored in a {} tensor",
                target.data_type()
            ));
        }
    }
    Ok(())
}

/// Writes a tensor buffer with the given shape (element count must match).
pub fn write(path: &Path, data: HostData<'_>, shape: &[u64]) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    use npyz::WriterBuilder;
    fn put<T: npyz::AutoSerialize + Copy>(
        file: impl std::io::Write,
        shape: &[u64],
        values: impl Iterator<Item = T>,
    ) -> std::io::Result<()> {
        let mut w = npyz::WriteOptions::<T>::new()
            .default_dtype()
            .shape(shape)
            .writer(file)
            .begin_nd()?;
        w.extend(values)?;
        w.finish()
    }
    match data {
        HostData::F32(s) => put(file, shape, s.iter().copied()),
        HostData::F16(s) => put(file, shape, s.iter().map(|v| v.to_bits())),
        HostData::BF16(s) => put(file, shape, s.iter().map(|v| v.to_bits())),
        HostData::I32(s) => put(file, shape, s.iter().copied()),
        HostData::I64(s) => put(file, shape, s.iter().copied()),
        // The raw codes, as the 16-bit types write their bits.
        HostData::Fp8(_, s) => put(file, shape, s.iter().copied()),
    }
}

#[cfg(test)]
mod tests {
    use ragged_core::DenseTensor;

    use super::*;

    /// A version-1.0 `.npy` file with the given header dict and data bytes.
    fn npy_file(name: &str, header: &str, data: &[u8]) -> std::path::PathBuf {
        let mut dict = header.to_owned();
        while !(10 + dict.len() + 1).is_multiple_of(64) {
            dict.push(' ');
        }
        dict.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.extend_from_slice(data);
        let path =
            std::env::temp_dir().join(format!("hipdnn-shim-npy-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_header_shape_beyond_memory_is_an_error_not_an_overflow() {
        // 2^61 elements of 8 bytes: 2^64 bytes.
        let path = npy_file(
            "huge.npy",
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
            &[0; 8],
        );
        let error = read(&path).err().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(error.contains("2305843009213693952 x 8 bytes"), "{error}");
    }

    #[test]
    fn a_truncated_file_names_what_its_header_promised() {
        let path = npy_file(
            "short.npy",
            "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
            &[1, 0, 0, 0, 2, 0, 0, 0],
        );
        let error = read(&path).err().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(error, "file holds 8 data bytes, its header promises 3 x 4");
    }

    #[test]
    fn only_row_major_dense_buffers_are_labelled_with_their_dims() {
        let row_major = DenseTensor::<f32>::packed(vec![2, 3, 4, 5]);
        // [B, H, S, D] dims over BSHD memory: gap-free, but not C order.
        let bshd = DenseTensor::<f32>::new(vec![2, 3, 4, 5], vec![60, 5, 15, 1]);
        match (row_major, bshd) {
            (Ok(row_major), Ok(bshd)) => {
                assert_eq!(shape_of(&row_major), vec![2, 3, 4, 5]);
                assert_eq!(shape_of(&bshd), vec![120]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_input_takes_the_written_shape_or_the_flat_buffer_and_nothing_else() {
        let dense = DenseTensor::<f32>::packed(vec![2, 3, 4]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_input_shape(&[2, 3, 4], &dense), Ok(()));
        assert_eq!(check_input_shape(&[24], &dense), Ok(()));
        assert_eq!(
            check_input_shape(&[4, 3, 2], &dense),
            Err(
                "array shape (4, 3, 2) does not match the tensor, which takes (2, 3, 4) (its dims) \
                 or the flat buffer (24,)"
                    .to_owned()
            )
        );
        let permuted = DenseTensor::<f32>::new(vec![2, 3, 4, 5], vec![60, 5, 15, 1])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            check_input_shape(&[2, 3, 4, 5], &permuted),
            Err("array shape (2, 3, 4, 5) does not match the tensor, which takes the flat buffer (120,)".to_owned()),
            "dims over a permuted buffer would read back transposed"
        );
        let one = DenseTensor::<f32>::packed(vec![1, 1, 1, 1]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_input_shape(&[], &one), Ok(()));
    }

    #[test]
    fn reads_little_endian_int32() {
        let path = npy_file(
            "ok.npy",
            "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
            &[7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        );
        let array = read(&path);
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(array, Ok(NpyArray { shape, values: NpyValues::Int(v) }) if v == [7, -1] && shape == [2])
        );
    }
}
