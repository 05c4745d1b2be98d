//! `SdpaBackwardAttributes` ↔ the wire table (all 28 fields, so a graph round-trips unchanged).

use super::fb;
use crate::model::{DiagonalAlignment, SdpaBackwardAttributes};

table_codec! {
    SdpaBackwardAttributes <=> SdpaBackwardAttributes / SdpaBackwardAttributesArgs;
    copy: [
        q_tensor_uid, k_tensor_uid, v_tensor_uid, o_tensor_uid, do_tensor_uid, stats_tensor_uid,
        dq_tensor_uid, dk_tensor_uid, dv_tensor_uid, scale_tensor_uid, attn_mask_tensor_uid,
        seq_len_q_tensor_uid, seq_len_kv_tensor_uid, seed_tensor_uid, offset_tensor_uid,
        dropout_mask_tensor_uid, dropout_scale_tensor_uid, dropout_scale_inv_tensor_uid,
        dbias_tensor_uid, alibi_mask, padding_mask, causal_mask, causal_mask_bottom_right,
        dropout_probability, attn_scale_value, left_bound, right_bound,
    ];
    enums: [diagonal_alignment: DiagonalAlignment / DiagonalAlignment];
    strings: [];
}

#[cfg(test)]
mod tests {
    use super::fb::SdpaBackwardAttributes as T;

    /// Upstream's field order (issue 15, read from upstream's schema at 79c051a5): field i sits
    /// at vtable offset 4 + 2·i. Pinned here because a reordered `.fbs` would still round-trip
    /// through this crate while no longer reading upstream's buffers.
    #[test]
    fn vtable_slots_follow_upstreams_field_order() {
        let slots = [
            T::VT_Q_TENSOR_UID,
            T::VT_K_TENSOR_UID,
            T::VT_V_TENSOR_UID,
            T::VT_O_TENSOR_UID,
            T::VT_DO_TENSOR_UID,
            T::VT_STATS_TENSOR_UID,
            T::VT_DQ_TENSOR_UID,
            T::VT_DK_TENSOR_UID,
            T::VT_DV_TENSOR_UID,
            T::VT_SCALE_TENSOR_UID,
            T::VT_ATTN_MASK_TENSOR_UID,
            T::VT_SEQ_LEN_Q_TENSOR_UID,
            T::VT_SEQ_LEN_KV_TENSOR_UID,
            T::VT_SEED_TENSOR_UID,
            T::VT_OFFSET_TENSOR_UID,
            T::VT_DROPOUT_MASK_TENSOR_UID,
            T::VT_DROPOUT_SCALE_TENSOR_UID,
            T::VT_DROPOUT_SCALE_INV_TENSOR_UID,
            T::VT_DBIAS_TENSOR_UID,
            T::VT_ALIBI_MASK,
            T::VT_PADDING_MASK,
            T::VT_CAUSAL_MASK,
            T::VT_CAUSAL_MASK_BOTTOM_RIGHT,
            T::VT_DROPOUT_PROBABILITY,
            T::VT_ATTN_SCALE_VALUE,
            T::VT_LEFT_BOUND,
            T::VT_RIGHT_BOUND,
            T::VT_DIAGONAL_ALIGNMENT,
        ];
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(usize::from(*slot), 4 + 2 * i, "field {i}");
        }
    }
}
