//! The graph's one SDPA node → the kernels' [`RaggedSdpaProblem`], built once per graph.
//!
//! Everything kept is a copy (RFC §4.10), which is what lets the backend free the graph right
//! after `CreateExecutionContext`; nothing points into the serialized buffer. This is the one
//! place graph data types become the kernels' types, and the problem's tensors are read through
//! their resolved axes ([`ragged_kernels::problem::resolve_axes`]), never `dims[1]`/`dims[2]`.

use ragged_kernels::problem::{
    IndexInput, IndexWidth, OFFSETS_ROLE, Offsets, Operand, RaggedSdpaProblem, ScalarType,
    ScalePlan,
};
use ragged_kernels::{DataType as KernelType, DiagonalAlignment as Alignment, MaskBand};
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, SdpaAttributes, TensorAttributes, TensorValue,
};

use crate::applicability::Decline;

macro_rules! decline {
    ($($arg:tt)*) => { return Err(Decline(format!($($arg)*))) };
}

/// The kernels' element type for a graph type, `None` for types no engine stores.
pub fn kernel_type(data_type: DataType) -> Option<KernelType> {
    match data_type {
        DataType::Float => Some(KernelType::F32),
        DataType::Half => Some(KernelType::F16),
        DataType::BFloat16 => Some(KernelType::BF16),
        DataType::Int32 => Some(KernelType::I32),
        DataType::Int64 => Some(KernelType::I64),
        _ => None,
    }
}

/// The node's tensors, index inputs, scale and band (the node itself is already checked).
pub fn build(graph: &Graph, sdpa: &SdpaAttributes) -> Result<RaggedSdpaProblem, Decline> {
    let primaries = [
        ("q_tensor_uid", sdpa.q_tensor_uid),
        ("k_tensor_uid", sdpa.k_tensor_uid),
        ("v_tensor_uid", sdpa.v_tensor_uid),
        ("o_tensor_uid", sdpa.o_tensor_uid),
    ];
    let mut attributes = Vec::with_capacity(4);
    for (role, uid) in primaries {
        attributes.push((role, tensor_attributes(graph, role, uid)?));
    }
    check_io_types(&attributes)?;
    let tensor = |i: usize| tensor_plan(graph, attributes[i].0, attributes[i].1);
    let (q, k, v, o) = (tensor(0)?, tensor(1)?, tensor(2)?, tensor(3)?);
    check_shapes(&q, &k, &v, &o)?;

    let stats = match (sdpa.stats_tensor_uid, sdpa.generate_stats) {
        (Some(uid), _) => Some(stats_plan(graph, uid, &q)?),
        (None, Some(true)) => decline!("generate_stats is true but stats_tensor_uid is unset"),
        (None, _) => None,
    };

    let seq_len_q = index_input(graph, "seq_len_q_tensor_uid", sdpa.seq_len_q_tensor_uid)?;
    let seq_len_kv = index_input(graph, "seq_len_kv_tensor_uid", sdpa.seq_len_kv_tensor_uid)?;
    if sdpa.padding_mask && (seq_len_q.is_none() || seq_len_kv.is_none()) {
        decline!(
            "padding_mask is true but seq_len_q_tensor_uid and seq_len_kv_tensor_uid are not both set"
        );
    }

    Ok(RaggedSdpaProblem {
        q,
        k,
        v,
        o,
        stats,
        seq_len_q,
        seq_len_kv,
        scale: scale_plan(graph, sdpa)?,
        mask: band(sdpa)?,
    })
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

fn tensor_plan(
    graph: &Graph,
    role: &'static str,
    t: &TensorAttributes,
) -> Result<Operand, Decline> {
    let uid = t.uid;
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
    // Types are checked by role first (`check_io_types`, `stats_plan`), so this only backs
    // them up: a type no engine stores never reaches the problem.
    let Some(dtype) = kernel_type(t.data_type) else {
        decline!(
            "{role} tensor uid {uid} has data type {}; float, half or bfloat16 required",
            t.data_type
        );
    };
    let mut operand = Operand {
        role,
        uid,
        dtype,
        dims,
        strides,
        alignment: t.alignment,
        ragged: None,
    };
    if let Some(aux_uid) = t.ragged_offset_tensor_uid {
        operand.ragged = Some(offsets(graph, t, &operand, aux_uid)?);
    }
    Ok(operand)
}

/// Ragged primaries are packed BSHD (ragged-sdpa.md §1): head-dim stride 1, head stride D,
/// seqStride H·D along the axes [`Operand`] resolves. The older `[B, H, S, D]`-with-BSHD-strides
/// form is declined by name.
fn offsets(
    graph: &Graph,
    t: &TensorAttributes,
    operand: &Operand,
    aux_uid: i64,
) -> Result<Offsets, Decline> {
    let (role, uid, dims, strides) = (operand.role, t.uid, operand.dims, operand.strides);
    let probe = Operand {
        ragged: Some(Offsets {
            uid: aux_uid,
            width: IndexWidth::I32,
            multiplier: 1,
        }),
        ..*operand
    };
    let (h, d) = (probe.heads(), probe.head_dim());
    let packed = [h.saturating_mul(d), d, 1];
    if [probe.seq_stride(), probe.head_stride(), probe.dim_stride()] != packed {
        if probe.seq_stride() == d && probe.dim_stride() == 1 {
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
    let aux = tensor_attributes(graph, OFFSETS_ROLE, aux_uid)?;
    let Some(width) = kernel_type(aux.data_type).and_then(IndexWidth::of) else {
        decline!(
            "ragged offset tensor uid {aux_uid} (of {role} uid {uid}) has data type {}; int32 or int64 required",
            aux.data_type
        );
    };
    let batch = probe.batch();
    let Some(entries) = batch.checked_add(1) else {
        decline!(
            "{role} tensor uid {uid}: dims[0] (the batch B) = {batch} leaves no room for B + 1 ragged offsets"
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
    Ok(Offsets {
        uid: aux_uid,
        width,
        multiplier: t.ragged_offset_multiplier,
    })
}

fn check_io_types(tensors: &[(&'static str, &TensorAttributes)]) -> Result<(), Decline> {
    let (role, first) = tensors[0];
    if !matches!(
        first.data_type,
        DataType::Float | DataType::Half | DataType::BFloat16
    ) {
        decline!(
            "{role} tensor uid {} has data type {}; float, half or bfloat16 required",
            first.uid,
            first.data_type
        );
    }
    if let Some((other_role, other)) = tensors.iter().find(|t| t.1.data_type != first.data_type) {
        decline!(
            "{other_role} tensor uid {} has data type {} but {role} uid {} has {}; Q, K, V and O must match",
            other.uid,
            other.data_type,
            first.uid,
            first.data_type
        );
    }
    Ok(())
}

fn check_shapes(q: &Operand, k: &Operand, v: &Operand, o: &Operand) -> Result<(), Decline> {
    let [bq, sq, hq, dq] = q.bshd();
    let [bk, sk, hk, dk] = k.bshd();
    let [bv, sv, hv, dv] = v.bshd();
    let [bo, so, ho, d_o] = o.bshd();
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
    Ok(())
}

/// LSE: FLOAT, `[B, S_q, H_q, 1]` along the axes its layout resolves (dense `[B, H_q, S_q, 1]`,
/// ragged token-major `[B, S_q, H_q, 1]`).
fn stats_plan(graph: &Graph, uid: i64, q: &Operand) -> Result<Operand, Decline> {
    let role = "stats_tensor_uid";
    let t = tensor_attributes(graph, role, uid)?;
    if t.data_type != DataType::Float {
        decline!(
            "stats_tensor_uid tensor uid {uid} has data type {}; float required",
            t.data_type
        );
    }
    let stats = tensor_plan(graph, role, t)?;
    let expected = [q.batch(), q.seq_max(), q.heads(), 1];
    if stats.bshd() != expected {
        let axes = stats.axes();
        let mut graph_order = [0; 4];
        for (axis, value) in [axes.batch, axes.seq, axes.heads, axes.dim]
            .into_iter()
            .zip(expected)
        {
            graph_order[axis] = value;
        }
        decline!(
            "stats_tensor_uid tensor uid {uid} has dims {:?}; {graph_order:?} required",
            stats.dims
        );
    }
    Ok(stats)
}

fn index_input(
    graph: &Graph,
    role: &'static str,
    uid: Option<i64>,
) -> Result<Option<IndexInput>, Decline> {
    let Some(uid) = uid else { return Ok(None) };
    let t = tensor_attributes(graph, role, uid)?;
    let Some(width) = kernel_type(t.data_type).and_then(IndexWidth::of) else {
        decline!(
            "{role} tensor uid {uid} has data type {}; int32 or int64 required",
            t.data_type
        );
    };
    Ok(Some(IndexInput { role, uid, width }))
}

fn scale_plan(graph: &Graph, sdpa: &SdpaAttributes) -> Result<ScalePlan, Decline> {
    let Some(uid) = sdpa.scale_tensor_uid else {
        return Ok(ScalePlan::Fixed(sdpa.attn_scale_value.unwrap_or(1.0)));
    };
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
    let data_type = match t.data_type {
        DataType::Float => ScalarType::Float,
        DataType::Half => ScalarType::Half,
        DataType::BFloat16 => ScalarType::BFloat16,
        DataType::Double => ScalarType::Double,
        other => decline!(
            "scale_tensor_uid tensor uid {uid} has data type {other}; a floating-point scalar required"
        ),
    };
    // Every dim 1 (or rank 0): a product of wire dims could overflow, and [-1, -1]
    // multiplies to 1 without being a scalar.
    if t.dims.iter().any(|&d| d != 1) {
        decline!(
            "scale_tensor_uid tensor uid {uid} has dims {:?}; a scalar required",
            t.dims
        );
    }
    Ok(if t.is_runtime_pass_by_value {
        ScalePlan::RuntimeHostScalar { uid, data_type }
    } else {
        ScalePlan::DeviceTensor { uid, data_type }
    })
}

fn band(sdpa: &SdpaAttributes) -> Result<MaskBand, Decline> {
    let band = match sdpa.resolve_diagonal_band() {
        Ok(band) => band,
        Err(error) => decline!("{error}"),
    };
    let alignment = match band.alignment {
        DiagonalAlignment::TopLeft => Alignment::TopLeft,
        DiagonalAlignment::BottomRight => Alignment::BottomRight,
        DiagonalAlignment::Unknown(v) => decline!("diagonal_alignment has unknown value {v}"),
    };
    Ok(MaskBand::window(band.left, band.right, alignment))
}
