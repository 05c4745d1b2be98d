//! Which engines can run a graph (`GetApplicableEngineIds`), and the plan they would run.
//!
//! Three outcomes, kept apart on purpose:
//! - the bytes are not a graph at all ⇒ `PluginError::Malformed` (BAD_PARAM). Issue 4 chose this
//!   over schema.md §11's "unverifiable ⇒ 0 engines" because a corrupt buffer is a caller bug
//!   worth surfacing;
//! - a graph this plugin does not handle (other ops, unknown union tags or enum values, features
//!   we do not implement, a newer stamp) ⇒ a [`Decline`]: SUCCESS with 0 engines, reason logged at
//!   INFO — schema evolution must never turn into errors;
//! - a supported single-node SDPA forward ⇒ an [`SdpaPlan`] holding copies of all it needs.

use ragged_schema::version::{
    PROJECT_PLUGIN_API_VERSION, compute_minimum_plugin_api_version, graph_stamp,
    plugin_meets_requirement, stamp_exceeds_ceiling,
};
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, NodeAttributes, SchemaError, SdpaAttributes,
    TensorAttributes, TensorValue,
};

use crate::abi::types::Severity;
use crate::engine_plan::{self, EnginePlan};
use crate::engines::{self, Engine};
use crate::error::PluginError;
use crate::logging;
use crate::plan::{BandPlan, IndexPlan, RaggedPlan, ScalePlan, SdpaPlan, TensorPlan};

/// Why a well-formed graph is not ours; shown in INFO logs and in errors of the calls that
/// require an applicable graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline(pub String);

macro_rules! decline {
    ($($arg:tt)*) => { return Err(Decline(format!($($arg)*))) };
}

/// The listed engines that run this graph, in listing (preference) order; empty for a declined
/// graph. Each engine that declines a graph the plugin accepts logs its own reason.
pub fn applicable_engines(bytes: &[u8]) -> Result<Vec<&'static Engine>, PluginError> {
    let sdpa = match decode(bytes)?.and_then(|graph| plan(&graph)) {
        Ok(sdpa) => sdpa,
        Err(Decline(reason)) => {
            logging::log(Severity::INFO, || format!("declining graph: {reason}"));
            return Ok(Vec::new());
        }
    };
    Ok(engines::listed()
        .iter()
        .copied()
        .filter(|engine| match engine_plan::for_engine(engine, &sdpa) {
            Ok(_) => true,
            Err(Decline(reason)) => {
                logging::log(Severity::INFO, || {
                    format!("{} declines the graph: {reason}", engine.name_str())
                });
                false
            }
        })
        .collect())
}

/// The plans for `engine`, or an error naming why the engine cannot run this graph.
pub fn require(
    engine: &'static Engine,
    bytes: &[u8],
) -> Result<(SdpaPlan, EnginePlan), PluginError> {
    decode(bytes)?
        .and_then(|graph| plan(&graph))
        .and_then(|sdpa| engine_plan::for_engine(engine, &sdpa).map(|p| (sdpa, p)))
        .map_err(|Decline(reason)| PluginError::NotApplicable {
            engine: engine.name_str(),
            reason,
        })
}

/// Bytes → graph model. Outer error: malformed bytes; inner: a decline (e.g. an unknown
/// `TensorValue` tag, a newer member we cannot read).
fn decode(bytes: &[u8]) -> Result<Result<Graph, Decline>, PluginError> {
    match ragged_schema::wire::decode_graph(bytes) {
        Ok(graph) => Ok(Ok(graph)),
        Err(error @ SchemaError::UnknownTensorValueTag { .. }) => {
            Ok(Err(Decline(error.to_string())))
        }
        Err(SchemaError::Validation(error)) => Ok(Err(Decline(error.to_string()))),
        Err(error) => Err(PluginError::Malformed {
            what: "op_graph",
            detail: error.to_string(),
        }),
    }
}

/// Graph model → plan, or the first reason to decline.
pub fn plan(graph: &Graph) -> Result<SdpaPlan, Decline> {
    check_versions(graph)?;
    let sdpa = single_sdpa_node(graph)?;
    if let Err(error) = graph.validate() {
        decline!("{error}");
    }
    check_unsupported_features(sdpa)?;

    let tensor = |role: &'static str, uid: i64| tensor_plan(graph, role, uid);
    let q = tensor("q_tensor_uid", sdpa.q_tensor_uid)?;
    let k = tensor("k_tensor_uid", sdpa.k_tensor_uid)?;
    let v = tensor("v_tensor_uid", sdpa.v_tensor_uid)?;
    let o = tensor("o_tensor_uid", sdpa.o_tensor_uid)?;
    check_io_types(&[&q, &k, &v, &o])?;
    let shape = check_shapes(&q, &k, &v, &o)?;

    let stats = match (sdpa.stats_tensor_uid, sdpa.generate_stats) {
        (Some(uid), _) => Some(stats_plan(graph, uid, &shape)?),
        (None, Some(true)) => decline!("generate_stats is true but stats_tensor_uid is unset"),
        (None, _) => None,
    };

    let seq_len_q = index_plan(graph, "seq_len_q_tensor_uid", sdpa.seq_len_q_tensor_uid)?;
    let seq_len_kv = index_plan(graph, "seq_len_kv_tensor_uid", sdpa.seq_len_kv_tensor_uid)?;
    if sdpa.padding_mask && (seq_len_q.is_none() || seq_len_kv.is_none()) {
        decline!(
            "padding_mask is true but seq_len_q_tensor_uid and seq_len_kv_tensor_uid are not both set"
        );
    }

    let sdpa_plan = SdpaPlan {
        q,
        k,
        v,
        o,
        stats,
        seq_len_q,
        seq_len_kv,
        scale: scale_plan(graph, sdpa)?,
        band: band_plan(sdpa)?,
    };
    crate::byte_extents::check(&sdpa_plan).map_err(Decline)?;
    Ok(sdpa_plan)
}

fn check_versions(graph: &Graph) -> Result<(), Decline> {
    if stamp_exceeds_ceiling(graph) {
        decline!(
            "graph is stamped min_required_engine_api_version {}, above the supported ceiling {}",
            graph_stamp(graph),
            ragged_schema::version::MAX_SUPPORTED_API_VERSION
        );
    }
    if graph.is_override_shape_enabled {
        decline!(
            "is_override_shape_enabled is true and this plugin does not export \
             hipdnnEnginePluginExecuteOpGraphWithOverrides"
        );
    }
    if !plugin_meets_requirement(&PROJECT_PLUGIN_API_VERSION, graph) {
        let need = compute_minimum_plugin_api_version(graph);
        decline!(
            "graph needs engine API {} and this plugin implements {PROJECT_PLUGIN_API_VERSION}",
            need.version
        );
    }
    Ok(())
}

fn single_sdpa_node(graph: &Graph) -> Result<&SdpaAttributes, Decline> {
    let [node] = graph.nodes.as_slice() else {
        decline!(
            "graph has {} nodes; this plugin runs exactly one SdpaAttributes node",
            graph.nodes.len()
        );
    };
    match &node.attributes {
        NodeAttributes::Sdpa(sdpa) => Ok(sdpa),
        NodeAttributes::None => decline!("node {:?} has no attributes (union tag NONE)", node.name),
        NodeAttributes::Unsupported { tag, name } => {
            decline!(
                "node {:?} is {name} (union tag {tag}), not SdpaAttributes",
                node.name
            )
        }
    }
}

fn check_unsupported_features(sdpa: &SdpaAttributes) -> Result<(), Decline> {
    let unsupported_uids = [
        ("attn_mask_tensor_uid", sdpa.attn_mask_tensor_uid),
        ("seed_tensor_uid", sdpa.seed_tensor_uid),
        ("offset_tensor_uid", sdpa.offset_tensor_uid),
        ("dropout_mask_tensor_uid", sdpa.dropout_mask_tensor_uid),
        ("dropout_scale_tensor_uid", sdpa.dropout_scale_tensor_uid),
        ("page_table_k_tensor_uid", sdpa.page_table_k_tensor_uid),
        ("page_table_v_tensor_uid", sdpa.page_table_v_tensor_uid),
        ("block_mask_tensor_uid", sdpa.block_mask_tensor_uid),
        ("sink_token_tensor_uid", sdpa.sink_token_tensor_uid),
        ("descale_q_tensor_uid", sdpa.descale_q_tensor_uid),
        ("descale_k_tensor_uid", sdpa.descale_k_tensor_uid),
        ("descale_v_tensor_uid", sdpa.descale_v_tensor_uid),
        ("descale_s_tensor_uid", sdpa.descale_s_tensor_uid),
        ("scale_s_tensor_uid", sdpa.scale_s_tensor_uid),
        ("scale_o_tensor_uid", sdpa.scale_o_tensor_uid),
        ("max_tensor_uid", sdpa.max_tensor_uid),
        ("sum_exp_tensor_uid", sdpa.sum_exp_tensor_uid),
        ("rng_dump_tensor_uid", sdpa.rng_dump_tensor_uid),
        ("amax_s_tensor_uid", sdpa.amax_s_tensor_uid),
        ("amax_o_tensor_uid", sdpa.amax_o_tensor_uid),
    ];
    if let Some((field, Some(uid))) = unsupported_uids.iter().find(|(_, uid)| uid.is_some()) {
        decline!("{field} is set (tensor uid {uid}); that SDPA feature is not supported");
    }
    if sdpa.alibi_mask {
        decline!("alibi_mask is true; ALiBi is not supported");
    }
    // Only an exact 0 means "no dropout": a NaN or negative probability is no probability at
    // all, and `p > 0.0` would have let both through as if dropout were off.
    if let Some(p) = sdpa.dropout_probability.filter(|p| *p != 0.0) {
        decline!("dropout_probability is {p}; only 0 (no dropout) is supported");
    }
    Ok(())
}

fn tensor_attributes<'g>(
    graph: &'g Graph,
    role: &'static str,
    uid: i64,
) -> Result<&'g TensorAttributes, Decline> {
    match graph.tensor(uid) {
        Some(t) => Ok(t),
        None => decline!("{role} refers to tensor uid {uid}, which is not in the graph"),
    }
}

fn four(values: &[i64], what: &str, role: &str, uid: i64) -> Result<[i64; 4], Decline> {
    match <[i64; 4]>::try_from(values) {
        Ok(four) => Ok(four),
        Err(_) => decline!("{role} tensor uid {uid}: {what} {values:?} must have 4 entries"),
    }
}

fn tensor_plan(graph: &Graph, role: &'static str, uid: i64) -> Result<TensorPlan, Decline> {
    let t = tensor_attributes(graph, role, uid)?;
    if t.is_virtual {
        decline!("{role} tensor uid {uid} is virtual; a single-node graph binds every tensor");
    }
    if t.alignment < 1 {
        decline!(
            "{role} tensor uid {uid}: alignment {} must be >= 1",
            t.alignment
        );
    }
    let dims = four(&t.dims, "dims", role, uid)?;
    let strides = four(&t.strides, "strides", role, uid)?;
    if let Some(d) = dims.iter().find(|d| **d < 0) {
        decline!("{role} tensor uid {uid}: negative dim {d} in {dims:?}");
    }
    if let Some(s) = strides.iter().find(|s| **s < 0) {
        decline!("{role} tensor uid {uid}: negative stride {s} in {strides:?}");
    }
    let ragged = match t.ragged_offset_tensor_uid {
        None => None,
        Some(aux_uid) => Some(ragged_plan(graph, role, t, dims, strides, aux_uid)?),
    };
    Ok(TensorPlan {
        uid,
        role,
        data_type: t.data_type,
        dims,
        strides,
        alignment: t.alignment,
        ragged,
    })
}

/// Ragged primaries are packed BSHD (ragged-sdpa.md §1): dims `[B, S_max, H, D]`, strides
/// `{·, H·D, D, 1}`. The older `[B, H, S, D]`-with-BSHD-strides form is declined by name.
fn ragged_plan(
    graph: &Graph,
    role: &'static str,
    t: &TensorAttributes,
    dims: [i64; 4],
    strides: [i64; 4],
    aux_uid: i64,
) -> Result<RaggedPlan, Decline> {
    let uid = t.uid;
    let [_, _, h, d] = dims;
    let packed = [h.saturating_mul(d), d, 1];
    if strides[1..] != packed {
        if strides[1] == d && strides[3] == 1 {
            decline!(
                "{role} tensor uid {uid} is ragged with dims {dims:?} and strides {strides:?}: \
                 that is the older [B, H, S, D] form; ragged tensors must be [B, S, H, D] \
                 (sequence axis 1) with packed strides"
            );
        }
        decline!(
            "{role} tensor uid {uid} is ragged with strides {strides:?}; ragged tensors must be \
             packed [B, S, H, D] with strides [_, {}, {}, 1]",
            packed[0],
            packed[1]
        );
    }
    let aux = tensor_attributes(graph, "ragged_offset_tensor_uid", aux_uid)?;
    if !aux.data_type.is_index_type() {
        decline!(
            "ragged offset tensor uid {aux_uid} (of {role} uid {uid}) has data type {}; int32 or int64 required",
            aux.data_type
        );
    }
    let Some(entries) = dims[0].checked_add(1) else {
        decline!(
            "{role} tensor uid {uid}: dims[0] (the batch B) = {} leaves no room for B + 1 ragged offsets",
            dims[0]
        );
    };
    if aux.dims != [entries, 1, 1, 1] {
        decline!(
            "ragged offset tensor uid {aux_uid} (of {role} uid {uid}) has dims {:?}; [B + 1, 1, 1, 1] = [{entries}, 1, 1, 1] required",
            aux.dims
        );
    }
    if t.ragged_offset_multiplier < 1 {
        decline!(
            "{role} tensor uid {uid}: ragged_offset_multiplier {} must be >= 1",
            t.ragged_offset_multiplier
        );
    }
    Ok(RaggedPlan {
        aux_uid,
        aux_data_type: aux.data_type,
        multiplier: t.ragged_offset_multiplier,
    })
}

fn check_io_types(tensors: &[&TensorPlan]) -> Result<(), Decline> {
    let first = tensors[0];
    if !matches!(
        first.data_type,
        DataType::Float | DataType::Half | DataType::BFloat16
    ) {
        decline!(
            "{} tensor uid {} has data type {}; float, half or bfloat16 required",
            first.role,
            first.uid,
            first.data_type
        );
    }
    if let Some(other) = tensors.iter().find(|t| t.data_type != first.data_type) {
        decline!(
            "{} tensor uid {} has data type {} but {} uid {} has {}; Q, K, V and O must match",
            other.role,
            other.uid,
            other.data_type,
            first.role,
            first.uid,
            first.data_type
        );
    }
    Ok(())
}

/// Logical sizes, read through each tensor's layout.
struct Shape {
    batch: i64,
    heads_q: i64,
    seq_q: i64,
}

/// (B, S, H, D) of a Q/K/V/O tensor: ragged tensors are `[B, S, H, D]`, dense `[B, H, S, D]`.
fn bshd(t: &TensorPlan) -> [i64; 4] {
    let [b, x, y, d] = t.dims;
    if t.ragged.is_some() {
        [b, x, y, d]
    } else {
        [b, y, x, d]
    }
}

fn check_shapes(
    q: &TensorPlan,
    k: &TensorPlan,
    v: &TensorPlan,
    o: &TensorPlan,
) -> Result<Shape, Decline> {
    let [bq, sq, hq, dq] = bshd(q);
    let [bk, sk, hk, dk] = bshd(k);
    let [bv, sv, hv, dv] = bshd(v);
    let [bo, so, ho, d_o] = bshd(o);
    if [bk, bv, bo] != [bq; 3] {
        decline!("batch sizes differ: Q {bq}, K {bk}, V {bv}, O {bo}");
    }
    if bq < 1 || sq < 1 || sk < 1 {
        decline!("B = {bq}, S_q = {sq}, S_kv = {sk}; each must be >= 1");
    }
    if hq < 1 || hk < 1 || dq < 1 || dv < 1 {
        decline!(
            "head counts (H_q {hq}, H_kv {hk}) and head dims (D_qk {dq}, D_v {dv}) must be >= 1"
        );
    }
    if hk != hv || sk != sv {
        decline!("K (H {hk}, S {sk}) and V (H {hv}, S {sv}) must have equal heads and lengths");
    }
    if hq % hk != 0 {
        decline!("H_q = {hq} is not a multiple of H_kv = {hk}");
    }
    if dk != dq {
        decline!("Q head dim {dq} differs from K head dim {dk}");
    }
    if [ho, so, d_o] != [hq, sq, dv] {
        decline!(
            "O (H {ho}, S {so}, D {d_o}) must match Q's heads and length and V's head dim (H {hq}, S {sq}, D {dv})"
        );
    }
    Ok(Shape {
        batch: bq,
        heads_q: hq,
        seq_q: sq,
    })
}

/// LSE: FLOAT, dense `[B, H_q, S_q, 1]` or ragged token-major `[B, S_q, H_q, 1]`.
fn stats_plan(graph: &Graph, uid: i64, shape: &Shape) -> Result<TensorPlan, Decline> {
    let stats = tensor_plan(graph, "stats_tensor_uid", uid)?;
    if stats.data_type != DataType::Float {
        decline!(
            "stats_tensor_uid tensor uid {uid} has data type {}; float required",
            stats.data_type
        );
    }
    let expected = if stats.ragged.is_some() {
        [shape.batch, shape.seq_q, shape.heads_q, 1]
    } else {
        [shape.batch, shape.heads_q, shape.seq_q, 1]
    };
    if stats.dims != expected {
        decline!(
            "stats_tensor_uid tensor uid {uid} has dims {:?}; {expected:?} required",
            stats.dims
        );
    }
    Ok(stats)
}

fn index_plan(
    graph: &Graph,
    role: &'static str,
    uid: Option<i64>,
) -> Result<Option<IndexPlan>, Decline> {
    let Some(uid) = uid else { return Ok(None) };
    let t = tensor_attributes(graph, role, uid)?;
    if !t.data_type.is_index_type() {
        decline!(
            "{role} tensor uid {uid} has data type {}; int32 or int64 required",
            t.data_type
        );
    }
    Ok(Some(IndexPlan {
        uid,
        role,
        data_type: t.data_type,
    }))
}

fn scale_plan(graph: &Graph, sdpa: &SdpaAttributes) -> Result<ScalePlan, Decline> {
    if let Some(uid) = sdpa.scale_tensor_uid {
        let t = tensor_attributes(graph, "scale_tensor_uid", uid)?;
        if let Some(value) = t.value {
            // A Float8Value is the fp8 encoding byte, in a format (e4m3, e5m2, ...) the value
            // does not say; read as a number, 0x38 (1.0 in e4m3) would become a scale of 56.
            if let TensorValue::Float8(bits) = value {
                decline!(
                    "scale_tensor_uid tensor uid {uid} holds a Float8Value (encoding {bits:#04x}); \
                     an fp8-encoded scale is not supported"
                );
            }
            return Ok(ScalePlan::Fixed(value.as_f64() as f32));
        }
        if !matches!(
            t.data_type,
            DataType::Float | DataType::Half | DataType::BFloat16 | DataType::Double
        ) {
            decline!(
                "scale_tensor_uid tensor uid {uid} has data type {}; a floating-point scalar required",
                t.data_type
            );
        }
        // Every dim 1 (or rank 0): a product of wire dims could overflow, and [-1, -1]
        // multiplies to 1 without being a scalar.
        if t.dims.iter().any(|&d| d != 1) {
            decline!(
                "scale_tensor_uid tensor uid {uid} has dims {:?}; a scalar required",
                t.dims
            );
        }
        let data_type = t.data_type;
        return Ok(if t.is_runtime_pass_by_value {
            ScalePlan::RuntimeHostScalar { uid, data_type }
        } else {
            ScalePlan::DeviceTensor { uid, data_type }
        });
    }
    Ok(ScalePlan::Fixed(sdpa.attn_scale_value.unwrap_or(1.0)))
}

fn band_plan(sdpa: &SdpaAttributes) -> Result<BandPlan, Decline> {
    let band = match sdpa.resolve_diagonal_band() {
        Ok(band) => band,
        Err(error) => decline!("{error}"),
    };
    let bottom_right = match band.alignment {
        DiagonalAlignment::TopLeft => false,
        DiagonalAlignment::BottomRight => true,
        DiagonalAlignment::Unknown(v) => decline!("diagonal_alignment has unknown value {v}"),
    };
    Ok(BandPlan {
        left: band.left,
        right: band.right,
        bottom_right,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_schema::EngineApiVersion;

    use crate::test_graphs::{golden, sdpa};

    fn reason(graph: &Graph) -> String {
        match plan(graph) {
            Ok(_) => "accepted".to_owned(),
            Err(Decline(reason)) => reason,
        }
    }

    /// The golden graph (graph.json in shared/testdata/wire) as the plan must copy it.
    #[test]
    fn golden_plan_copies_every_field_the_engine_needs() {
        let plan = match plan(&golden()) {
            Ok(plan) => plan,
            Err(Decline(reason)) => panic!("declined: {reason}"),
        };
        assert_eq!(plan.q.dims, [2, 3, 2, 16]);
        assert_eq!(plan.q.strides, [96, 32, 16, 1]);
        assert_eq!(plan.q.data_type, DataType::BFloat16);
        assert_eq!(
            plan.q.ragged,
            Some(RaggedPlan {
                aux_uid: 5,
                aux_data_type: DataType::Int32,
                multiplier: 1
            })
        );
        assert_eq!(plan.k.ragged.map(|r| r.aux_uid), Some(6));
        assert_eq!(plan.v.ragged.map(|r| r.aux_uid), Some(6));
        assert_eq!(plan.o.ragged.map(|r| r.aux_uid), Some(5));
        let stats = plan.stats.as_ref().map(|s| (s.uid, s.dims, s.ragged));
        assert_eq!(stats, Some((9, [2, 2, 3, 1], None)));
        assert_eq!((plan.seq_len_q, plan.seq_len_kv), (None, None));
        assert_eq!(plan.scale, ScalePlan::Fixed(0.25));
        // causal_mask_bottom_right: right bound 0, bottom-right alignment, no left bound.
        assert_eq!(
            plan.band,
            BandPlan {
                left: None,
                right: Some(0),
                bottom_right: true
            }
        );
    }

    #[test]
    fn decline_reasons_name_the_field_and_value() {
        let mut g = golden();
        sdpa(&mut g).attn_mask_tensor_uid = Some(9);
        assert_eq!(
            reason(&g),
            "attn_mask_tensor_uid is set (tensor uid 9); that SDPA feature is not supported"
        );

        let mut g = golden();
        g.min_required_engine_api_version = Some(EngineApiVersion::new(1, 5, 0));
        assert_eq!(
            reason(&g),
            "graph is stamped min_required_engine_api_version 1.5.0, above the supported ceiling 1.3.0"
        );

        let mut g = golden();
        g.nodes[0].attributes = NodeAttributes::unsupported(9);
        assert_eq!(
            reason(&g),
            "node \"sdpa\" is MatmulAttributes (union tag 9), not SdpaAttributes"
        );

        let mut g = golden();
        sdpa(&mut g).generate_stats = Some(true);
        sdpa(&mut g).stats_tensor_uid = None;
        assert_eq!(
            reason(&g),
            "generate_stats is true but stats_tensor_uid is unset"
        );
    }

    #[test]
    fn the_older_bhsd_ragged_form_is_declined_by_name() {
        let mut g = golden();
        for t in g.tensors.iter_mut().filter(|t| t.uid == 1 || t.uid == 4) {
            t.dims = vec![2, 2, 3, 16];
            t.strides = vec![96, 16, 32, 1];
        }
        let why = reason(&g);
        assert!(why.contains("older [B, H, S, D] form"), "{why}");
        assert!(why.contains("tensor uid 1"), "{why}");
    }

    #[test]
    fn any_dropout_probability_but_zero_is_declined() {
        for p in [0.1f32, f32::NAN, -0.5] {
            let mut g = golden();
            sdpa(&mut g).dropout_probability = Some(p);
            assert_eq!(
                reason(&g),
                format!("dropout_probability is {p}; only 0 (no dropout) is supported")
            );
        }
        let mut g = golden();
        sdpa(&mut g).dropout_probability = Some(0.0);
        assert_eq!(reason(&g), "accepted");
    }

    #[test]
    fn a_batch_at_i64_max_is_declined_not_overflowed() {
        let mut g = golden();
        for t in g.tensors.iter_mut().filter(|t| [1, 4, 5].contains(&t.uid)) {
            t.dims[0] = i64::MAX;
        }
        let why = reason(&g);
        assert!(why.contains("dims[0] (the batch B)"), "{why}");
        assert!(why.contains(&i64::MAX.to_string()), "{why}");
    }

    #[test]
    fn a_scale_tensor_needs_every_dim_1() {
        for dims in [vec![-1, -1], vec![i64::MAX, 2], vec![2]] {
            let mut g = golden();
            g.tensors.push(
                TensorAttributes::new()
                    .set_uid(20)
                    .set_data_type(DataType::Float)
                    .set_dims(dims.clone())
                    .set_strides(vec![1; dims.len()])
                    .set_is_runtime_pass_by_value(true),
            );
            sdpa(&mut g).scale_tensor_uid = Some(20);
            assert_eq!(
                reason(&g),
                format!("scale_tensor_uid tensor uid 20 has dims {dims:?}; a scalar required")
            );
        }
    }

    #[test]
    fn scale_resolution_order_is_tensor_value_then_attribute_then_one() {
        let mut g = golden();
        sdpa(&mut g).attn_scale_value = None;
        assert_eq!(plan(&g).map(|p| p.scale), Ok(ScalePlan::Fixed(1.0)));

        g.tensors.push(
            TensorAttributes::new()
                .set_uid(20)
                .set_data_type(DataType::Float)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_value(ragged_schema::TensorValue::Float32(0.5)),
        );
        sdpa(&mut g).scale_tensor_uid = Some(20);
        sdpa(&mut g).attn_scale_value = Some(0.25);
        assert_eq!(plan(&g).map(|p| p.scale), Ok(ScalePlan::Fixed(0.5)));
    }

    #[test]
    fn an_fp8_encoded_scale_value_is_declined_not_read_as_its_byte() {
        let mut g = golden();
        g.tensors.push(
            TensorAttributes::new()
                .set_uid(20)
                .set_data_type(DataType::Fp8E4m3)
                .set_dims(vec![1])
                .set_strides(vec![1])
                .set_value(TensorValue::Float8(0x38)),
        );
        sdpa(&mut g).scale_tensor_uid = Some(20);
        assert_eq!(
            reason(&g),
            "scale_tensor_uid tensor uid 20 holds a Float8Value (encoding 0x38); an fp8-encoded \
             scale is not supported"
        );
    }

    #[test]
    fn a_scale_tensor_without_value_is_a_host_scalar_only_when_passed_by_value() {
        for (pass_by_value, expected) in [
            (
                true,
                ScalePlan::RuntimeHostScalar {
                    uid: 20,
                    data_type: DataType::Double,
                },
            ),
            (
                false,
                ScalePlan::DeviceTensor {
                    uid: 20,
                    data_type: DataType::Double,
                },
            ),
        ] {
            let mut g = golden();
            g.tensors.push(
                TensorAttributes::new()
                    .set_uid(20)
                    .set_data_type(DataType::Double)
                    .set_dims(vec![1])
                    .set_strides(vec![1])
                    .set_is_runtime_pass_by_value(pass_by_value),
            );
            sdpa(&mut g).scale_tensor_uid = Some(20);
            assert_eq!(plan(&g).map(|p| p.scale), Ok(expected));
        }
    }
}
