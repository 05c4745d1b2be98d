//! [`sdpa_forward_fp8`] over the SDK's tensors: the strided, dense or ragged operands an engine
//! is handed, staged into the packed layout the definition reads and written back.
//!
//! Validation is the 16-bit forward's (`crate::sdpa::problem`, geometry only: the element types
//! are checked here), so the FP8 forward accepts exactly the layouts, lengths and masks the
//! 16-bit one does. Everything is computed before the first write: an error leaves O and the LSE
//! untouched, and padding rows are never written.

use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::{Tensor, TensorMut};
use ragged_core::{DataType, Fp8Format, HostData, HostDataMut, MaskBand};

use super::{Fp8Output, Fp8OutputData, Fp8Scales, Fp8SdpaProblem, sdpa_forward_fp8};
use crate::sdpa::layout::AttnLayout;
use crate::sdpa::problem::{Operands, Problem, validate_geometry};

/// The tensors of one FP8 forward, by role.
pub struct Fp8Tensors<'a> {
    /// FP8 codes, one format for Q, K and V.
    pub q: &'a dyn Tensor,
    pub k: &'a dyn Tensor,
    pub v: &'a dyn Tensor,
    /// FP8 codes (of the inputs' family) or f32/f16/bf16.
    pub o: &'a mut dyn TensorMut,
    /// f32, as for the 16-bit forward.
    pub lse: Option<&'a mut dyn TensorMut>,
    pub seq_len_q: Option<&'a dyn Tensor>,
    pub seq_len_kv: Option<&'a dyn Tensor>,
}

/// The scalars and attributes of one FP8 forward.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Attributes {
    /// The resolved attention scale.
    pub attn_scale: f32,
    /// The resolved mask band.
    pub mask: MaskBand,
    /// The descales and P's quantization.
    pub scales: Fp8Scales,
    /// `scale_o`: present exactly when O is FP8.
    pub scale_o: Option<f32>,
}

/// What the FP8 forward reports besides O and the LSE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8Amaxes {
    /// `max P` before `scale_s`.
    pub amax_s: f32,
    /// `max |O|` before `scale_o`.
    pub amax_o: f32,
}

/// Runs `fp8-attention.md` §3 on `t`, writing O and the LSE in place.
pub fn sdpa_forward_fp8_tensors(
    t: Fp8Tensors<'_>,
    attributes: &Fp8Attributes,
) -> Result<Fp8Amaxes, KernelError> {
    let format = input_format(&t)?;
    let output = output_type(t.o.data_type(), format, attributes.scale_o)?;
    let problem = validate_geometry(
        &Operands {
            q: t.q,
            k: t.k,
            v: t.v,
            o: &*t.o,
            lse: t.lse.as_deref().map(|l| l as &dyn Tensor),
            seq_len_q: t.seq_len_q,
            seq_len_kv: t.seq_len_kv,
            paged: None,
            sinks: None,
        },
        DataType::Fp8(format),
    )?;
    let p = &problem;
    let q = stage(codes(Role::Q, t.q)?, &p.q, &p.len_q, p.heads_q, p.dim_qk);
    let k = stage(codes(Role::K, t.k)?, &p.k, &p.len_kv, p.heads_kv, p.dim_qk);
    let v = stage(codes(Role::V, t.v)?, &p.v, &p.len_kv, p.heads_kv, p.dim_v);
    let out = sdpa_forward_fp8(
        &Fp8SdpaProblem {
            input: format,
            output,
            heads_q: p.heads_q,
            heads_kv: p.heads_kv,
            d_qk: p.dim_qk,
            d_v: p.dim_v,
            seq_lens_q: &p.len_q,
            seq_lens_kv: &p.len_kv,
            attn_scale: attributes.attn_scale,
            mask: attributes.mask,
            scales: attributes.scales,
        },
        &q,
        &k,
        &v,
    )?;
    let rows = |dim: usize| packed_positions(p, &p.o, dim);
    match (t.o.host_data_mut(), &out.o) {
        (HostDataMut::Fp8(_, dst), Fp8OutputData::Fp8(src)) => scatter(dst, rows(p.dim_v), src),
        (HostDataMut::F32(dst), Fp8OutputData::F32(src)) => scatter(dst, rows(p.dim_v), src),
        (HostDataMut::F16(dst), Fp8OutputData::F16(src)) => scatter(dst, rows(p.dim_v), src),
        (HostDataMut::BF16(dst), Fp8OutputData::BF16(src)) => scatter(dst, rows(p.dim_v), src),
        (other, _) => {
            return Err(KernelError::Internal(format!(
                "FP8 forward: O of type {} computed as another type",
                other.data_type()
            )));
        }
    }
    if let (Some(lse), Some(layout)) = (t.lse, &p.lse) {
        let HostDataMut::F32(dst) = lse.host_data_mut() else {
            return Err(KernelError::Internal("FP8 forward: LSE not f32".to_owned()));
        };
        scatter(dst, packed_positions(p, layout, 1), &out.lse);
    }
    Ok(Fp8Amaxes {
        amax_s: out.amax_s,
        amax_o: out.amax_o,
    })
}

/// Q's format, shared by K and V (fp8-attention.md §1.1).
fn input_format(t: &Fp8Tensors<'_>) -> Result<Fp8Format, KernelError> {
    let Some(format) = t.q.data_type().fp8() else {
        return Err(KernelError::SdpaDataType {
            role: Role::Q,
            dtype: t.q.data_type(),
            expected: "an FP8 format".to_owned(),
        });
    };
    for (role, tensor) in [(Role::K, t.k), (Role::V, t.v)] {
        if tensor.data_type() != DataType::Fp8(format) {
            return Err(KernelError::SdpaDataType {
                role,
                dtype: tensor.data_type(),
                expected: format!("{format} (as Q)"),
            });
        }
    }
    Ok(format)
}

/// O's type with its scale: FP8 of the inputs' family with `scale_o`, or a 16/32-bit float
/// without (fp8-attention.md §1.4).
fn output_type(
    dtype: DataType,
    input: Fp8Format,
    scale_o: Option<f32>,
) -> Result<Fp8Output, KernelError> {
    let mismatch = |expected: &str| KernelError::SdpaDataType {
        role: Role::O,
        dtype,
        expected: expected.to_owned(),
    };
    match (dtype, scale_o) {
        (DataType::Fp8(format), Some(scale_o)) if format.is_fnuz() == input.is_fnuz() => {
            Ok(Fp8Output::Fp8 { format, scale_o })
        }
        (DataType::Fp8(_), Some(_)) => Err(mismatch("an FP8 format of the inputs' family")),
        (DataType::Fp8(_), None) => Err(mismatch("f32, f16 or bf16 when there is no scale_o")),
        (DataType::F32, None) => Ok(Fp8Output::F32),
        (DataType::F16, None) => Ok(Fp8Output::F16),
        (DataType::BF16, None) => Ok(Fp8Output::BF16),
        (DataType::F32 | DataType::F16 | DataType::BF16, Some(_)) => {
            Err(mismatch("an FP8 format when scale_o is given"))
        }
        (DataType::I32 | DataType::I64, _) => Err(mismatch("an FP8 format, f32, f16 or bf16")),
    }
}

fn codes(role: Role, t: &dyn Tensor) -> Result<&[u8], KernelError> {
    match t.host_data() {
        HostData::Fp8(_, codes) => Ok(codes),
        other => Err(KernelError::SdpaDataType {
            role,
            dtype: other.data_type(),
            expected: "an FP8 format".to_owned(),
        }),
    }
}

/// The logical rows of `layout` in the packed order `[Σ L(b), heads, dim]`.
fn stage(src: &[u8], layout: &AttnLayout, lens: &[usize], heads: usize, dim: usize) -> Vec<u8> {
    let mut packed = Vec::with_capacity(lens.iter().sum::<usize>() * heads * dim);
    for (b, &len) in lens.iter().enumerate() {
        for s in 0..len {
            for h in 0..heads {
                packed.extend((0..dim).map(|d| src[layout.position(b, s, h, d)]));
            }
        }
    }
    packed
}

/// Where each packed element of a query-side output (`[Σ Lq(b), H_q, dim]`) lives in `layout`.
fn packed_positions<'a>(
    p: &'a Problem,
    layout: &'a AttnLayout,
    dim: usize,
) -> impl Iterator<Item = usize> + 'a {
    p.len_q.iter().enumerate().flat_map(move |(b, &len)| {
        (0..len).flat_map(move |s| {
            (0..p.heads_q).flat_map(move |h| (0..dim).map(move |d| layout.position(b, s, h, d)))
        })
    })
}

fn scatter<T: Copy>(dst: &mut [T], positions: impl Iterator<Item = usize>, src: &[T]) {
    for (position, &value) in positions.zip(src) {
        dst[position] = value;
    }
}
