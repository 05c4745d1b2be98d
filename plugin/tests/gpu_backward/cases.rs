//! The device cases of `gpu_backward.rs`, by test name: every head dim pair the CUDA backward
//! runs (64, 96, 128, 256, and Q/K 192 with V/O 128), each with GQA or MQA, causal masks in both
//! alignments or sliding windows, several key and query tiles, and the LSE in each layout the
//! forward writes; zero-length batches and `seq_len` padding at every head dim (the sanitizer
//! steps' `zero_length` filter); and causal and sliding-window GQA cases where several key tiles
//! add into each 64-row query block's dQ (the fused kernel's accumulator blobs).

use super::*;

/// The device cases, by test name.
fn case(name: &str) -> Case {
    let base = Case {
        dtype: DataType::BFloat16,
        d: 128,
        dv: 128,
        hq: 4,
        hkv: 2,
        lq: vec![70, 130, 1],
        lkv: vec![150, 64, 33],
        pad: 0,
        band: (None, Some(0), DiagonalAlignment::BottomRight),
        lse: Lse::Dense,
        bhsd_dims: false,
    };
    match name {
        "bf16_d128_gqa_causal_bottom_right_dense_lse" => base,
        "f16_d64_mqa_window_top_left_ragged_lse_bhsd_order" => Case {
            dtype: DataType::Half,
            d: 64,
            dv: 64,
            hq: 3,
            hkv: 1,
            lq: vec![90, 200],
            lkv: vec![120, 77],
            band: (Some(20), Some(3), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            bhsd_dims: true,
            ..base
        },
        // Batch 1 has no keys (dQ = 0), batch 2 no queries (dK = dV = 0), batch 3 neither.
        "bf16_d64_seq_len_padding_and_zero_length_batches" => Case {
            d: 64,
            dv: 64,
            hq: 2,
            hkv: 2,
            lq: vec![45, 17, 0, 0, 80],
            lkv: vec![60, 0, 25, 0, 81],
            pad: 6,
            band: (None, None, DiagonalAlignment::TopLeft),
            ..base
        },
        // A window of 4 left of the top-left diagonal with Lq 150 > Lkv 60: rows from 64 on
        // admit no key and contribute nothing.
        "f16_d128_window_top_left_rows_without_keys" => Case {
            dtype: DataType::Half,
            hq: 2,
            hkv: 1,
            lq: vec![150, 40],
            lkv: vec![60, 100],
            pad: 2,
            band: (Some(4), Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        // Several key tiles of 128 add into every 64-row query block's dQ (up to 8 here), in
        // both batches; no mask.
        "bf16_d128_long_sequences_many_key_tiles" => Case {
            lq: vec![700, 300],
            lkv: vec![650, 900],
            band: (None, None, DiagonalAlignment::TopLeft),
            ..base
        },
        // GQA (4 query heads on 2 KV heads) at D 64, causal, several key tiles per query block.
        "f16_d64_gqa_causal_long_sequences" => Case {
            dtype: DataType::Half,
            d: 64,
            dv: 64,
            lq: vec![520, 260],
            lkv: vec![600, 300],
            lse: Lse::Ragged,
            ..base
        },
        // D 96 (rows padded to 128 columns in shared memory), both dims orders' memory read
        // through cuDNN's [B, H, S, D] dims, causal top-left with Lq > Lkv in one batch.
        "bf16_d96_gqa_causal_top_left_ragged_lse_bhsd_order" => Case {
            d: 96,
            dv: 96,
            lq: vec![130, 70, 1],
            lkv: vec![64, 150, 33],
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            bhsd_dims: true,
            ..base
        },
        // D 96, MQA, a bottom-right sliding window over several key and query tiles, the LSE
        // dense token-major.
        "f16_d96_mqa_window_bottom_right_long_sequences_token_major_lse" => Case {
            dtype: DataType::Half,
            d: 96,
            dv: 96,
            hq: 3,
            hkv: 1,
            lq: vec![300, 90],
            lkv: vec![420, 200],
            band: (Some(100), Some(20), DiagonalAlignment::BottomRight),
            lse: Lse::DenseTokenMajor,
            ..base
        },
        // D 256 (dK/dV: two warps per 16 key rows), GQA, causal bottom-right, dense LSE.
        "bf16_d256_gqa_causal_bottom_right_dense_lse" => Case {
            d: 256,
            dv: 256,
            ..base
        },
        // D 256 over many key tiles of 64 and dQ key tiles of 16, MQA, a top-left window, the
        // LSE ragged, `seq_len` padding.
        "f16_d256_mqa_window_top_left_long_sequences_ragged_lse" => Case {
            dtype: DataType::Half,
            d: 256,
            dv: 256,
            hq: 2,
            hkv: 1,
            lq: vec![260, 190],
            lkv: vec![330, 150],
            pad: 4,
            band: (Some(70), Some(9), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        // DeepSeek-style: Q/K 192 with V/O 128 (K-side offsets in tokens), GQA, causal
        // top-left, the LSE dense token-major.
        "bf16_d192_v128_gqa_causal_top_left_token_major_lse" => Case {
            d: 192,
            dv: 128,
            hq: 8,
            hkv: 2,
            lq: vec![129, 64, 250],
            lkv: vec![129, 80, 250],
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::DenseTokenMajor,
            ..base
        },
        // Q/K 192 with V/O 128, MQA, a bottom-right window, several tiles, the LSE ragged,
        // cuDNN's dims order.
        "f16_d192_v128_mqa_window_bottom_right_ragged_lse_bhsd_order" => Case {
            dtype: DataType::Half,
            d: 192,
            dv: 128,
            hq: 3,
            hkv: 1,
            lq: vec![200, 310],
            lkv: vec![260, 90],
            band: (Some(40), Some(0), DiagonalAlignment::BottomRight),
            lse: Lse::Ragged,
            bhsd_dims: true,
            ..base
        },
        // Several key tiles of 128 adding into one 64-row query block's dQ (up to 5; the fused
        // kernel's f32 blobs on sm_90a at D 64 and 128): GQA 4 on 1, causal, ragged lengths that
        // are not multiples of 64 and a zero-length batch.
        "bf16_d128_gqa_causal_top_left_multi_tile_dq" => Case {
            hq: 4,
            hkv: 1,
            lq: vec![600, 0, 333, 129],
            lkv: vec![610, 40, 333, 200],
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        "f16_d64_gqa_causal_bottom_right_multi_tile_dq" => Case {
            dtype: DataType::Half,
            d: 64,
            dv: 64,
            hq: 6,
            hkv: 2,
            lq: vec![450, 97, 0],
            lkv: vec![700, 300, 0],
            ..base
        },
        // Sliding windows wide enough that each query block's dQ has 2-4 key tiles' parts.
        "bf16_d64_gqa_window_top_left_multi_tile_dq" => Case {
            d: 64,
            dv: 64,
            lq: vec![520, 70, 301],
            lkv: vec![540, 0, 480],
            band: (Some(300), Some(40), DiagonalAlignment::TopLeft),
            lse: Lse::DenseTokenMajor,
            ..base
        },
        "f16_d128_mqa_window_bottom_right_multi_tile_dq" => Case {
            dtype: DataType::Half,
            hq: 3,
            hkv: 1,
            lq: vec![390, 200],
            lkv: vec![500, 650],
            band: (Some(260), Some(100), DiagonalAlignment::BottomRight),
            lse: Lse::Ragged,
            ..base
        },
        // D 96 without a mask over several key tiles (the ordered kernel's rotated walks), GQA,
        // a batch without keys and `seq_len` padding, the LSE ragged.
        "bf16_d96_gqa_long_sequences_many_key_tiles" => Case {
            d: 96,
            dv: 96,
            lq: vec![530, 0, 190],
            lkv: vec![700, 50, 260],
            pad: 5,
            band: (None, None, DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        // D 256 (the column-split fused kernel's 64-key tiles) without a mask: a batch of 39 key
        // tiles (walked unrotated), one of 9 (rotated), one without queries; `seq_len` padding.
        "bf16_d256_gqa_long_sequences_many_key_tiles" => Case {
            d: 256,
            dv: 256,
            lq: vec![430, 0, 250],
            lkv: vec![2470, 40, 560],
            pad: 3,
            band: (None, None, DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        // Q/K 192 with V/O 128 on the column-split kernel (its warpgroups' unequal shares, dQ's
        // third part staged in the slot's pad): no mask, MQA, a batch of 30 key tiles, one of 7,
        // one without queries, `seq_len` padding.
        "f16_d192_v128_mqa_long_sequences_many_key_tiles" => Case {
            dtype: DataType::Half,
            d: 192,
            dv: 128,
            hq: 4,
            hkv: 1,
            lq: vec![310, 0, 200],
            lkv: vec![1900, 30, 420],
            pad: 3,
            band: (None, None, DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..base
        },
        other => panic!("no case {other}"),
    }
}

const CASES: [&str; 19] = [
    "bf16_d128_gqa_causal_bottom_right_dense_lse",
    "f16_d64_mqa_window_top_left_ragged_lse_bhsd_order",
    "bf16_d64_seq_len_padding_and_zero_length_batches",
    "f16_d128_window_top_left_rows_without_keys",
    "bf16_d128_long_sequences_many_key_tiles",
    "f16_d64_gqa_causal_long_sequences",
    "bf16_d96_gqa_causal_top_left_ragged_lse_bhsd_order",
    "f16_d96_mqa_window_bottom_right_long_sequences_token_major_lse",
    "bf16_d256_gqa_causal_bottom_right_dense_lse",
    "f16_d256_mqa_window_top_left_long_sequences_ragged_lse",
    "bf16_d192_v128_gqa_causal_top_left_token_major_lse",
    "f16_d192_v128_mqa_window_bottom_right_ragged_lse_bhsd_order",
    "bf16_d128_gqa_causal_top_left_multi_tile_dq",
    "f16_d64_gqa_causal_bottom_right_multi_tile_dq",
    "bf16_d64_gqa_window_top_left_multi_tile_dq",
    "f16_d128_mqa_window_bottom_right_multi_tile_dq",
    "bf16_d96_gqa_long_sequences_many_key_tiles",
    "bf16_d256_gqa_long_sequences_many_key_tiles",
    "f16_d192_v128_mqa_long_sequences_many_key_tiles",
];

/// Every head dim pair of the CUDA backward, as (Q/K, V/O).
const HEAD_DIMS: [(i64, i64); 5] = [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)];

/// The sanitizer case at head dims (`d`, `dv`) with the bottom-right band `band`: f16, GQA 2,
/// zero-length Q and K/V batches (and one with neither), `seq_len` padding, dense LSE.
fn sanitizer_case(d: i64, dv: i64, band: (Option<i64>, Option<i64>)) -> Case {
    Case {
        dtype: DataType::Half,
        d,
        dv,
        hq: 4,
        hkv: 2,
        lq: vec![37, 0, 20, 0, 70],
        lkv: vec![50, 12, 0, 0, 65],
        pad: 3,
        band: (band.0, band.1, DiagonalAlignment::BottomRight),
        lse: Lse::Dense,
        bhsd_dims: false,
    }
}

/// The bands of the sanitizer cases: causal, and a (16, 4) sliding window.
const SANITIZER_BANDS: [(Option<i64>, Option<i64>); 2] = [(None, Some(0)), (Some(16), Some(4))];

#[test]
fn bf16_d128_gqa_causal_bottom_right_dense_lse() {
    check(CASES[0], case(CASES[0]));
}

#[test]
fn f16_d64_mqa_window_top_left_ragged_lse_bhsd_order() {
    check(CASES[1], case(CASES[1]));
}

#[test]
fn bf16_d64_seq_len_padding_and_zero_length_batches() {
    check(CASES[2], case(CASES[2]));
}

#[test]
fn f16_d128_window_top_left_rows_without_keys() {
    check(CASES[3], case(CASES[3]));
}

#[test]
fn bf16_d128_long_sequences_many_key_tiles() {
    check(CASES[4], case(CASES[4]));
}

#[test]
fn f16_d64_gqa_causal_long_sequences() {
    check(CASES[5], case(CASES[5]));
}

#[test]
fn bf16_d96_gqa_causal_top_left_ragged_lse_bhsd_order() {
    check(CASES[6], case(CASES[6]));
}

#[test]
fn f16_d96_mqa_window_bottom_right_long_sequences_token_major_lse() {
    check(CASES[7], case(CASES[7]));
}

#[test]
fn bf16_d256_gqa_causal_bottom_right_dense_lse() {
    check(CASES[8], case(CASES[8]));
}

#[test]
fn f16_d256_mqa_window_top_left_long_sequences_ragged_lse() {
    check(CASES[9], case(CASES[9]));
}

#[test]
fn bf16_d192_v128_gqa_causal_top_left_token_major_lse() {
    check(CASES[10], case(CASES[10]));
}

#[test]
fn f16_d192_v128_mqa_window_bottom_right_ragged_lse_bhsd_order() {
    check(CASES[11], case(CASES[11]));
}

#[test]
fn bf16_d128_gqa_causal_top_left_multi_tile_dq() {
    check(CASES[12], case(CASES[12]));
}

#[test]
fn f16_d64_gqa_causal_bottom_right_multi_tile_dq() {
    check(CASES[13], case(CASES[13]));
}

#[test]
fn bf16_d64_gqa_window_top_left_multi_tile_dq() {
    check(CASES[14], case(CASES[14]));
}

#[test]
fn f16_d128_mqa_window_bottom_right_multi_tile_dq() {
    check(CASES[15], case(CASES[15]));
}

/// Run under compute-sanitizer memcheck and racecheck by `bench/gpu/verify_build.sh` (its name
/// holds `zero_length`): every head dim pair, causal and a sliding window.
#[test]
fn zero_length_batches_every_head_dim_padding_causal_and_window() {
    let name = "zero_length_batches_every_head_dim_padding_causal_and_window";
    for (d, dv) in HEAD_DIMS {
        for band in SANITIZER_BANDS {
            let label = format!("{name} d{d}/{dv} band {band:?}");
            if !check(&label, sanitizer_case(d, dv, band)) {
                return;
            }
        }
    }
}

/// Runs on every machine: each device case is a backward graph the plugin accepts (the host
/// engine at least applies), so a device run fails only on the engines' numbers.
#[test]
fn every_device_case_is_an_applicable_backward_graph() {
    let named = CASES.iter().map(|name| (name.to_string(), case(name)));
    let sanitizer = HEAD_DIMS.iter().flat_map(|&(d, dv)| {
        SANITIZER_BANDS.iter().map(move |&band| {
            (
                format!("sanitizer d{d}/{dv} {band:?}"),
                sanitizer_case(d, dv, band),
            )
        })
    });
    for (name, case) in named.chain(sanitizer) {
        let handle = OwnedHandle::new();
        let (status, ids) = applicable(&handle, &encode_graph(&graph(&case)));
        assert_eq!(status, SUCCESS, "{name}: {}", last_error());
        assert!(ids.contains(&HOST_REFERENCE_ID), "{name}: {ids:?}");
    }
}

#[test]
fn bf16_d96_gqa_long_sequences_many_key_tiles() {
    check(CASES[16], case(CASES[16]));
}

#[test]
fn bf16_d256_gqa_long_sequences_many_key_tiles() {
    check(CASES[17], case(CASES[17]));
}

#[test]
fn f16_d192_v128_mqa_long_sequences_many_key_tiles() {
    check(CASES[18], case(CASES[18]));
}
