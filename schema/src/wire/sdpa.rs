//! `SdpaAttributes` ↔ the wire table (all 43 fields, so a graph round-trips unchanged).

use super::fb;
use crate::model::{AttentionImplementation, DataType, DiagonalAlignment, SdpaAttributes};

table_codec! {
    SdpaAttributes <=> SdpaAttributes / SdpaAttributesArgs;
    copy: [
        q_tensor_uid, k_tensor_uid, v_tensor_uid, o_tensor_uid, attn_mask_tensor_uid,
        scale_tensor_uid, seq_len_q_tensor_uid, seq_len_kv_tensor_uid, seed_tensor_uid,
        offset_tensor_uid, dropout_mask_tensor_uid, dropout_scale_tensor_uid,
        page_table_k_tensor_uid, page_table_v_tensor_uid, block_mask_tensor_uid,
        sink_token_tensor_uid, descale_q_tensor_uid, descale_k_tensor_uid, descale_v_tensor_uid,
        descale_s_tensor_uid, scale_s_tensor_uid, scale_o_tensor_uid, stats_tensor_uid,
        max_tensor_uid, sum_exp_tensor_uid, rng_dump_tensor_uid, amax_s_tensor_uid,
        amax_o_tensor_uid, generate_stats, alibi_mask, padding_mask, causal_mask,
        causal_mask_bottom_right, dropout_probability, attn_scale_value, left_bound, right_bound,
        max_seq_len_kv,
    ];
    enums: [
        diagonal_alignment: DiagonalAlignment / DiagonalAlignment,
        mma_core_mode: DataType / DataType,
        implementation: AttentionImplementation / AttentionImplementation,
    ];
    strings: [umd_flops, umd_bytes];
}
