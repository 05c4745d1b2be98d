//! Multi-node graphs around ragged SDPA (RFC §4.9): SDPA whose O is a virtual intermediate on
//! Q's aux feeding pointwise nodes, and a pointwise-only ragged graph. Built on
//! [`RaggedSdpaSpec`], so each comes in both ragged dims orders over the same memory
//! (`bhsd_dims`) and with the spec's batches, heads and types; the conformance suite and the
//! shim's tests share them.

use ragged_schema::model::{
    DataType, Graph, Node, PointwiseAttributes, PointwiseMode, TensorAttributes, TensorValue,
};

use crate::HostError;
use crate::case_inputs::pre_supplied;
use crate::graphs::{RaggedSdpaSpec, uid as sdpa_uid};
use crate::harness::PreSuppliedInputs;

/// Uids of the tensors the chains add (the SDPA part keeps [`crate::graphs::uid`]).
pub mod uid {
    /// A ragged residual on Q's aux.
    pub const RESIDUAL: i64 = 20;
    /// The graph's final output.
    pub const Y: i64 = 21;
    /// A scalar factor baked into the graph.
    pub const FACTOR: i64 = 22;
    /// A virtual intermediate between two pointwise nodes.
    pub const SCALED: i64 = 23;
    /// A dense `[1, 1, 1, D]` tensor broadcast over a ragged one.
    pub const BIAS: i64 = 24;
}

/// The factor of [`Chain::ScaleThenResidual`].
pub const FACTOR: f32 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// `Y = SDPA(Q, K, V) + R`, O virtual.
    Residual,
    /// `Y = SDPA(Q, K, V) · FACTOR + R`, O and the product virtual.
    ScaleThenResidual,
    /// `Y = max(Q · R, BIAS)`, no SDPA: the product virtual, BIAS dense and broadcast.
    PointwiseOnly,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MultiNodeSpec {
    pub name: String,
    pub sdpa: RaggedSdpaSpec,
    pub chain: Chain,
}

/// A tensor shaped like `like` (dims, strides, type, aux) under a new uid and name.
fn shaped_like(like: &TensorAttributes, uid: i64, name: &str) -> TensorAttributes {
    let mut t = like.clone();
    t.uid = uid;
    t.name = name.to_owned();
    t
}

fn tensor_of(graph: &Graph, uid: i64) -> Result<TensorAttributes, HostError> {
    graph
        .tensor(uid)
        .cloned()
        .ok_or_else(|| HostError::Harness(format!("the SDPA graph has no tensor uid {uid}")))
}

impl MultiNodeSpec {
    pub fn new(name: &str, sdpa: RaggedSdpaSpec, chain: Chain) -> MultiNodeSpec {
        MultiNodeSpec {
            name: name.to_owned(),
            sdpa,
            chain,
        }
    }

    pub fn graph(&self) -> Result<Graph, HostError> {
        let base = self.sdpa.graph();
        let q = tensor_of(&base, sdpa_uid::Q)?;
        let o = tensor_of(&base, sdpa_uid::O)?;
        let add = |a: &TensorAttributes, b: &TensorAttributes, out: &TensorAttributes| {
            PointwiseAttributes::binary(PointwiseMode::ADD, a, b, out)
        };
        let mut graph = match self.chain {
            Chain::Residual | Chain::ScaleThenResidual => {
                let mut graph = base.clone();
                graph.name = self.name.clone();
                for t in graph.tensors.iter_mut().filter(|t| t.uid == o.uid) {
                    t.is_virtual = true;
                }
                let residual = shaped_like(&o, uid::RESIDUAL, "residual");
                let y = shaped_like(&o, uid::Y, "y");
                graph = graph.add_tensor(residual.clone()).add_tensor(y.clone());
                if self.chain == Chain::Residual {
                    graph.add_node(Node::pointwise("residual", add(&o, &residual, &y)))
                } else {
                    let factor = TensorAttributes::new()
                        .set_uid(uid::FACTOR)
                        .set_name("factor")
                        .set_data_type(DataType::Float)
                        .set_dims(vec![1, 1, 1, 1])
                        .set_strides(vec![1, 1, 1, 1])
                        .set_value(TensorValue::Float32(FACTOR));
                    let scaled = shaped_like(&o, uid::SCALED, "scaled").set_is_virtual(true);
                    let mul = PointwiseAttributes::binary(PointwiseMode::MUL, &o, &factor, &scaled);
                    graph
                        .add_tensor(factor)
                        .add_tensor(scaled.clone())
                        .add_node(Node::pointwise("scale", mul))
                        .add_node(Node::pointwise("residual", add(&scaled, &residual, &y)))
                }
            }
            Chain::PointwiseOnly => {
                let aux = q.ragged_offset_tensor_uid.ok_or_else(|| {
                    HostError::Harness("the SDPA graph's Q is not ragged".to_owned())
                })?;
                let residual = shaped_like(&q, uid::RESIDUAL, "residual");
                let scaled = shaped_like(&q, uid::SCALED, "product").set_is_virtual(true);
                let y = shaped_like(&q, uid::Y, "y");
                let bias_dims = vec![1, 1, 1, self.sdpa.head_dim];
                let bias = TensorAttributes::new()
                    .set_uid(uid::BIAS)
                    .set_name("bias")
                    .set_data_type(q.data_type)
                    .set_strides(TensorAttributes::packed_strides(&bias_dims))
                    .set_dims(bias_dims);
                let mul = PointwiseAttributes::binary(PointwiseMode::MUL, &q, &residual, &scaled);
                let max = PointwiseAttributes::binary(PointwiseMode::MAX_OP, &scaled, &bias, &y);
                let mut graph = Graph::new(self.name.clone()).set_data_types(
                    self.sdpa.io_type,
                    DataType::Float,
                    DataType::Float,
                );
                graph.is_ragged_tensor_enabled = true;
                graph
                    .add_tensor(tensor_of(&base, aux)?)
                    .add_tensor(q)
                    .add_tensor(residual)
                    .add_tensor(scaled)
                    .add_tensor(bias)
                    .add_tensor(y)
                    .add_node(Node::pointwise("product", mul))
                    .add_node(Node::pointwise("floor", max))
            }
        };
        graph.is_ragged_tensor_enabled = true;
        Ok(graph)
    }

    /// The auxes (and seq_lens) the harness needs pre-supplied.
    pub fn pre_supplied(&self) -> Result<PreSuppliedInputs, HostError> {
        let mut pre = pre_supplied(&self.sdpa)?;
        if self.chain == Chain::PointwiseOnly {
            let keep = self.sdpa.aux_uids().0;
            pre.retain(|&uid, _| uid == keep);
        }
        Ok(pre)
    }
}

/// The fixed multi-node cases: each chain in both ragged dims orders, GQA and f32 variants.
pub fn cases() -> Vec<MultiNodeSpec> {
    let sdpa = |name: &str, bhsd: bool| RaggedSdpaSpec {
        heads_q: 4,
        heads_kv: 2,
        head_dim: 16,
        bhsd_dims: bhsd,
        ..RaggedSdpaSpec::packed(name, &[3, 0, 5], &[4, 2, 6])
    };
    let mut out = Vec::new();
    for (order, bhsd) in [("bshd_dims", false), ("bhsd_dims", true)] {
        for (chain, label) in [
            (Chain::Residual, "sdpa_residual_add"),
            (Chain::ScaleThenResidual, "sdpa_scale_add"),
            (Chain::PointwiseOnly, "pointwise_only"),
        ] {
            let name = format!("{label}_{order}");
            out.push(MultiNodeSpec::new(&name, sdpa(&name, bhsd), chain));
        }
    }
    let f32_causal = RaggedSdpaSpec {
        io_type: DataType::Float,
        mask: crate::graphs::Mask::CausalBottomRight,
        ..sdpa("sdpa_scale_add_f32_causal", false)
    };
    out.push(MultiNodeSpec::new(
        "sdpa_scale_add_f32_causal",
        f32_causal,
        Chain::ScaleThenResidual,
    ));
    // seq_len_q below the extents: O's padding rows stay unwritten, so the add's elements there
    // are undefined (any value is right) while the rest must match.
    let padded = RaggedSdpaSpec {
        seq_len_q: Some(vec![2, 0, 5]),
        seq_len_kv: Some(vec![4, 1, 3]),
        ..sdpa("sdpa_residual_add_padded_seq_lens", true)
    };
    out.push(MultiNodeSpec::new(
        "sdpa_residual_add_padded_seq_lens",
        padded,
        Chain::Residual,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::GraphHarness;

    #[test]
    fn every_case_validates_and_the_executor_runs_it() {
        for case in cases() {
            let graph = case
                .graph()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            if let Err(e) = graph.validate() {
                panic!("case {}: {e}", case.name);
            }
            let pre = case
                .pre_supplied()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let mut h =
                GraphHarness::new(graph, &pre, 1).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let report = h
                .run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert!(
                report.allocated.is_empty(),
                "the harness binds every virtual"
            );
            assert!(h.outputs.contains(&uid::Y), "{}", case.name);
        }
    }
}
