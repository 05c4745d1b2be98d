//! The pointwise plan: `out = op(in_0[, in_1])` over every addressable element of `out`.
//!
//! Dense outputs are walked over their dims; ragged ones batch by batch over each batch's
//! extent (RFC §4.5 item 4), so padding rows are never written. An input is read at the same
//! logical index, with size-1 axes (or a one-element tensor, or a baked constant) broadcast.
//! Arithmetic is f32, the compute type of hipDNN's pointwise nodes. Every value is computed
//! before the first write, so an error leaves `out` untouched.

use half::{bf16, f16};

use super::ExecutorError;
use ragged_core::dtype::{HostData, HostDataMut};
use ragged_core::error::KernelError;
use ragged_core::graph::{PointwiseOp, TensorDesc};
use ragged_core::tensor::{Tensor, TensorExt, TensorMut};

/// One input: a tensor, or a constant baked into the graph.
pub(super) enum Operand<'t> {
    Tensor(&'t dyn Tensor, &'t TensorDesc),
    Constant(f32),
}

/// How an operand's index follows the output's.
enum Broadcast {
    Same,
    /// Per axis: follow the output (true) or stay at 0 (a size-1 axis).
    Axes(Vec<bool>),
    /// A single element, any rank.
    Scalar(usize),
}

pub(super) struct Site<'a> {
    pub node_index: usize,
    pub node: &'a str,
}

fn broadcast(
    site: &Site<'_>,
    t: &dyn Tensor,
    uid: i64,
    out: &[i64],
) -> Result<Broadcast, ExecutorError> {
    let dims = t.dims();
    if dims == out {
        return Ok(Broadcast::Same);
    }
    if dims.iter().all(|&d| d == 1) {
        return Ok(Broadcast::Scalar(dims.len()));
    }
    if dims.len() == out.len() && dims.iter().zip(out).all(|(&d, &o)| d == o || d == 1) {
        return Ok(Broadcast::Axes(dims.iter().map(|&d| d != 1).collect()));
    }
    Err(ExecutorError::Broadcast {
        node_index: site.node_index,
        node: site.node.to_string(),
        uid,
        dims: dims.to_vec(),
        out: out.to_vec(),
    })
}

fn load(data: HostData<'_>, position: usize) -> f32 {
    match data {
        HostData::F32(s) => s[position],
        HostData::F16(s) => s[position].to_f32(),
        HostData::BF16(s) => s[position].to_f32(),
        // Integer operands are refused before any load (see `check_float`).
        HostData::I32(s) => s[position] as f32,
        HostData::I64(s) => s[position] as f32,
        // FP8 operands are refused there too; decoding is exact, so this is still the value.
        HostData::Fp8(format, s) => format.decode_f64(s[position]) as f32,
    }
}

fn store(data: HostDataMut<'_>, position: usize, value: f32) {
    match data {
        HostDataMut::F32(s) => s[position] = value,
        HostDataMut::F16(s) => s[position] = f16::from_f32(value),
        HostDataMut::BF16(s) => s[position] = bf16::from_f32(value),
        HostDataMut::I32(_) | HostDataMut::I64(_) => {}
        HostDataMut::Fp8(format, s) => s[position] = format.encode(f64::from(value)),
    }
}

fn check_float(uid: i64, t: &dyn Tensor) -> Result<(), ExecutorError> {
    if t.data_type().is_float() {
        Ok(())
    } else {
        Err(ExecutorError::DataType {
            uid,
            data_type: t.data_type(),
            expected: "f32, f16 or bf16 for a pointwise operand",
        })
    }
}

fn apply(op: PointwiseOp, a: f32, b: f32) -> f32 {
    match op {
        PointwiseOp::Identity => a,
        PointwiseOp::Exp => a.exp(),
        PointwiseOp::Relu {
            lower,
            upper,
            slope,
        } => {
            let y = if a < lower {
                lower + slope * (a - lower)
            } else {
                a
            };
            upper.map_or(y, |u| y.min(u))
        }
        PointwiseOp::Add => a + b,
        PointwiseOp::Sub => a - b,
        PointwiseOp::Mul => a * b,
        PointwiseOp::Div => a / b,
        PointwiseOp::Max => a.max(b),
        PointwiseOp::Min => a.min(b),
    }
}

pub(super) fn run(
    site: &Site<'_>,
    op: PointwiseOp,
    operands: &[Operand<'_>],
    out_uid: i64,
    out: &mut dyn TensorMut,
) -> Result<(), ExecutorError> {
    let expected = if op.is_binary() { 2 } else { 1 };
    if operands.len() != expected {
        return Err(ExecutorError::Arity {
            node_index: site.node_index,
            node: site.node.to_string(),
            op,
            expected,
        });
    }
    check_float(out_uid, out)?;
    let out_dims = out.dims().to_vec();
    let mut plans = Vec::with_capacity(operands.len());
    for operand in operands {
        plans.push(match operand {
            Operand::Tensor(t, desc) => {
                check_float(desc.uid, *t)?;
                Some(broadcast(site, *t, desc.uid, &out_dims)?)
            }
            Operand::Constant(_) => None,
        });
    }
    let node_error = |source: KernelError| ExecutorError::Node {
        node_index: site.node_index,
        node: site.node.to_string(),
        source,
    };
    let mut results = Vec::new();
    let mut values = [0.0f32; 2];
    let mut scratch = Vec::new();
    for index in out.indices() {
        for (slot, (operand, plan)) in values.iter_mut().zip(operands.iter().zip(&plans)) {
            *slot = match (operand, plan) {
                (Operand::Constant(c), _) => *c,
                (Operand::Tensor(t, _), Some(plan)) => {
                    let at: &[i64] = match plan {
                        Broadcast::Same => &index,
                        Broadcast::Axes(follow) => {
                            scratch.clear();
                            scratch.extend(
                                index
                                    .iter()
                                    .zip(follow)
                                    .map(|(&i, &f)| if f { i } else { 0 }),
                            );
                            &scratch
                        }
                        Broadcast::Scalar(rank) => {
                            scratch.clear();
                            scratch.resize(*rank, 0);
                            &scratch
                        }
                    };
                    load(t.host_data(), t.get_index(at).map_err(node_error)?)
                }
                (Operand::Tensor(..), None) => 0.0,
            };
        }
        let position = out.get_index(&index).map_err(node_error)?;
        results.push((position, apply(op, values[0], values[1])));
    }
    for (position, value) in results {
        store(out.host_data_mut(), position, value);
    }
    Ok(())
}
