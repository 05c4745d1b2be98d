//! A pointwise node in float64, in plain loops over the output's addressable elements: a dense
//! output over every multi-index of its dims, a ragged one batch by batch over each batch's
//! extent (rows of its sequence axis the aux gives that batch), so padding rows get nothing.
//! Inputs are read at the same multi-index with size-1 axes (or a one-element input) broadcast;
//! a value baked into the graph is a constant. An element whose input an earlier node left
//! unwritten gets no value either: any value is correct there.

use std::collections::{HashMap, HashSet};

use hipdnn_shim::harness::Bundle;
use ragged_schema::model::{Graph, PointwiseAttributes, TensorAttributes};

use super::{SeqAxis, Writes, floats, integers, seq_axis_from_strides, tensor};

/// The modes the oracle models (those meaningful on ragged tensors, RFC §4.9).
#[derive(Debug, Clone, Copy)]
enum Op {
    Identity,
    Exp,
    Relu {
        lower: f64,
        upper: Option<f64>,
        slope: f64,
    },
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

fn op(p: &PointwiseAttributes) -> Result<Op, String> {
    Ok(match p.operation.name() {
        Some("IDENTITY") => Op::Identity,
        Some("EXP") => Op::Exp,
        Some("RELU_FWD") => Op::Relu {
            lower: p.relu_lower_clip.map_or(0.0, f64::from),
            upper: p.relu_upper_clip.map(f64::from),
            slope: p.relu_lower_clip_slope.map_or(0.0, f64::from),
        },
        Some("ADD") => Op::Add,
        Some("SUB") => Op::Sub,
        Some("MUL") => Op::Mul,
        Some("DIV") => Op::Div,
        Some("MAX_OP") => Op::Max,
        Some("MIN_OP") => Op::Min,
        _ => {
            return Err(format!(
                "pointwise mode {} is not modelled by the oracle",
                p.operation
            ));
        }
    })
}

fn apply(op: Op, a: f64, b: f64) -> f64 {
    match op {
        Op::Identity => a,
        Op::Exp => a.exp(),
        Op::Relu {
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
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
        Op::Max => a.max(b),
        Op::Min => a.min(b),
    }
}

/// Where each multi-index of a tensor lives, and which ones exist.
struct Layout {
    dims: Vec<i64>,
    strides: Vec<i64>,
    /// Ragged: the sequence axis, per-batch first element and extent.
    ragged: Option<(usize, Vec<i64>, Vec<i64>)>,
}

impl Layout {
    fn of(attrs: &TensorAttributes, bundle: &Bundle) -> Result<Layout, String> {
        let (dims, strides) = (attrs.dims.clone(), attrs.strides.clone());
        if dims.len() != strides.len() || dims.iter().any(|&d| d < 0) {
            return Err(format!(
                "tensor uid {}: dims {dims:?} / strides {strides:?}",
                attrs.uid
            ));
        }
        let Some(aux) = attrs.ragged_offset_tensor_uid else {
            return Ok(Layout {
                dims,
                strides,
                ragged: None,
            });
        };
        if dims.len() != 4 {
            return Err(format!("ragged tensor uid {} is not rank 4", attrs.uid));
        }
        let axis = match seq_axis_from_strides(&dims, &strides) {
            SeqAxis::One => 1,
            SeqAxis::Two => 2,
        };
        let offsets = integers(tensor(bundle, aux)?, aux)?;
        let batch = dims[0] as usize;
        let seq_stride = strides[axis];
        if offsets.len() != batch + 1 || seq_stride <= 0 {
            return Err(format!(
                "tensor uid {}: aux uid {aux} has {} values for B = {batch}",
                attrs.uid,
                offsets.len()
            ));
        }
        let m = attrs.ragged_offset_multiplier;
        let mut base = Vec::with_capacity(batch);
        let mut extent = Vec::with_capacity(batch);
        for b in 0..batch {
            let (start, end) = (offsets[b] * m, offsets[b + 1] * m);
            if end < start || (end - start) % seq_stride != 0 {
                return Err(format!(
                    "tensor uid {}: batch {b} spans [{start}, {end}), not whole rows of {seq_stride}",
                    attrs.uid
                ));
            }
            base.push(start);
            extent.push((end - start) / seq_stride);
        }
        Ok(Layout {
            dims,
            strides,
            ragged: Some((axis, base, extent)),
        })
    }

    fn position(&self, index: &[i64]) -> usize {
        let (first, skip_batch) = match &self.ragged {
            Some((_, base, _)) => (base[index[0] as usize], 1),
            None => (0, 0),
        };
        let rest: i64 = index
            .iter()
            .zip(&self.strides)
            .skip(skip_batch)
            .map(|(i, s)| i * s)
            .sum();
        (first + rest) as usize
    }

    /// Every addressable multi-index, in row-major order.
    fn indices(&self) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        let mut index = vec![0i64; self.dims.len()];
        let bound = |index: &[i64], axis: usize| match &self.ragged {
            Some((seq, _, extent)) if axis == *seq => extent[index[0] as usize],
            _ => self.dims[axis],
        };
        if self.dims.contains(&0) {
            return out;
        }
        'walk: loop {
            if (0..index.len()).all(|a| index[a] < bound(&index, a)) {
                out.push(index.clone());
            }
            for axis in (0..index.len()).rev() {
                index[axis] += 1;
                if index[axis] < self.dims[axis] {
                    continue 'walk;
                }
                index[axis] = 0;
            }
            return out;
        }
    }
}

/// The input's multi-index for the output's `index`.
fn broadcast(dims: &[i64], out: &[i64], index: &[i64]) -> Result<Vec<i64>, String> {
    if dims == out {
        Ok(index.to_vec())
    } else if dims.iter().all(|&d| d == 1) {
        Ok(vec![0; dims.len()])
    } else if dims.len() == out.len() && dims.iter().zip(out).all(|(&d, &o)| d == o || d == 1) {
        Ok(index
            .iter()
            .zip(dims)
            .map(|(&i, &d)| if d == 1 { 0 } else { i })
            .collect())
    } else {
        Err(format!("dims {dims:?} do not broadcast to {out:?}"))
    }
}

enum Operand {
    Constant(f64),
    Tensor {
        layout: Layout,
        values: Vec<f64>,
        /// Positions an earlier node wrote, when the tensor is an intermediate.
        written: Option<HashSet<usize>>,
    },
}

/// `out_0 = op(in_0[, in_1])`; `produced` holds the positions each earlier node wrote.
pub fn evaluate(
    graph: &Graph,
    bundle: &Bundle,
    p: &PointwiseAttributes,
    produced: &HashMap<i64, HashSet<usize>>,
) -> Result<Writes, String> {
    let op = op(p)?;
    let attrs = |uid: i64| {
        graph
            .tensor(uid)
            .ok_or_else(|| format!("tensor uid {uid} is not in the graph"))
    };
    let out = Layout::of(attrs(p.out_0_tensor_uid)?, bundle)?;
    let mut operands = Vec::new();
    for uid in std::iter::once(p.in_0_tensor_uid).chain(p.in_1_tensor_uid) {
        let a = attrs(uid)?;
        operands.push(match a.value {
            Some(v) => Operand::Constant(v.as_f64()),
            None => Operand::Tensor {
                layout: Layout::of(a, bundle)?,
                values: floats(tensor(bundle, uid)?, uid)?,
                written: produced.get(&uid).cloned(),
            },
        });
    }
    let mut values = Vec::new();
    'element: for index in out.indices() {
        let mut args = [0.0f64; 2];
        for (slot, operand) in args.iter_mut().zip(&operands) {
            *slot = match operand {
                Operand::Constant(c) => *c,
                Operand::Tensor {
                    layout,
                    values,
                    written,
                } => {
                    let at = layout.position(&broadcast(&layout.dims, &out.dims, &index)?);
                    if written.as_ref().is_some_and(|w| !w.contains(&at)) {
                        continue 'element;
                    }
                    *values
                        .get(at)
                        .ok_or_else(|| format!("input position {at} is outside its buffer"))?
                }
            };
        }
        values.push((out.position(&index), apply(op, args[0], args[1])));
    }
    Ok(Writes {
        uid: p.out_0_tensor_uid,
        values,
    })
}
