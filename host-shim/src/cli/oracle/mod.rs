//! A float64 evaluation of the SDPA forward formula (ragged-sdpa.md §5), the yardstick of
//! `run --verify` and `bundle`; [`graph`] walks multi-node graphs (SDPA and pointwise nodes).
//!
//! Why a second implementation: the plugin's host engine *is* kernels' CPU reference, so checking
//! one against the other proves nothing. This module shares no code with `kernels::sdpa` or the
//! plugin: it resolves the layout, the mask band (schema.md §6.1) and the scale (§6.2) from the
//! graph itself and runs the plain loops — every score, every key, in f64 — at the sizes the
//! shim's graphs have. It reads the inputs of a harness bundle and yields the values a correct
//! engine writes, position by position; positions it yields nothing for must stay unwritten.
//!
//! Layout rules it applies (ragged-sdpa.md §1, §4): a ragged Q/K/V/O takes its sequence axis from
//! the larger of its two middle strides, so `[B, S, H, D]` and `[B, H, S, D]` dims over BSHD memory
//! both read right; a dense one is hipDNN's `[B, H, S, D]` with any strides. A dense LSE is
//! `[B, H, S, 1]` or `[B, S, H, 1]` by its dims (hipDNN's order when H = S); a ragged LSE takes its
//! axes from its strides like Q.
//!
//! FP8 forwards (kernels/core/fp8-attention.md §3) take the same loops with the document's
//! extra steps: codes decoded through the oracle's own tables ([`fp8`]), the descales applied to
//! the scores and to O, P quantized with `scale_s` when the node carries it, O scaled by
//! `scale_o` and rounded to its FP8 format, and the two amax outputs.

mod fp8;
mod graph;
mod operands;
mod pointwise;

pub use graph::evaluate_graph;

use fp8::*;
use operands::*;

use half::{bf16, f16};
use hipdnn_shim::harness::Bundle;
use ragged_core::HostDataMut;
use ragged_schema::model::{DiagonalAlignment, Graph, SdpaAttributes, TensorValue};

/// The values one output must hold: `(buffer position, value)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Writes {
    pub uid: i64,
    pub values: Vec<(usize, f64)>,
}

/// (left, right, bottom_right) as schema.md §6.1 resolves them; −1 is unbounded.
fn band(a: &SdpaAttributes) -> Result<(i64, i64, bool), String> {
    let stored_bottom_right = match a.diagonal_alignment {
        DiagonalAlignment::TopLeft => false,
        DiagonalAlignment::BottomRight => true,
        DiagonalAlignment::Unknown(v) => return Err(format!("diagonal_alignment {v} is unknown")),
    };
    let left = a.left_bound.unwrap_or(-1);
    let causal_right = a.right_bound.filter(|&r| r >= 0).unwrap_or(0);
    match (a.causal_mask, a.causal_mask_bottom_right) {
        (true, true) => Err("causal_mask and causal_mask_bottom_right are both set".into()),
        (true, false) => Ok((left, causal_right, stored_bottom_right)),
        (false, true) => Ok((left, causal_right, true)),
        (false, false) => Ok((left, a.right_bound.unwrap_or(-1), stored_bottom_right)),
    }
}

/// schema.md §6.2: the scale tensor (baked or pass-by-value), else `attn_scale_value`, else 1.
fn scale(graph: &Graph, bundle: &Bundle, a: &SdpaAttributes) -> Result<f64, String> {
    match a.scale_tensor_uid {
        Some(uid) => scalar(graph, bundle, uid),
        None => Ok(a.attn_scale_value.map_or(1.0, f64::from)),
    }
}

/// A scalar tensor as schema.md §6.2 reads the scale (fp8-attention.md §1.2 reads the FP8
/// scalars the same way): its baked value, else its first element.
fn scalar(graph: &Graph, bundle: &Bundle, uid: i64) -> Result<f64, String> {
    let attrs = graph
        .tensor(uid)
        .ok_or_else(|| format!("scale tensor uid {uid} is not in the graph"))?;
    match attrs.value {
        Some(TensorValue::Float8(_)) => Err(format!("scale tensor uid {uid} is fp8-encoded")),
        Some(TensorValue::Float32(v) | TensorValue::Float16(v) | TensorValue::BFloat16(v)) => {
            Ok(f64::from(v))
        }
        Some(TensorValue::Float64(v)) => Ok(v),
        Some(other) => Err(format!("scale tensor uid {uid} holds {other:?}")),
        None => floats(tensor(bundle, uid)?, uid)?
            .first()
            .copied()
            .ok_or_else(|| format!("scale tensor uid {uid} is empty")),
    }
}

/// Features whose semantics this oracle does not model: a graph using one is not checked at all,
/// rather than checked against the wrong formula.
fn refuse_unmodelled(a: &SdpaAttributes) -> Result<(), String> {
    let unmodelled = [
        ("attn_mask_tensor_uid", a.attn_mask_tensor_uid),
        ("seed_tensor_uid", a.seed_tensor_uid),
        ("offset_tensor_uid", a.offset_tensor_uid),
        ("dropout_mask_tensor_uid", a.dropout_mask_tensor_uid),
        ("dropout_scale_tensor_uid", a.dropout_scale_tensor_uid),
        ("block_mask_tensor_uid", a.block_mask_tensor_uid),
        ("max_tensor_uid", a.max_tensor_uid),
        ("sum_exp_tensor_uid", a.sum_exp_tensor_uid),
    ];
    if let Some((name, _)) = unmodelled.iter().find(|(_, uid)| uid.is_some()) {
        return Err(format!("{name} is set; the oracle does not model it"));
    }
    if a.alibi_mask || a.dropout_probability.is_some_and(|p| p > 0.0) {
        return Err("ALiBi or dropout is set; the oracle does not model it".into());
    }
    Ok(())
}

/// O (and LSE when the node names it) for the graph's one SDPA node on `bundle`'s inputs.
pub fn evaluate(graph: &Graph, bundle: &Bundle) -> Result<Vec<Writes>, String> {
    let [node] = graph.nodes.as_slice() else {
        return Err(format!(
            "{} nodes; the oracle evaluates one",
            graph.nodes.len()
        ));
    };
    let a = node
        .attributes
        .as_sdpa()
        .ok_or("the node is not an SDPA node")?;
    evaluate_sdpa(graph, bundle, a)
}

/// O (and LSE) of one SDPA node of `graph`, reading its inputs (real or intermediate) from
/// `bundle`.
pub fn evaluate_sdpa(
    graph: &Graph,
    bundle: &Bundle,
    a: &SdpaAttributes,
) -> Result<Vec<Writes>, String> {
    refuse_unmodelled(a)?;
    let (left, right, bottom_right) = band(a)?;
    let scale = scale(graph, bundle, a)?;
    let fp8 = fp8_steps(graph, bundle, a)?;
    let score_descale = fp8.as_ref().map_or(1.0, |f| f.score_descale);
    let (mut amax_s, mut amax_o) = (0.0f64, 0.0f64);

    let q = geometry(graph, bundle, a.q_tensor_uid, SeqAxis::Two)?;
    let o = geometry(graph, bundle, a.o_tensor_uid, SeqAxis::Two)?;
    let s_q_max = graph.tensor(a.q_tensor_uid).map_or(0, |t| {
        let ragged_axis = seq_axis_from_strides(&t.dims, &t.strides);
        match (t.is_ragged(), ragged_axis) {
            (true, SeqAxis::One) => t.dims[1],
            _ => t.dims[2],
        }
    });
    let lse = a
        .stats_tensor_uid
        .map(|uid| stats_geometry(graph, bundle, uid, &q, s_q_max))
        .transpose()?;
    let paging = match (a.page_table_k_tensor_uid, a.page_table_v_tensor_uid) {
        (None, None) => None,
        (Some(k), Some(v)) => Some((k, v)),
        _ => return Err("exactly one page table is set".into()),
    };
    let (q, o, lse, k, v, lq, lkv) = match paging {
        None => {
            let k = geometry(graph, bundle, a.k_tensor_uid, SeqAxis::Two)?;
            let v = geometry(graph, bundle, a.v_tensor_uid, SeqAxis::Two)?;
            let lq = lengths(bundle, &q, a.seq_len_q_tensor_uid)?;
            let lkv = lengths(bundle, &k, a.seq_len_kv_tensor_uid)?;
            (q, o, lse, Keys::Plain(k), Keys::Plain(v), lq, lkv)
        }
        Some((table_k, table_v)) => {
            let given = |uid: Option<i64>, what: &str| -> Result<Vec<usize>, String> {
                let uid = uid.ok_or_else(|| format!("a paged graph without {what}"))?;
                integers(tensor(bundle, uid)?, uid)?
                    .into_iter()
                    .map(|l| usize::try_from(l).map_err(|_| format!("{what} uid {uid} holds {l}")))
                    .collect()
            };
            let lq = given(a.seq_len_q_tensor_uid, "seq_len_q")?;
            let lkv = given(a.seq_len_kv_tensor_uid, "seq_len_kv")?;
            let batch = lkv.len();
            let one_row = q.extent.len() == 1 && batch != 1;
            let is_ragged = graph.tensor(a.q_tensor_uid).is_some_and(|t| t.is_ragged());
            let (q, o, lse) = if one_row && !is_ragged {
                let lse = lse.map(|l| packed(l, &lq)).transpose()?;
                (packed(q, &lq)?, packed(o, &lq)?, lse)
            } else {
                (q, o, lse)
            };
            for (b, (&len, &extent)) in lq.iter().zip(&q.extent).enumerate() {
                if len as i64 > extent {
                    return Err(format!("seq_len_q[{b}] = {len} above Q's {extent} rows"));
                }
            }
            let pool = |uid: i64, table_uid: i64| -> Result<Keys, String> {
                let attrs = graph
                    .tensor(uid)
                    .ok_or_else(|| format!("pool uid {uid} is not in the graph"))?;
                let table = page_table(graph, bundle, table_uid)?;
                let page_size = attrs.dims.get(2).copied().unwrap_or(0);
                let capacity = table.first().map_or(0, Vec::len) as i64 * page_size;
                let bound = a
                    .max_seq_len_kv
                    .map_or(capacity, |m| capacity.min(m.into()));
                if table.len() != batch {
                    return Err(format!(
                        "page table uid {table_uid} has {} rows for {batch} sequences",
                        table.len()
                    ));
                }
                if let Some(b) = lkv.iter().position(|&l| l as i64 > bound) {
                    return Err(format!(
                        "seq_len_kv[{b}] = {} is above the {bound} keys a sequence may hold",
                        lkv[b]
                    ));
                }
                Ok(Keys::Paged {
                    uid,
                    dims: attrs.dims.clone(),
                    strides: attrs.strides.clone(),
                    table,
                    table_uid,
                    len: tensor(bundle, uid)?.host_data().len(),
                })
            };
            let k = pool(a.k_tensor_uid, table_k)?;
            let v = pool(a.v_tensor_uid, table_v)?;
            (q, o, lse, k, v, lq, lkv)
        }
    };
    let batch = lq.len();
    if [q.extent.len(), o.extent.len(), lkv.len()] != [batch; 3]
        || k.heads() == 0
        || q.heads % k.heads() != 0
        || v.heads() != k.heads()
        || k.width() != q.width
        || o.heads != q.heads
        || o.width != v.width()
    {
        return Err(format!(
            "shapes disagree: Q {}x{} K {}x{} V {}x{} O {}x{} (heads x width) over B = {batch}",
            q.heads,
            q.width,
            k.heads(),
            k.width(),
            v.heads(),
            v.width(),
            o.heads,
            o.width
        ));
    }
    let sinks = a
        .sink_token_tensor_uid
        .map(|uid| sink_logits(graph, bundle, uid, q.heads))
        .transpose()?;
    let (qd, kd, vd) = (
        floats(tensor(bundle, q.uid)?, q.uid)?,
        floats(tensor(bundle, k.uid())?, k.uid())?,
        floats(tensor(bundle, v.uid())?, v.uid())?,
    );
    let group = q.heads / k.heads();

    let mut out_o = Vec::new();
    let mut out_lse = Vec::new();
    let mut scores = Vec::new();
    for b in 0..batch {
        let offset = if bottom_right {
            lkv[b] as i64 - lq[b] as i64
        } else {
            0
        };
        for h in 0..q.heads {
            let g = h / group;
            // The sink is one more logit in the denominator with no value (§6.2).
            let sink = sinks.as_ref().map_or(f64::NEG_INFINITY, |s| s[h]);
            for i in 0..lq[b] {
                scores.clear();
                for j in 0..lkv[b] {
                    let (i_, j_) = (i as i64, j as i64);
                    let masked = (right >= 0 && j_ > i_ + offset + right)
                        || (left >= 0 && j_ < i_ + offset - left);
                    if masked {
                        continue;
                    }
                    let mut dot = 0.0;
                    for d in 0..q.width {
                        dot += qd[q.position(b, i, h, d)?] * kd[k.position(b, j, g, d)?];
                    }
                    scores.push((j, dot * score_descale * scale));
                }
                let max = scores.iter().map(|&(_, s)| s).fold(sink, f64::max);
                let (weight, lse_value) = if sink.is_nan() {
                    (f64::NAN, f64::NAN)
                } else if max == f64::INFINITY {
                    // An infinite sink takes every weight (§6.4, project choice).
                    (0.0, f64::INFINITY)
                } else if max == f64::NEG_INFINITY {
                    // No admitted key and no (finite) sink.
                    (0.0, f64::NEG_INFINITY)
                } else {
                    let sum: f64 = (sink - max).exp()
                        + scores.iter().map(|&(_, s)| (s - max).exp()).sum::<f64>();
                    (1.0 / sum, max + sum.ln())
                };
                // P per admitted key; FP8: amax_s takes it before any scale, then step 4's
                // quantization replaces it by q(P · scale_s) · descale_s.
                let mut probabilities = Vec::with_capacity(scores.len());
                for &(_, s) in &scores {
                    let p = if weight == 0.0 {
                        0.0
                    } else {
                        (s - max).exp() * weight
                    };
                    amax_s = nan_max(amax_s, p);
                    probabilities.push(match fp8.as_ref().and_then(|f| f.softmax.as_ref()) {
                        Some((scale_s, descale_s, table)) => {
                            table.quantize(p * scale_s) * descale_s
                        }
                        None => p,
                    });
                }
                for d in 0..o.width {
                    let mut acc = 0.0;
                    for (&(j, _), &p) in scores.iter().zip(&probabilities) {
                        acc += p * vd[v.position(b, j, g, d)?];
                    }
                    if weight.is_nan() {
                        acc = f64::NAN;
                    }
                    if let Some(f) = &fp8 {
                        acc *= f.descale_v;
                        amax_o = nan_max(amax_o, acc.abs());
                        acc *= f.scale_o;
                    }
                    out_o.push((o.position(b, i, h, d)?, acc));
                }
                if let Some(lse) = &lse {
                    out_lse.push((lse.position(b, i, h, 0)?, lse_value));
                }
            }
        }
    }
    let mut writes = vec![Writes {
        uid: o.uid,
        values: out_o,
    }];
    if let Some(lse) = lse {
        writes.push(Writes {
            uid: lse.uid,
            values: out_lse,
        });
    }
    if fp8.is_some() {
        for (uid, value) in [(a.amax_s_tensor_uid, amax_s), (a.amax_o_tensor_uid, amax_o)] {
            if let Some(uid) = uid {
                writes.push(Writes {
                    uid,
                    values: vec![(0, value)],
                });
            }
        }
    }
    Ok(writes)
}

/// Stores the oracle's values into the bundle's own output buffers (rounded to nearest even in
/// their element type, FP8 through the oracle's own tables), leaving every other position as it
/// was.
pub fn store(bundle: &mut Bundle, writes: &[Writes]) -> Result<(), String> {
    for w in writes {
        let t = bundle
            .writable(w.uid)
            .map_err(|e| format!("output uid {}: {e}", w.uid))?;
        let data = t.host_data_mut();
        for &(position, _) in &w.values {
            let stored = match &data {
                HostDataMut::F32(s) => s.len(),
                HostDataMut::F16(s) => s.len(),
                HostDataMut::BF16(s) => s.len(),
                HostDataMut::Fp8(_, s) => s.len(),
                _ => 0,
            };
            if position >= stored {
                return Err(format!(
                    "output uid {}: position {position} outside its buffer",
                    w.uid
                ));
            }
        }
        match data {
            HostDataMut::F32(s) => w.values.iter().for_each(|&(p, v)| s[p] = v as f32),
            HostDataMut::F16(s) => w.values.iter().for_each(|&(p, v)| s[p] = f16::from_f64(v)),
            HostDataMut::BF16(s) => w.values.iter().for_each(|&(p, v)| s[p] = bf16::from_f64(v)),
            HostDataMut::Fp8(format, s) => {
                let table = fp8::Fp8Table::new(format);
                w.values.iter().for_each(|&(p, v)| s[p] = table.round(v));
            }
            _ => return Err(format!("output uid {} is not floating point", w.uid)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
