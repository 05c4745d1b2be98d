//! Property-based round trips over random graphs: model ↔ binary ↔ JSON.
//!
//! Baked float values are any finite float: serde_json is built with `float_roundtrip`, so the
//! shortest text it writes for an f64 parses back to the same bits. NaN and infinities have no
//! JSON spelling and are covered by the JSON format tests instead. Attribute floats (scale,
//! dropout probability) stay dyadic so they are also exact through f32.

mod common;

use proptest::prelude::*;
use ragged_schema::version::compute_minimum_plugin_api_version;
use ragged_schema::{
    AttentionImplementation, DataType, DiagonalAlignment, EngineApiVersion, EngineConfig,
    EngineDetails, Graph, GraphId, KnobSetting, KnobValue, Node, NodeAttributes, SdpaAttributes,
    SdpaBackwardAttributes, TensorAttributes, TensorValue, wire,
};

fn data_type() -> impl Strategy<Value = DataType> {
    prop_oneof![
        4 => prop::sample::select(DataType::all_known().collect::<Vec<_>>()),
        1 => (19i8..=i8::MAX).prop_map(DataType::Unknown),
        1 => (i8::MIN..0).prop_map(DataType::Unknown),
    ]
}

fn dyadic32() -> impl Strategy<Value = f32> {
    (-(1i32 << 20)..(1i32 << 20)).prop_map(|n| n as f32 / 1024.0)
}

fn finite32() -> impl Strategy<Value = f32> {
    prop::num::f32::NORMAL | prop::num::f32::SUBNORMAL | prop::num::f32::ZERO
}

fn finite64() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO
}

fn tensor_value() -> impl Strategy<Value = TensorValue> {
    prop_oneof![
        finite32().prop_map(TensorValue::Float32),
        finite32().prop_map(TensorValue::Float16),
        finite32().prop_map(TensorValue::BFloat16),
        any::<u8>().prop_map(TensorValue::Float8),
        any::<i32>().prop_map(TensorValue::Int32),
        finite64().prop_map(TensorValue::Float64),
        any::<i64>().prop_map(TensorValue::Int64),
        any::<bool>().prop_map(TensorValue::Bool),
    ]
}

fn tensor() -> impl Strategy<Value = TensorAttributes> {
    (
        (any::<i64>(), "[a-z_0-9]{0,8}", data_type()),
        (
            prop::collection::vec(any::<i64>(), 0..5),
            prop::collection::vec(any::<i64>(), 0..5),
        ),
        (
            any::<bool>(),
            prop::option::of(tensor_value()),
            any::<bool>(),
        ),
        (
            prop::option::of(any::<i64>()),
            prop_oneof![Just(16i64), any::<i64>()],
            prop_oneof![Just(1i64), any::<i64>()],
        ),
    )
        .prop_map(
            |(
                (uid, name, data_type),
                (dims, strides),
                (is_virtual, value, pbv),
                (aux, align, mult),
            )| {
                TensorAttributes {
                    uid,
                    name,
                    data_type,
                    strides,
                    dims,
                    is_virtual,
                    value,
                    is_runtime_pass_by_value: pbv,
                    ragged_offset_tensor_uid: aux,
                    alignment: align,
                    ragged_offset_multiplier: mult,
                }
            },
        )
}

fn opt_uids(n: usize) -> impl Strategy<Value = Vec<Option<i64>>> {
    prop::collection::vec(prop::option::of(any::<i64>()), n)
}

/// The attributes both SDPA nodes carry under one name: the four mask flags, dropout and scale,
/// and the band bounds.
#[derive(Debug, Clone)]
struct Shared {
    flags: [bool; 4],
    dropout: Option<f32>,
    scale: Option<f32>,
    left: Option<i64>,
    right: Option<i64>,
}

fn shared() -> impl Strategy<Value = Shared> {
    (
        prop::array::uniform4(any::<bool>()),
        (prop::option::of(dyadic32()), prop::option::of(dyadic32())),
        (
            prop::option::of(any::<i64>()),
            prop::option::of(any::<i64>()),
        ),
    )
        .prop_map(|(flags, (dropout, scale), (left, right))| Shared {
            flags,
            dropout,
            scale,
            left,
            right,
        })
}

/// A node literal of `$ty` with the [`Shared`] fields taken from `$shared` and the rest from
/// the braced field list (which may end in `..base`).
macro_rules! with_shared {
    ($ty:ident, $shared:expr, { $($rest:tt)* }) => {{
        let sh: Shared = $shared;
        $ty {
            alibi_mask: sh.flags[0],
            padding_mask: sh.flags[1],
            causal_mask: sh.flags[2],
            causal_mask_bottom_right: sh.flags[3],
            dropout_probability: sh.dropout,
            attn_scale_value: sh.scale,
            left_bound: sh.left,
            right_bound: sh.right,
            $($rest)*
        }
    }};
}

/// `with_umd`: the JSON format does not carry `umd_flops` / `umd_bytes`.
fn sdpa(with_umd: bool) -> impl Strategy<Value = SdpaAttributes> {
    let umd = if with_umd {
        prop::option::of("[a-z+* 0-9]{0,12}").boxed()
    } else {
        Just(None).boxed()
    };
    (
        prop::array::uniform4(any::<i64>()),
        opt_uids(24),
        prop::option::of(any::<bool>()),
        shared(),
        prop::option::of(any::<i32>()),
        (any::<i8>(), data_type(), any::<i8>()),
        (umd.clone(), umd),
    )
        .prop_map(|(qkvo, uids, gen_stats, shared, max_kv, enums, umd)| {
            let u = |i: usize| uids[i];
            with_shared!(SdpaAttributes, shared, {
                q_tensor_uid: qkvo[0],
                k_tensor_uid: qkvo[1],
                v_tensor_uid: qkvo[2],
                o_tensor_uid: qkvo[3],
                attn_mask_tensor_uid: u(0),
                scale_tensor_uid: u(1),
                seq_len_q_tensor_uid: u(2),
                seq_len_kv_tensor_uid: u(3),
                seed_tensor_uid: u(4),
                offset_tensor_uid: u(5),
                dropout_mask_tensor_uid: u(6),
                dropout_scale_tensor_uid: u(7),
                page_table_k_tensor_uid: u(8),
                page_table_v_tensor_uid: u(9),
                block_mask_tensor_uid: u(10),
                sink_token_tensor_uid: u(11),
                descale_q_tensor_uid: u(12),
                descale_k_tensor_uid: u(13),
                descale_v_tensor_uid: u(14),
                descale_s_tensor_uid: u(15),
                scale_s_tensor_uid: u(16),
                scale_o_tensor_uid: u(17),
                stats_tensor_uid: u(18),
                max_tensor_uid: u(19),
                sum_exp_tensor_uid: u(20),
                rng_dump_tensor_uid: u(21),
                amax_s_tensor_uid: u(22),
                amax_o_tensor_uid: u(23),
                generate_stats: gen_stats,
                max_seq_len_kv: max_kv,
                diagonal_alignment: DiagonalAlignment::from_wire(enums.0),
                mma_core_mode: enums.1,
                implementation: AttentionImplementation::from_wire(enums.2),
                umd_flops: umd.0,
                umd_bytes: umd.1,
            })
        })
}

/// Every field of the backward node drawn independently; JSON carries all of them.
fn sdpa_backward() -> impl Strategy<Value = SdpaBackwardAttributes> {
    (
        prop::array::uniform9(any::<i64>()),
        opt_uids(10),
        shared(),
        any::<i8>(),
    )
        .prop_map(|(required, uids, shared, alignment)| {
            with_shared!(SdpaBackwardAttributes, shared, {
                scale_tensor_uid: uids[0],
                attn_mask_tensor_uid: uids[1],
                seq_len_q_tensor_uid: uids[2],
                seq_len_kv_tensor_uid: uids[3],
                seed_tensor_uid: uids[4],
                offset_tensor_uid: uids[5],
                dropout_mask_tensor_uid: uids[6],
                dropout_scale_tensor_uid: uids[7],
                dropout_scale_inv_tensor_uid: uids[8],
                dbias_tensor_uid: uids[9],
                diagonal_alignment: DiagonalAlignment::from_wire(alignment),
                ..SdpaBackwardAttributes::new(
                    required[0],
                    required[1],
                    required[2],
                    required[3],
                    required[4],
                    required[5],
                    required[6],
                    required[7],
                    required[8],
                )
            })
        })
}

/// `binary_only`: also draw nodes JSON cannot carry (unread members, `umd_*` strings).
fn node(binary_only: bool) -> impl Strategy<Value = Node> {
    let attributes = if binary_only {
        prop_oneof![
            Just(NodeAttributes::None),
            sdpa(true).prop_map(NodeAttributes::Sdpa),
            sdpa_backward().prop_map(NodeAttributes::SdpaBackward),
            (1u8..=u8::MAX)
                .prop_filter("tags 2, 12 and 15 are read", |t| ![2, 12, 15].contains(t))
                .prop_map(NodeAttributes::unsupported),
        ]
        .boxed()
    } else {
        prop_oneof![
            Just(NodeAttributes::None),
            sdpa(false).prop_map(NodeAttributes::Sdpa),
            sdpa_backward().prop_map(NodeAttributes::SdpaBackward),
        ]
        .boxed()
    };
    ("[a-z_]{0,8}", data_type(), attributes).prop_map(|(name, compute_data_type, attributes)| {
        Node {
            name,
            compute_data_type,
            attributes,
        }
    })
}

fn graph(binary_only: bool) -> impl Strategy<Value = Graph> {
    (
        ("[a-z_]{0,12}", data_type(), data_type(), data_type()),
        prop::collection::vec(tensor(), 0..5),
        prop::collection::vec(node(binary_only), 0..3),
        (prop::option::of(any::<i64>()), any::<bool>(), any::<bool>()),
        (
            prop::option::of(any::<(u32, u32, u32)>()),
            prop::option::of(any::<[u8; 16]>()),
        ),
    )
        .prop_map(
            |((name, c, i, io), tensors, nodes, (engine, override_shape, flag), (stamp, id))| {
                Graph {
                    name,
                    compute_data_type: c,
                    intermediate_data_type: i,
                    io_data_type: io,
                    tensors,
                    nodes,
                    preferred_engine_id: engine,
                    is_override_shape_enabled: override_shape,
                    min_required_engine_api_version: stamp
                        .map(|(a, b, c)| EngineApiVersion::new(a, b, c)),
                    id: id.map(GraphId),
                    is_ragged_tensor_enabled: flag,
                }
            },
        )
}

/// What the project writers promise to emit for `g`: the flag set iff the graph is ragged.
fn with_writer_flag(g: &Graph) -> Graph {
    Graph {
        is_ragged_tensor_enabled: g.is_ragged(),
        ..g.clone()
    }
}

fn decode(bytes: &[u8]) -> Graph {
    wire::decode_graph(bytes).unwrap_or_else(|e| panic!("own output must decode: {e}"))
}

fn from_json(text: &str) -> Graph {
    Graph::from_json(text).unwrap_or_else(|e| panic!("own JSON must parse: {e}\n{text}"))
}

proptest! {
    #![proptest_config(common::proptest_config(128))]

    #[test]
    fn exact_binary_round_trip(g in graph(true)) {
        prop_assert_eq!(decode(&wire::encode_graph_exact(&g)), g);
    }

    #[test]
    fn stamped_binary_sets_flag_and_computed_stamp(g in graph(true)) {
        let decoded = decode(&wire::encode_graph(&g));
        let required = compute_minimum_plugin_api_version(&g).version;
        let expected = Graph {
            min_required_engine_api_version: EngineApiVersion::from_semver(&required),
            ..with_writer_flag(&g)
        };
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn hdgp_round_trip_equals_bare(g in graph(true)) {
        prop_assert_eq!(decode(&wire::encode_graph_hdgp(&g)), decode(&wire::encode_graph(&g)));
    }

    #[test]
    fn json_round_trip(g in graph(false)) {
        prop_assert_eq!(from_json(&g.to_json()), with_writer_flag(&g));
    }

    #[test]
    fn binary_then_json_then_binary(g in graph(false)) {
        let via_binary = decode(&wire::encode_graph_exact(&g));
        let via_json = from_json(&via_binary.to_json());
        prop_assert_eq!(&via_json, &with_writer_flag(&g));
        prop_assert_eq!(decode(&wire::encode_graph_exact(&via_json)), via_json);
    }

    #[test]
    fn engine_config_round_trip(
        engine_id in any::<i64>(),
        ints in prop::collection::vec(("[a-z_]{1,8}", any::<i64>()), 0..3),
        metric in prop::option::of("[a-z]{1,6}"),
    ) {
        let cfg = EngineConfig {
            engine_id,
            knobs: ints
                .into_iter()
                .map(|(knob_id, v)| KnobSetting { knob_id, value: KnobValue::Int(v) })
                .chain([
                    KnobSetting { knob_id: "f".into(), value: KnobValue::Float(0.5) },
                    KnobSetting { knob_id: "s".into(), value: KnobValue::String("x".into()) },
                    KnobSetting { knob_id: "u".into(), value: KnobValue::Unset },
                ])
                .collect(),
            ranking_metric: metric,
        };
        prop_assert_eq!(wire::decode_engine_config(&wire::encode_engine_config(&cfg)), Ok(cfg));
    }

    #[test]
    fn engine_details_round_trip(
        engine_id in any::<i64>(),
        name in prop::option::of("[A-Z_]{1,24}"),
        notes in prop::collection::vec(any::<i32>(), 0..3),
    ) {
        let details = EngineDetails { engine_id, name, behavior_notes: notes };
        prop_assert_eq!(
            wire::decode_engine_details(&wire::encode_engine_details(&details)),
            Ok(details)
        );
    }
}
