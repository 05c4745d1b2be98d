//! CPU reference SDPA backward over dense and ragged tensors: dQ, dK and dV from Q, K, V, the
//! forward's O and LSE, and the incoming gradient dO. Semantics: `README.md` beside this file.
//!
//! Flow: `problem::validate` runs the forward's validation and checks the gradients against
//! their primals, `passes` computes dQ, dK and dV in one pass, in parallel over (batch, KV head,
//! key chunk), each work item staging the rows it reads, and only then are the gradients
//! written, so an error leaves them untouched.

mod bf16_tiles;
mod items;
mod lanes;
mod passes;
mod problem;
mod staging;

use half::{bf16, f16};

use crate::amx::AmxTiles;
use crate::bf16_dot::DotTiles;
use crate::isa::Bf16Tiles;
use crate::sdpa::MaskBand;
use crate::sdpa::output::{carve, rows_of};
use crate::sdpa::stage::Staged;
use ragged_core::dtype::{DataType, FloatElement};
pub use ragged_core::error::BackwardFeature;
use ragged_core::error::{KernelError, Role};
use ragged_core::tensor::{Tensor, TensorMut, typed_slice, typed_slice_mut};

use passes::{Config, Gradients, Sources};
use problem::Problem;

/// The backward's inputs, by role.
#[derive(Clone, Copy)]
pub struct BackwardInputs<'a> {
    /// Queries, as given to the forward.
    pub q: &'a dyn Tensor,
    /// Keys.
    pub k: &'a dyn Tensor,
    /// Values.
    pub v: &'a dyn Tensor,
    /// The forward's output; read only to form `rowsum(dO ∘ O)`.
    pub o: &'a dyn Tensor,
    /// The gradient flowing into O; Q's layout, O's head dim.
    pub d_o: &'a dyn Tensor,
    /// The forward's natural-log LSE, f32, laid out as the forward writes it.
    pub lse: &'a dyn Tensor,
    /// Per-batch valid query rows.
    pub seq_len_q: Option<&'a dyn Tensor>,
    /// Per-batch valid key rows.
    pub seq_len_kv: Option<&'a dyn Tensor>,
}

/// The gradients the backward writes; each has the dims and layout of its primal.
pub struct BackwardOutputs<'a> {
    /// Gradient of Q.
    pub dq: &'a mut dyn TensorMut,
    /// Gradient of K (summed over the query heads of each GQA group).
    pub dk: &'a mut dyn TensorMut,
    /// Gradient of V (summed likewise).
    pub dv: &'a mut dyn TensorMut,
}

/// Resolved backward parameters. The plugin resolves scale and band from the graph exactly as
/// for the forward, and says which unsupported features the graph asks for so that the
/// reference declines them with a typed error instead of silently computing something else.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpaBackwardParams {
    /// The forward's scale on Q·Kᵀ.
    pub scale: f32,
    /// The forward's admitted keys per query row.
    pub band: MaskBand,
    /// `dropout_probability`; 0 or absent means no dropout.
    pub dropout_probability: Option<f32>,
    /// The graph has an additive bias input.
    pub attn_bias: bool,
    /// The graph asks for ALiBi.
    pub alibi: bool,
    /// The graph asks for dBias.
    pub dbias: bool,
    /// Any of Q, K, V, O, dO or the gradients is an FP8 type in the graph.
    pub fp8: bool,
}

impl Default for SdpaBackwardParams {
    /// Scale 1.0 (the project default), no mask, nothing unsupported.
    fn default() -> Self {
        SdpaBackwardParams {
            scale: 1.0,
            band: MaskBand::none(),
            dropout_probability: None,
            attn_bias: false,
            alibi: false,
            dbias: false,
            fp8: false,
        }
    }
}

impl SdpaBackwardParams {
    /// The first requested feature this reference cannot compute.
    fn unsupported(&self) -> Option<BackwardFeature> {
        if let Some(p) = self.dropout_probability
            && !(p == 0.0)
        {
            return Some(BackwardFeature::Dropout { probability: p });
        }
        [
            (self.attn_bias, BackwardFeature::AttnBias),
            (self.alibi, BackwardFeature::Alibi),
            (self.dbias, BackwardFeature::DBias),
            (self.fp8, BackwardFeature::Fp8),
        ]
        .into_iter()
        .find_map(|(asked, feature)| asked.then_some(feature))
    }
}

/// Query rows and keys per tile pair: 128 up to D = 128, 64 beyond. Measured with one thread on
/// this project's 2-core AVX2 machine (`benches/cpu_sdpa.rs --backward`, CPU time per call):
/// 128 × 128 beat 64 × 64 by 10 % at D = 64 and 128, and both mixed shapes by 3–5 %, although at
/// D = 128 one step's tiles (Q, dO and dQ rows in both arrangements, K, V, dK, dV rows, P and dS)
/// then exceed the 512 KiB L2: fewer, larger products repack less. Where the mask admits every
/// key (`unmasked`) the f32 tiles take 192: each query tile sweeps the item's keys and their dK
/// and dV rows, which leave L2 between sweeps, so fewer query tiles move less (Xeon model 207,
/// one thread: +1–3 % at D 64 and 128, AVX-512 and AVX2 builds), while masked bands lost 3 % on
/// their diagonal tiles.
fn tile(dim_qk: usize, dim_v: usize, unmasked: bool) -> usize {
    match (dim_qk.max(dim_v) <= 128, unmasked) {
        (true, true) => 192,
        (true, false) => 128,
        (false, _) => 64,
    }
}

/// SDPA backward on the CPU for the forward `O = softmax(scale·Q·Kᵀ + mask)·V` and its LSE.
///
/// Operand layouts are the forward's: each of Q, K, V, O, dO, dQ, dK, dV ragged (`[B, S, H, D]`
/// or `[B, H, S, D]` dims over token-major memory) or dense `[B, H, S, D]` with any strides; the
/// LSE `[B, S, H_q, 1]` ragged or `[B, H_q, S, 1]` dense, f32. All but the LSE share one element
/// type (f32, f16 or bf16); accumulation is f32. Rows at or beyond `seq_lens[b]` are neither
/// read nor written; every logical row of dQ, dK and dV is written.
///
/// Validates everything first: on error nothing has been written.
pub fn sdpa_backward(
    inputs: &BackwardInputs<'_>,
    outputs: BackwardOutputs<'_>,
    params: &SdpaBackwardParams,
) -> Result<(), KernelError> {
    if let Some(feature) = params.unsupported() {
        return Err(KernelError::BackwardUnsupported { feature });
    }
    let problem = problem::validate(inputs, &outputs)?;
    match problem.fwd.dtype {
        DataType::F32 => run::<f32>(&problem, inputs, outputs, params),
        DataType::F16 => run::<f16>(&problem, inputs, outputs, params),
        DataType::BF16 => run::<bf16>(&problem, inputs, outputs, params),
        other => Err(KernelError::SdpaDataType {
            role: Role::Q,
            dtype: other,
            expected: "f32, f16 or bf16".to_owned(),
        }),
    }
}

/// The typed body: every typed slice is obtained before the first write.
fn run<T: FloatElement>(
    p: &Problem,
    inputs: &BackwardInputs<'_>,
    outputs: BackwardOutputs<'_>,
    params: &SdpaBackwardParams,
) -> Result<(), KernelError> {
    let f = &p.fwd;
    let tiles = match T::DATA_TYPE {
        DataType::BF16 => crate::isa::bf16_tiles(),
        _ => None,
    };
    let unmasked = tiles.is_none() && crate::sdpa::admits_every_key(&params.band);
    let key_tile = tile(f.dim_qk, f.dim_v, unmasked);
    let cfg = Config {
        scale: params.scale,
        band: params.band,
        query_tile: key_tile,
        key_tile,
    };
    if tiles.is_none() && items::one_item_each(p, key_tile) {
        let rows = (
            rows_of(&p.dq, &f.len_q, f.heads_q, f.dim_qk),
            rows_of(&p.dk, &f.len_kv, f.heads_kv, f.dim_qk),
            rows_of(&p.dv, &f.len_kv, f.heads_kv, f.dim_v),
        );
        if let (Some(dq_rows), Some(dk_rows), Some(dv_rows)) = rows {
            let sources = sources::<T>(inputs)?;
            let dq = typed_slice_mut::<T>(outputs.dq.host_data_mut())?;
            let dk = typed_slice_mut::<T>(outputs.dk.host_data_mut())?;
            let dv = typed_slice_mut::<T>(outputs.dv.host_data_mut())?;
            let items = items::row_items(
                p,
                carve(dq, &dq_rows, f.dim_qk),
                carve(dk, &dk_rows, f.dim_qk),
                carve(dv, &dv_rows, f.dim_v),
            );
            passes::backward_into(p, &sources, &cfg, items);
            return Ok(());
        }
    }
    let mut grads = Gradients {
        dq: Staged::for_overwrite(Role::DQ, f.heads_q, f.dim_qk, &f.len_q)?,
        dk: Staged::for_overwrite(Role::DK, f.heads_kv, f.dim_qk, &f.len_kv)?,
        dv: Staged::for_overwrite(Role::DV, f.heads_kv, f.dim_v, &f.len_kv)?,
    };
    if let Some(unit) = tiles {
        let mut delta = Staged::for_overwrite(Role::O, f.heads_q, 1, &f.len_q)?;
        bf16_tiles::row_dots(
            (typed_slice::<T>(inputs.d_o.host_data())?, &p.d_o),
            (typed_slice::<T>(inputs.o.host_data())?, &f.o),
            &f.len_q,
            &mut delta,
        );
        let mut lse2 = Staged::gather(
            Role::Lse,
            typed_slice::<f32>(inputs.lse.host_data())?,
            &p.lse,
            &f.len_q,
        )?;
        lse2.data
            .iter_mut()
            .for_each(|x| *x *= std::f32::consts::LOG2_E);
        let sources = bf16_tiles::Sources {
            q: typed_slice::<bf16>(inputs.q.host_data())?,
            k: typed_slice::<bf16>(inputs.k.host_data())?,
            v: typed_slice::<bf16>(inputs.v.host_data())?,
            d_o: typed_slice::<bf16>(inputs.d_o.host_data())?,
        };
        let operands = bf16_tiles::Operands::stage(p, &sources, lse2, delta)?;
        let (scale, band) = (params.scale, params.band);
        match unit {
            Bf16Tiles::Amx => {
                bf16_tiles::backward::<AmxTiles>(p, &operands, scale, band, key_tile, &mut grads)?
            }
            Bf16Tiles::Dot => {
                bf16_tiles::backward::<DotTiles>(p, &operands, scale, band, key_tile, &mut grads)?
            }
        }
        return write_gradients::<T>(p, grads, outputs);
    }
    passes::backward(p, &sources::<T>(inputs)?, &cfg, &mut grads)?;
    write_gradients::<T>(p, grads, outputs)
}

/// The f32 tiles' inputs as typed slices.
fn sources<'a, T: FloatElement>(
    inputs: &BackwardInputs<'a>,
) -> Result<Sources<'a, T>, KernelError> {
    Ok(Sources {
        q: typed_slice::<T>(inputs.q.host_data())?,
        k: typed_slice::<T>(inputs.k.host_data())?,
        v: typed_slice::<T>(inputs.v.host_data())?,
        o: typed_slice::<T>(inputs.o.host_data())?,
        d_o: typed_slice::<T>(inputs.d_o.host_data())?,
        lse: typed_slice::<f32>(inputs.lse.host_data())?,
    })
}

/// Writes the staged gradients to the caller's tensors, rounded to `T` once.
fn write_gradients<T: FloatElement>(
    p: &Problem,
    grads: Gradients,
    outputs: BackwardOutputs<'_>,
) -> Result<(), KernelError> {
    let dq_data = typed_slice_mut::<T>(outputs.dq.host_data_mut())?;
    let dk_data = typed_slice_mut::<T>(outputs.dk.host_data_mut())?;
    let dv_data = typed_slice_mut::<T>(outputs.dv.host_data_mut())?;
    grads.dq.scatter(dq_data, &p.dq);
    grads.dk.scatter(dk_data, &p.dk);
    grads.dv.scatter(dv_data, &p.dv);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_features_are_named_and_zero_dropout_is_none() {
        let base = SdpaBackwardParams::default();
        assert_eq!(base.unsupported(), None);
        let zero = SdpaBackwardParams {
            dropout_probability: Some(0.0),
            ..base
        };
        assert_eq!(zero.unsupported(), None);
        let dropout = SdpaBackwardParams {
            dropout_probability: Some(0.1),
            ..base
        };
        assert_eq!(
            dropout.unsupported(),
            Some(BackwardFeature::Dropout { probability: 0.1 })
        );
        let nan = SdpaBackwardParams {
            dropout_probability: Some(f32::NAN),
            ..base
        };
        assert!(matches!(
            nan.unsupported(),
            Some(BackwardFeature::Dropout { .. })
        ));
        // The flag features are exercised through sdpa_backward in tests/sdpa_backward.rs.
    }
}
