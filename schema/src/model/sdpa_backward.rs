//! `SdpaBackwardAttributes` (all 28 fields of `sdpa_backward_attributes.fbs`, union tag 15): the
//! gradient node of SDPA. It reads the forward's inputs, its output O and LSE (`stats`) and the
//! incoming gradient dO, and writes dQ, dK and dV.

use super::sdpa_shared::{UidField, fields, sdpa_shared, with_set_uids};
use super::{DiagonalAlignment, DiagonalBand, SdpaAttributes};
use crate::error::SchemaError;

/// SDPA backward node attributes; field names and wire order as upstream's table.
///
/// Optional uids are `None` when unset (distinct from uid 0, which is a valid uid).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SdpaBackwardAttributes {
    pub q_tensor_uid: i64,
    pub k_tensor_uid: i64,
    pub v_tensor_uid: i64,
    /// The forward's output, read to form `rowsum(dO ∘ O)`.
    pub o_tensor_uid: i64,
    /// The gradient flowing into O.
    pub do_tensor_uid: i64,
    /// The forward's log-sum-exp, from which the probabilities are recomputed.
    pub stats_tensor_uid: i64,
    pub dq_tensor_uid: i64,
    pub dk_tensor_uid: i64,
    pub dv_tensor_uid: i64,
    pub scale_tensor_uid: Option<i64>,
    pub attn_mask_tensor_uid: Option<i64>,
    pub seq_len_q_tensor_uid: Option<i64>,
    pub seq_len_kv_tensor_uid: Option<i64>,
    pub seed_tensor_uid: Option<i64>,
    pub offset_tensor_uid: Option<i64>,
    pub dropout_mask_tensor_uid: Option<i64>,
    pub dropout_scale_tensor_uid: Option<i64>,
    pub dropout_scale_inv_tensor_uid: Option<i64>,
    /// Gradient of the additive bias (an optional output).
    pub dbias_tensor_uid: Option<i64>,
    pub alibi_mask: bool,
    pub padding_mask: bool,
    /// Deprecated: use `right_bound = 0` with `diagonal_alignment`.
    pub causal_mask: bool,
    /// Deprecated: use `right_bound = 0` with `DiagonalAlignment::BottomRight`.
    pub causal_mask_bottom_right: bool,
    pub dropout_probability: Option<f32>,
    pub attn_scale_value: Option<f32>,
    pub left_bound: Option<i64>,
    pub right_bound: Option<i64>,
    pub diagonal_alignment: DiagonalAlignment,
}

/// Optional input uids in wire order (upstream's JSON `inputs` holds these after the six
/// required inputs).
pub(crate) const BACKWARD_OPTIONAL_INPUTS: [UidField<SdpaBackwardAttributes>; 9] = fields!(
    SdpaBackwardAttributes:
    scale_tensor_uid,
    attn_mask_tensor_uid,
    seq_len_q_tensor_uid,
    seq_len_kv_tensor_uid,
    seed_tensor_uid,
    offset_tensor_uid,
    dropout_mask_tensor_uid,
    dropout_scale_tensor_uid,
    dropout_scale_inv_tensor_uid,
);

sdpa_shared!(SdpaBackwardAttributes);

impl SdpaBackwardAttributes {
    /// A backward node over its nine required tensors; everything else unset or default.
    #[allow(clippy::too_many_arguments)] // the nine required roles, in wire order
    pub fn new(
        q_uid: i64,
        k_uid: i64,
        v_uid: i64,
        o_uid: i64,
        do_uid: i64,
        stats_uid: i64,
        dq_uid: i64,
        dk_uid: i64,
        dv_uid: i64,
    ) -> Self {
        SdpaBackwardAttributes {
            q_tensor_uid: q_uid,
            k_tensor_uid: k_uid,
            v_tensor_uid: v_uid,
            o_tensor_uid: o_uid,
            do_tensor_uid: do_uid,
            stats_tensor_uid: stats_uid,
            dq_tensor_uid: dq_uid,
            dk_tensor_uid: dk_uid,
            dv_tensor_uid: dv_uid,
            ..SdpaBackwardAttributes::default()
        }
    }

    /// The backward of a forward node: the same Q, K, V, O, LSE, lengths, scale and mask, so a
    /// training graph cannot disagree with its forward by construction. Fails if the forward
    /// has no stats output, which the backward cannot do without.
    pub fn for_forward(
        forward: &SdpaAttributes,
        do_uid: i64,
        dq_uid: i64,
        dk_uid: i64,
        dv_uid: i64,
    ) -> Option<Self> {
        Some(SdpaBackwardAttributes {
            scale_tensor_uid: forward.scale_tensor_uid,
            seq_len_q_tensor_uid: forward.seq_len_q_tensor_uid,
            seq_len_kv_tensor_uid: forward.seq_len_kv_tensor_uid,
            padding_mask: forward.padding_mask,
            causal_mask: forward.causal_mask,
            causal_mask_bottom_right: forward.causal_mask_bottom_right,
            attn_scale_value: forward.attn_scale_value,
            left_bound: forward.left_bound,
            right_bound: forward.right_bound,
            diagonal_alignment: forward.diagonal_alignment,
            ..SdpaBackwardAttributes::new(
                forward.q_tensor_uid,
                forward.k_tensor_uid,
                forward.v_tensor_uid,
                forward.o_tensor_uid,
                do_uid,
                forward.stats_tensor_uid?,
                dq_uid,
                dk_uid,
                dv_uid,
            )
        })
    }

    /// The forward node this backward differentiates, the inverse of [`Self::for_forward`]: the
    /// same Q, K, V, O, LSE, lengths, scale and band fields, so whoever resolves the forward
    /// (the plugin's problem builder, the shim's harness) resolves them exactly as it did there.
    pub fn forward(&self) -> SdpaAttributes {
        SdpaAttributes {
            stats_tensor_uid: Some(self.stats_tensor_uid),
            scale_tensor_uid: self.scale_tensor_uid,
            seq_len_q_tensor_uid: self.seq_len_q_tensor_uid,
            seq_len_kv_tensor_uid: self.seq_len_kv_tensor_uid,
            padding_mask: self.padding_mask,
            causal_mask: self.causal_mask,
            causal_mask_bottom_right: self.causal_mask_bottom_right,
            attn_scale_value: self.attn_scale_value,
            left_bound: self.left_bound,
            right_bound: self.right_bound,
            diagonal_alignment: self.diagonal_alignment,
            ..SdpaAttributes::new(
                self.q_tensor_uid,
                self.k_tensor_uid,
                self.v_tensor_uid,
                self.o_tensor_uid,
            )
        }
    }

    /// The tensors the node reads, as `(field name, uid)`: the six required inputs, then the
    /// optional ones that are set.
    pub fn inputs(&self) -> Vec<(&'static str, i64)> {
        let required = [
            ("q_tensor_uid", self.q_tensor_uid),
            ("k_tensor_uid", self.k_tensor_uid),
            ("v_tensor_uid", self.v_tensor_uid),
            ("o_tensor_uid", self.o_tensor_uid),
            ("do_tensor_uid", self.do_tensor_uid),
            ("stats_tensor_uid", self.stats_tensor_uid),
        ];
        with_set_uids(&required, &BACKWARD_OPTIONAL_INPUTS, self)
    }

    /// The tensors the node writes: dQ, dK, dV and dBias when set.
    pub fn outputs(&self) -> Vec<(&'static str, i64)> {
        let mut out = vec![
            ("dq_tensor_uid", self.dq_tensor_uid),
            ("dk_tensor_uid", self.dk_tensor_uid),
            ("dv_tensor_uid", self.dv_tensor_uid),
        ];
        if let Some(uid) = self.dbias_tensor_uid {
            out.push(("dbias_tensor_uid", uid));
        }
        out
    }

    /// Every tensor uid the node refers to, inputs first.
    pub fn tensor_uids(&self) -> Vec<(&'static str, i64)> {
        let mut out = self.inputs();
        out.extend(self.outputs());
        out
    }

    /// The mask band, folded exactly as the forward folds it (schema.md §6.1): the backward
    /// must admit the keys its forward admitted, so the rule is the forward's own code.
    pub fn resolve_diagonal_band(&self) -> Result<DiagonalBand, SchemaError> {
        self.forward().resolve_diagonal_band()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ValidationError;
    use crate::model::TensorAttributes;

    fn node() -> SdpaBackwardAttributes {
        SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9)
    }

    #[test]
    fn new_sets_the_nine_roles_and_leaves_the_rest_at_schema_defaults() {
        let s = node();
        assert_eq!(
            s.tensor_uids(),
            vec![
                ("q_tensor_uid", 1),
                ("k_tensor_uid", 2),
                ("v_tensor_uid", 3),
                ("o_tensor_uid", 4),
                ("do_tensor_uid", 5),
                ("stats_tensor_uid", 6),
                ("dq_tensor_uid", 7),
                ("dk_tensor_uid", 8),
                ("dv_tensor_uid", 9),
            ]
        );
        assert!(
            BACKWARD_OPTIONAL_INPUTS
                .iter()
                .all(|f| (f.get)(&s).is_none())
        );
        assert_eq!(s.dbias_tensor_uid, None);
        assert!(!(s.alibi_mask || s.padding_mask || s.causal_mask || s.causal_mask_bottom_right));
        assert_eq!(s.diagonal_alignment, DiagonalAlignment::TopLeft);
        assert_eq!((s.dropout_probability, s.attn_scale_value), (None, None));
        assert_eq!((s.left_bound, s.right_bound), (None, None));
    }

    #[test]
    fn inputs_and_outputs_list_set_optionals_in_wire_order() {
        let t = |uid| TensorAttributes::new().set_uid(uid);
        let s = SdpaBackwardAttributes {
            dbias_tensor_uid: Some(20),
            ..node().set_seq_len_kv(&t(13)).set_scale_tensor(&t(10))
        };
        let inputs = s.inputs();
        assert_eq!(
            inputs[6..],
            [("scale_tensor_uid", 10), ("seq_len_kv_tensor_uid", 13)]
        );
        assert_eq!(s.outputs().last(), Some(&("dbias_tensor_uid", 20)));
    }

    #[test]
    fn band_resolution_is_the_forwards() {
        let causal_br = SdpaBackwardAttributes {
            causal_mask_bottom_right: true,
            left_bound: Some(4),
            ..node()
        };
        assert_eq!(
            causal_br.resolve_diagonal_band(),
            Ok(DiagonalBand {
                left: Some(4),
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight
            })
        );
        let both = SdpaBackwardAttributes {
            causal_mask: true,
            causal_mask_bottom_right: true,
            ..node()
        };
        assert_eq!(
            both.resolve_diagonal_band(),
            Err(SchemaError::Validation(
                ValidationError::AmbiguousCausalMask
            ))
        );
        let window = node().set_diagonal_band(Some(2), Some(-1), DiagonalAlignment::TopLeft);
        assert_eq!(
            window.resolve_diagonal_band(),
            Ok(DiagonalBand {
                left: Some(2),
                right: None,
                alignment: DiagonalAlignment::TopLeft
            })
        );
    }

    #[test]
    fn for_forward_copies_the_forwards_shared_fields() {
        let forward = SdpaAttributes {
            stats_tensor_uid: Some(6),
            seq_len_q_tensor_uid: Some(11),
            attn_scale_value: Some(0.125),
            right_bound: Some(0),
            diagonal_alignment: DiagonalAlignment::BottomRight,
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        let b = SdpaBackwardAttributes::for_forward(&forward, 5, 7, 8, 9);
        let expected = SdpaBackwardAttributes {
            seq_len_q_tensor_uid: Some(11),
            attn_scale_value: Some(0.125),
            right_bound: Some(0),
            diagonal_alignment: DiagonalAlignment::BottomRight,
            ..node()
        };
        assert_eq!(b, Some(expected));
        assert_eq!(b.map(|b| b.forward()), Some(forward));
        assert_eq!(
            SdpaBackwardAttributes::for_forward(&SdpaAttributes::new(1, 2, 3, 4), 5, 7, 8, 9),
            None
        );
    }
}
