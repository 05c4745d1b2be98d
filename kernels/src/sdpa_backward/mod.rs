//! CPU reference SDPA backward over dense and ragged tensors: dQ, dK and dV from Q, K, V, the
//! forward's O and LSE, and the incoming gradient dO. Semantics: `README.md` beside this file.
//!
//! Flow: [`problem::validate`] checks every operand, [`blocks`] gathers the logical rows into f32
//! blocks, [`passes`] runs the key pass (dK, dV) and the query pass (dQ) with rayon over
//! (batch, head, tile), and only then are the gradients written, so an error leaves them
//! untouched.

mod blocks;
mod geometry;
mod passes;
mod problem;

use std::fmt;

use half::{bf16, f16};

use crate::dtype::{DataType, FloatElement};
use crate::error::{KernelError, Role};
use crate::gemm::THREADING_THRESHOLD;
use crate::sdpa::MaskBand;
use crate::tensor::{Tensor, TensorMut, typed_slice, typed_slice_mut};

use blocks::Blocks;
use passes::{Config, Staged};
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

/// A backward feature the graph asks for and this reference does not compute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BackwardFeature {
    /// Dropout with this probability (any value above 0, or NaN).
    Dropout {
        /// The requested probability.
        probability: f32,
    },
    /// An additive attention bias (`attn_mask_tensor_uid`).
    AttnBias,
    /// ALiBi positional bias.
    Alibi,
    /// The bias gradient output.
    DBias,
    /// FP8 operands, which the tensor SDK cannot hold.
    Fp8,
}

impl fmt::Display for BackwardFeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackwardFeature::Dropout { probability } => {
                write!(f, "dropout (probability {probability})")
            }
            BackwardFeature::AttnBias => f.write_str("an additive attention bias"),
            BackwardFeature::Alibi => f.write_str("an ALiBi mask"),
            BackwardFeature::DBias => f.write_str("the bias gradient dBias"),
            BackwardFeature::Fp8 => f.write_str("FP8 operands"),
        }
    }
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

/// Rows (and keys) per tile: 64 keeps the f32 tile pair and its operands in L2, and is halved
/// for wide heads until no product reaches matrixmultiply's own threading threshold, so its
/// threads never compete with rayon's.
fn tile_rows(dim_qk: usize, dim_v: usize) -> usize {
    let widest = dim_qk.max(dim_v);
    let mut t = 64;
    while t > 8
        && (2 * t * widest >= THREADING_THRESHOLD || t * t + t * widest >= THREADING_THRESHOLD)
    {
        t /= 2;
    }
    t
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
    match problem.dtype {
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
    let gather = |role, t: &dyn Tensor, g, lens: &[usize]| -> Result<Blocks, KernelError> {
        Blocks::gather(role, typed_slice::<T>(t.host_data())?, g, lens)
    };
    let o = gather(Role::O, inputs.o, &p.o, &p.len_q)?;
    let d_o = gather(Role::DO, inputs.d_o, &p.d_o, &p.len_q)?;
    let mut delta = Blocks::zeros(Role::O, p.heads_q, 1, &p.len_q)?;
    passes::row_dots(&d_o, &o, &mut delta);
    drop(o);
    let staged = Staged {
        q: gather(Role::Q, inputs.q, &p.q, &p.len_q)?,
        k: gather(Role::K, inputs.k, &p.k, &p.len_kv)?,
        v: gather(Role::V, inputs.v, &p.v, &p.len_kv)?,
        d_o,
        lse: Blocks::gather(
            Role::Lse,
            typed_slice::<f32>(inputs.lse.host_data())?,
            &p.lse,
            &p.len_q,
        )?,
        delta,
    };
    let mut dq = Blocks::zeros(Role::DQ, p.heads_q, p.dim_qk, &p.len_q)?;
    let mut dk = Blocks::zeros(Role::DK, p.heads_kv, p.dim_qk, &p.len_kv)?;
    let mut dv = Blocks::zeros(Role::DV, p.heads_kv, p.dim_v, &p.len_kv)?;
    let cfg = Config {
        scale: params.scale,
        band: params.band,
        tile: tile_rows(p.dim_qk, p.dim_v),
    };
    passes::key_pass(p, &staged, &cfg, &mut dk, &mut dv);
    passes::query_pass(p, &staged, &cfg, &mut dq);

    let dq_data = typed_slice_mut::<T>(outputs.dq.host_data_mut())?;
    let dk_data = typed_slice_mut::<T>(outputs.dk.host_data_mut())?;
    let dv_data = typed_slice_mut::<T>(outputs.dv.host_data_mut())?;
    dq.scatter(dq_data, &p.dq);
    dk.scatter(dk_data, &p.dk);
    dv.scatter(dv_data, &p.dv);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_keep_every_product_below_the_gemm_threading_threshold() {
        for (dqk, dv) in [
            (8, 8),
            (64, 64),
            (128, 128),
            (256, 256),
            (64, 512),
            (1024, 16),
        ] {
            let t = tile_rows(dqk, dv);
            let w = dqk.max(dv);
            assert!(2 * t * w < THREADING_THRESHOLD || t == 8, "{dqk}/{dv}: {t}");
            assert!(
                t * t + t * w < THREADING_THRESHOLD || t == 8,
                "{dqk}/{dv}: {t}"
            );
        }
        assert_eq!(tile_rows(64, 64), 64);
    }

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
