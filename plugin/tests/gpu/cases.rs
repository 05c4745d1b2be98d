//! Named cases: masks, layouts, scale forms, head dims, padding, and validating-mode refusals.

use super::*;

#[test]
fn both_dims_orders_gqa_unequal_lengths_dense_token_major_lse() {
    // S_q and S_kv differ and neither equals a head count: a positional reading of the
    // [B, H, S, D] order would take S for H.
    for (dtype, lse) in [
        (DataType::BFloat16, Lse::DenseTokenMajor),
        (DataType::Half, Lse::Ragged),
    ] {
        both_dims_orders("both_dims_orders_gqa_unequal_lengths", |bhsd_dims| Case {
            band: (None, Some(0), DiagonalAlignment::BottomRight),
            lse,
            bhsd_dims,
            ..Case::new(dtype, 64, (4, 2), &[9, 0, 21], &[14, 3, 30])
        });
    }
}

#[test]
fn zero_length_batches_bf16_d128_gqa_dense_lse() {
    check(
        "zero_length_batches_bf16_d128_gqa_dense_lse",
        Case {
            lse: Lse::Dense,
            // Batch 1 is empty; batch 3 has queries but no keys (O = 0, LSE = -inf).
            ..Case::new(
                DataType::BFloat16,
                128,
                (8, 2),
                &[37, 0, 130, 5],
                &[50, 0, 200, 0],
            )
        },
    );
}

#[test]
fn causal_top_left_f16_d64_ragged_lse() {
    check(
        "causal_top_left_f16_d64_ragged_lse",
        Case {
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::Ragged,
            ..Case::new(
                DataType::Half,
                64,
                (4, 4),
                &[64, 1, 200, 17],
                &[64, 300, 17, 90],
            )
        },
    );
}

#[test]
fn causal_bottom_right_bf16_d64_mqa() {
    check(
        "causal_bottom_right_bf16_d64_mqa",
        Case {
            band: (None, Some(0), DiagonalAlignment::BottomRight),
            lse: Lse::Dense,
            // Batch 1 has fewer keys than queries: its top rows admit no key.
            ..Case::new(DataType::BFloat16, 64, (6, 1), &[40, 70, 9], &[90, 20, 9])
        },
    );
}

#[test]
fn sliding_window_f16_d128_no_lse() {
    check(
        "sliding_window_f16_d128_no_lse",
        Case {
            band: (Some(16), Some(4), DiagonalAlignment::BottomRight),
            ..Case::new(
                DataType::Half,
                128,
                (2, 1),
                &[300, 129, 128],
                &[260, 129, 1],
            )
        },
    );
}

/// A pass-by-value scale arrives as a host pointer while every tensor is on the device
/// (plugin-abi.md §5.7): the CUDA engine reads it at execute. A scale far from the graph's
/// `1/√D` would show in O if either engine ignored it.
#[test]
fn runtime_pass_by_value_scale_bf16_d64() {
    check(
        "runtime_pass_by_value_scale_bf16_d64",
        Case {
            lse: Lse::Dense,
            runtime_scale: Some(0.7),
            ..Case::new(DataType::BFloat16, 64, (4, 2), &[33, 0, 70], &[40, 12, 70])
        },
    );
}

/// In validating mode (`HIPDNN_RAGGED_SDPA_VALIDATE=1`, read once per process) decreasing Q
/// offsets are an INVALID_VALUE naming the offsets tensor, and O keeps its sentinel.
#[test]
fn decreasing_offsets_are_invalid_value_in_validating_mode() {
    let name = "decreasing_offsets_are_invalid_value_in_validating_mode";
    if !validating_device_present(name) {
        return;
    }
    let case = Case {
        ..Case::new(DataType::BFloat16, 64, (2, 2), &[8, 8, 8], &[8, 8, 8])
    };
    let mut inputs = device_inputs(&case);
    let bad: Vec<i32> = vec![0, 16, 8, 24];
    for (uid, buffer) in inputs.buffers.iter_mut() {
        if *uid == Q_OFFSETS {
            *buffer = device_with(&le_bytes(&bad, i32::to_le_bytes));
        }
    }
    let (status, error, o, _) = execute(CUDA_FMHA_ID, &case, &inputs);
    assert_eq!(status, INVALID_VALUE, "{error}");
    assert!(
        error.contains("ragged_offset (uid 10)"),
        "names the offsets tensor uid: {error}"
    );
    assert!(o.iter().all(|&b| b == case.o_sentinel()), "O written");
    eprintln!("test {name}: {error}");
}

/// Head dim 96: stored in rows padded to 128 in shared memory, the padding never read from or
/// written to global memory. GQA, causal bottom-right, ragged LSE, in both dims orders.
#[test]
fn head_dim_96_bf16_gqa_causal_ragged_lse() {
    both_dims_orders("head_dim_96_bf16_gqa_causal_ragged_lse", |bhsd_dims| Case {
        band: (None, Some(0), DiagonalAlignment::BottomRight),
        lse: Lse::Ragged,
        bhsd_dims,
        ..Case::new(
            DataType::BFloat16,
            96,
            (6, 2),
            &[150, 0, 77, 1],
            &[160, 9, 77, 300],
        )
    });
}

/// Head dim 256 (the PV product is two n128 halves on sm_90): a zero-length key set and a
/// zero-length batch, dense LSE, sliding window.
#[test]
fn head_dim_256_f16_zero_lengths_window_dense_lse() {
    check(
        "head_dim_256_f16_zero_lengths_window_dense_lse",
        Case {
            band: (Some(40), Some(3), DiagonalAlignment::TopLeft),
            lse: Lse::Dense,
            ..Case::new(
                DataType::Half,
                256,
                (4, 4),
                &[200, 0, 65, 31],
                &[190, 40, 0, 31],
            )
        },
    );
}

/// DeepSeek-style prefill: Q/K head dim 192, V/O head dim 128 (token-unit offsets shared by K and
/// V), GQA, causal top-left, token-major dense LSE.
#[test]
fn head_dims_192_128_bf16_gqa_causal() {
    check(
        "head_dims_192_128_bf16_gqa_causal",
        Case {
            dv: 128,
            band: (None, Some(0), DiagonalAlignment::TopLeft),
            lse: Lse::DenseTokenMajor,
            ..Case::new(
                DataType::BFloat16,
                192,
                (8, 2),
                &[129, 64, 0, 250],
                &[129, 80, 17, 250],
            )
        },
    );
}

/// `seq_len` padding (int64 lengths, padding mask): the rows between a batch's length and its
/// extent hold NaN in Q, K and V and must be neither read nor written; a batch of zero queries
/// and one of zero keys among them; GQA 2, a top-left sliding window, dense LSE.
#[test]
fn seq_len_padding_bf16_d64_window_top_left() {
    check(
        "seq_len_padding_bf16_d64_window_top_left",
        seq_len_padding_case(),
    );
}
