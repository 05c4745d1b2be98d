//! The graph's one SDPA node → the kernels' [`RaggedSdpaProblem`], built once per graph.
//!
//! Everything kept is a copy (RFC §4.10), which is what lets the backend free the graph right
//! after `CreateExecutionContext`; nothing points into the serialized buffer. This is the one
//! place graph data types become the kernels' types, and the problem's tensors are read through
//! their resolved axes ([`ragged_core::problem::resolve_axes`]), never `dims[1]`/`dims[2]`.
//! Paged K/V and sinks are planned in [`serving`], FP8 types and scalars in [`fp8`].

mod fp8;
mod serving;

pub use fp8::check_no_fp8_fields;
use serving::{check_paged_shapes, paged_kv, sinks_plan};

use ragged_core::problem::{
    IndexInput, IndexWidth, Multiplier, OFFSETS_ROLE, Offsets, Operand, RaggedSdpaProblem,
    ScalarType, ScalePlan, dense_stats_axes,
};
use ragged_core::{DataType as KernelType, DiagonalAlignment as Alignment, MaskBand};
use ragged_schema::{
    DataType, DiagonalAlignment, Graph, SdpaAttributes, TensorAttributes, TensorValue,
};

use ragged_core::contract::{self, Decline};

/// A decline of `field` of tensor `uid`.
fn refuse<T>(
    uid: i64,
    field: impl Into<String>,
    value: impl std::fmt::Display,
    need: impl Into<String>,
) -> Result<T, Decline> {
    Err(Decline::new(uid, field, value, need))
}

/// A decline of a node attribute no tensor owns.
fn refuse_attribute<T>(
    field: &str,
    value: impl std::fmt::Display,
    need: impl Into<String>,
) -> Result<T, Decline> {
    Err(Decline::graph(field, value, need))
}

/// What Q, K, V and O may hold.
const IO_TYPES: &str = "FLOAT, HALF or BFLOAT16";
/// What offsets and seq_lens may hold.
const INDEX_TYPES: &str = "INT32 or INT64";

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
    let typed: [(&'static str, &TensorAttributes); 4] =
        [attributes[0], attributes[1], attributes[2], attributes[3]];
    let fp8 = match fp8::check_types(&typed)? {
        Some(input) => Some(fp8::fp8_plan(graph, sdpa, input, typed[3].1.data_type)?),
        None => {
            check_io_types(&attributes)?;
            check_no_fp8_fields(
                sdpa,
                "a 16-bit graph (Q, K and V not FP8) carries no FP8 scalars or amax outputs \
                 (fp8-attention.md §1.3)",
            )?;
            None
        }
    };
    let tensor = |i: usize| tensor_plan(graph, attributes[i].0, attributes[i].1);
    let (q, k, v, o) = (tensor(0)?, tensor(1)?, tensor(2)?, tensor(3)?);
    let paging = match (sdpa.page_table_k_tensor_uid, sdpa.page_table_v_tensor_uid) {
        (None, None) => None,
        (Some(k_uid), Some(v_uid)) => Some((k_uid, v_uid)),
        (Some(uid), None) | (None, Some(uid)) => {
            let (set, unset) = if sdpa.page_table_k_tensor_uid.is_some() {
                ("page_table_k_tensor_uid", "page_table_v_tensor_uid")
            } else {
                ("page_table_v_tensor_uid", "page_table_k_tensor_uid")
            };
            return refuse(
                uid,
                unset,
                format!("unset while {set} = {uid}"),
                "both page tables or neither: paging is all or nothing \
                 (paged-kv-and-sinks.md §1.7)",
            );
        }
    };
    if fp8.is_some() {
        // O's type is checked against Q's by `fp8::check_types`.
        contract::check_dims(&q, &k, &v, &o)?;
    } else if paging.is_none() {
        contract::check_shapes(&q, &k, &v, &o)?;
    } else {
        check_paged_shapes(&q, &k, &v, &o)?;
    }

    let stats = match (sdpa.stats_tensor_uid, sdpa.generate_stats) {
        (Some(uid), _) => Some(stats_plan(graph, uid, &q)?),
        (None, Some(true)) => {
            return refuse_attribute("generate_stats", true, "stats_tensor_uid set");
        }
        (None, _) => None,
    };

    let seq_len_q = index_input(graph, "seq_len_q_tensor_uid", sdpa.seq_len_q_tensor_uid)?;
    let seq_len_kv = index_input(graph, "seq_len_kv_tensor_uid", sdpa.seq_len_kv_tensor_uid)?;
    if sdpa.padding_mask && (seq_len_q.is_none() || seq_len_kv.is_none()) {
        return refuse_attribute(
            "padding_mask",
            true,
            "both seq_len_q_tensor_uid and seq_len_kv_tensor_uid set",
        );
    }

    let paged = match paging {
        None => None,
        Some((k_uid, v_uid)) => {
            if seq_len_q.is_none() || seq_len_kv.is_none() {
                let missing = if seq_len_q.is_none() {
                    "seq_len_q_tensor_uid"
                } else {
                    "seq_len_kv_tensor_uid"
                };
                return refuse_attribute(
                    missing,
                    format!("unset on a paged graph (page_table_k_tensor_uid = {k_uid})"),
                    "both seq_len_q_tensor_uid and seq_len_kv_tensor_uid: the lengths delimit a \
                     paged graph's sequences (paged-kv-and-sinks.md §3.1)",
                );
            }
            Some(paged_kv(graph, sdpa, (k_uid, v_uid), &q, &k, &v)?)
        }
    };
    let sinks = sdpa
        .sink_token_tensor_uid
        .map(|uid| sinks_plan(graph, uid, &q))
        .transpose()?;

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
        paged,
        sinks,
        fp8,
    })
}

fn tensor_attributes<'g>(
    graph: &'g Graph,
    role: &'static str,
    uid: i64,
) -> Result<&'g TensorAttributes, Decline> {
    match graph.tensor(uid) {
        Some(t) => Ok(t),
        None => refuse(uid, role, "a uid not in the graph", "a tensor of the graph"),
    }
}

fn four(values: &[i64], what: &str, role: &str, uid: i64) -> Result<[i64; 4], Decline> {
    match <[i64; 4]>::try_from(values) {
        Ok(four) => Ok(four),
        Err(_) => refuse(
            uid,
            format!("{role} {what}"),
            format!("{values:?}"),
            "4 entries",
        ),
    }
}

pub(crate) fn tensor_plan(
    graph: &Graph,
    role: &'static str,
    t: &TensorAttributes,
) -> Result<Operand, Decline> {
    let uid = t.uid;
    if t.is_virtual {
        return refuse(
            uid,
            format!("{role} is_virtual"),
            true,
            "false: a single-node graph binds every tensor",
        );
    }
    if t.alignment < 1 {
        return refuse(uid, format!("{role} alignment"), t.alignment, "at least 1");
    }
    let dims = four(&t.dims, "dims", role, uid)?;
    let strides = four(&t.strides, "strides", role, uid)?;
    if dims.iter().any(|d| *d < 0) {
        return refuse(
            uid,
            format!("{role} dims"),
            format!("{dims:?}"),
            "no negative dim",
        );
    }
    if strides.iter().any(|s| *s < 0) {
        return refuse(
            uid,
            format!("{role} strides"),
            format!("{strides:?}"),
            "no negative stride",
        );
    }
    // Types are checked by role first (`check_io_types`, `stats_plan`), so this only backs
    // them up: a type no engine stores never reaches the problem.
    let dtype = kernel_type(t.data_type).or(fp8::fp8_format(t.data_type).map(KernelType::Fp8));
    let Some(dtype) = dtype else {
        return refuse(uid, format!("{role} data type"), t.data_type, IO_TYPES);
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

/// Ragged tensors are BSHD memory (ragged-sdpa.md §1): head-dim stride 1, head stride D,
/// seqStride H·D along the axes [`Operand`] resolves, whichever of upstream's two dims orders
/// (`[B, S, H, D]`, `[B, H, S, D]`) the graph writes. Heads-outermost memory is declined naming
/// the uid, its dims and strides, and so is a multiplier that does not make whole tokens.
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
            multiplier: Multiplier::ONE,
        }),
        ..*operand
    };
    let (h, d) = (probe.heads(), probe.head_dim());
    let packed = [h.saturating_mul(d), d, 1];
    if [probe.seq_stride(), probe.head_stride(), probe.dim_stride()] != packed {
        let axes = probe.axes();
        let mut want = [0; 4];
        want[axes.seq] = packed[0];
        want[axes.heads] = packed[1];
        want[axes.dim] = packed[2];
        return refuse(
            uid,
            format!("{role} ragged strides (dims {dims:?})"),
            format!("{strides:?}"),
            format!(
                "BSHD memory, tokens outermost within a batch (sequence axis {} = the middle \
                 axis of larger stride, S_max {}, H {h}): strides [_, {}, {}, 1]; heads-outermost \
                 (BHSD) packing is not ragged-legal",
                axes.seq,
                probe.seq_max(),
                want[1],
                want[2],
            ),
        );
    }
    let Some(multiplier) = Multiplier::new(t.ragged_offset_multiplier) else {
        return refuse(
            uid,
            format!("{role} ragged_offset_multiplier"),
            t.ragged_offset_multiplier,
            "at least 1",
        );
    };
    contract::check_whole_tokens(
        &probe,
        &Offsets {
            uid: aux_uid,
            width: IndexWidth::I32,
            multiplier,
        },
    )?;
    let aux = tensor_attributes(graph, OFFSETS_ROLE, aux_uid)?;
    let aux_field = |what: &str| format!("ragged offsets (of {role} uid {uid}) {what}");
    let Some(width) = kernel_type(aux.data_type).and_then(IndexWidth::of) else {
        return refuse(aux_uid, aux_field("data type"), aux.data_type, INDEX_TYPES);
    };
    let batch = probe.batch();
    let Some(entries) = batch.checked_add(1) else {
        return refuse(
            uid,
            format!("{role} dims[0] (the batch B)"),
            batch,
            "room for B + 1 ragged offsets",
        );
    };
    if aux.dims != [entries, 1, 1, 1] {
        return refuse(
            aux_uid,
            aux_field("dims"),
            format!("{:?}", aux.dims),
            format!("[B + 1, 1, 1, 1] = [{entries}, 1, 1, 1]"),
        );
    }
    Ok(Offsets {
        uid: aux_uid,
        width,
        multiplier,
    })
}

fn check_io_types(tensors: &[(&'static str, &TensorAttributes)]) -> Result<(), Decline> {
    let (role, first) = tensors[0];
    if !matches!(
        first.data_type,
        DataType::Float | DataType::Half | DataType::BFloat16
    ) {
        return refuse(
            first.uid,
            format!("{role} data type"),
            first.data_type,
            IO_TYPES,
        );
    }
    if let Some((other_role, other)) = tensors.iter().find(|t| t.1.data_type != first.data_type) {
        return refuse(
            other.uid,
            format!("{other_role} data type"),
            other.data_type,
            format!(
                "{}, as {role} uid {} (Q, K, V and O must match)",
                first.data_type, first.uid
            ),
        );
    }
    Ok(())
}

/// LSE: FLOAT, Q's B, S_max and heads in either order (ragged-sdpa.md §4). A ragged LSE resolves
/// its axes from its strides like Q; a dense one is matched against Q's dims
/// ([`dense_stats_axes`]), and one written token-major (`[B, S_q, H_q, 1]`) is held as
/// `[B, H_q, S_q, 1]` with its strides reordered alike: the same memory, in the order every
/// engine reads dense tensors.
fn stats_plan(graph: &Graph, uid: i64, q: &Operand) -> Result<Operand, Decline> {
    let role = "stats_tensor_uid";
    let t = tensor_attributes(graph, role, uid)?;
    if t.data_type != DataType::Float {
        return refuse(uid, "stats_tensor_uid data type", t.data_type, "FLOAT");
    }
    let mut stats = tensor_plan(graph, role, t)?;
    if stats.ragged.is_none() {
        let Some(axes) = dense_stats_axes(&stats.dims, q.seq_max(), q.heads()) else {
            let [b, s, h] = [q.batch(), q.seq_max(), q.heads()];
            return refuse(
                uid,
                "stats_tensor_uid dims",
                format!("{:?}", stats.dims),
                format!("[{b}, {h}, {s}, 1] or [{b}, {s}, {h}, 1] (Q's B, heads and S_max)"),
            );
        };
        stats.dims = axes.to_bhsd(&stats.dims);
        stats.strides = axes.to_bhsd(&stats.strides);
    }
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
        return refuse(
            uid,
            "stats_tensor_uid dims",
            format!("{:?}", stats.dims),
            format!("{graph_order:?} (Q's B, S_max and heads)"),
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
        return refuse(uid, format!("{role} data type"), t.data_type, INDEX_TYPES);
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
            return refuse(
                uid,
                "scale_tensor_uid value",
                format!("a Float8Value (encoding {bits:#04x})"),
                "a value that is not fp8-encoded (an fp8 scale's format is unknown)",
            );
        }
        return Ok(ScalePlan::Fixed(value.as_f64() as f32));
    }
    let data_type = match t.data_type {
        DataType::Float => ScalarType::Float,
        DataType::Half => ScalarType::Half,
        DataType::BFloat16 => ScalarType::BFloat16,
        DataType::Double => ScalarType::Double,
        other => {
            return refuse(
                uid,
                "scale_tensor_uid data type",
                other,
                "FLOAT, HALF, BFLOAT16 or DOUBLE",
            );
        }
    };
    // Every dim 1 (or rank 0): a product of wire dims could overflow, and [-1, -1]
    // multiplies to 1 without being a scalar.
    if t.dims.iter().any(|&d| d != 1) {
        return refuse(
            uid,
            "scale_tensor_uid dims",
            format!("{:?}", t.dims),
            "every dim 1 (a scalar)",
        );
    }
    Ok(if t.is_runtime_pass_by_value {
        ScalePlan::RuntimeHostScalar { uid, data_type }
    } else {
        ScalePlan::DeviceTensor { uid, data_type }
    })
}

pub(crate) fn band(sdpa: &SdpaAttributes) -> Result<MaskBand, Decline> {
    let band = match sdpa.resolve_diagonal_band() {
        Ok(band) => band,
        Err(error) => {
            return refuse_attribute("diagonal band", error, "a band schema.md §6.1 resolves");
        }
    };
    let alignment = match band.alignment {
        DiagonalAlignment::TopLeft => Alignment::TopLeft,
        DiagonalAlignment::BottomRight => Alignment::BottomRight,
        DiagonalAlignment::Unknown(v) => {
            return refuse_attribute("diagonal_alignment", v, "TOP_LEFT or BOTTOM_RIGHT");
        }
    };
    Ok(MaskBand::window(band.left, band.right, alignment))
}

/// Paged K/V and sinks in a multi-node graph: the executor's SDPA node has neither (a single
/// forward node has both), declined naming the field.
pub fn check_no_serving_features(sdpa: &SdpaAttributes) -> Result<(), Decline> {
    let serving = [
        ("page_table_k_tensor_uid", sdpa.page_table_k_tensor_uid),
        ("page_table_v_tensor_uid", sdpa.page_table_v_tensor_uid),
        ("sink_token_tensor_uid", sdpa.sink_token_tensor_uid),
    ];
    if let Some((field, Some(uid))) = serving.iter().find(|(_, uid)| uid.is_some()) {
        return Err(Decline::new(
            *uid,
            *field,
            uid,
            "unset in a multi-node graph: paged K/V and sinks run in a single SDPA forward node",
        ));
    }
    Ok(())
}

/// Features the engines do not compute, declined naming the field (a forward node, alone or
/// in a multi-node graph). The FP8 fields are the FP8 planning's ([`fp8`]).
pub fn check_unsupported_features(sdpa: &SdpaAttributes) -> Result<(), Decline> {
    let unsupported_uids = [
        ("attn_mask_tensor_uid", sdpa.attn_mask_tensor_uid),
        ("seed_tensor_uid", sdpa.seed_tensor_uid),
        ("offset_tensor_uid", sdpa.offset_tensor_uid),
        ("dropout_mask_tensor_uid", sdpa.dropout_mask_tensor_uid),
        ("dropout_scale_tensor_uid", sdpa.dropout_scale_tensor_uid),
        ("block_mask_tensor_uid", sdpa.block_mask_tensor_uid),
        ("max_tensor_uid", sdpa.max_tensor_uid),
        ("sum_exp_tensor_uid", sdpa.sum_exp_tensor_uid),
        ("rng_dump_tensor_uid", sdpa.rng_dump_tensor_uid),
    ];
    if let Some((field, Some(uid))) = unsupported_uids.iter().find(|(_, uid)| uid.is_some()) {
        return Err(Decline::new(
            *uid,
            *field,
            uid,
            "unset: that SDPA feature is not supported",
        ));
    }
    if sdpa.alibi_mask {
        return Err(Decline::graph(
            "alibi_mask",
            true,
            "false: ALiBi is not supported",
        ));
    }
    // Only an exact 0 means "no dropout": a NaN or negative probability is no probability at
    // all, and `p > 0.0` would have let both through as if dropout were off.
    if let Some(p) = sdpa.dropout_probability.filter(|p| *p != 0.0) {
        return Err(Decline::graph("dropout_probability", p, "0 (no dropout)"));
    }
    Ok(())
}
