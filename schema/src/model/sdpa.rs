//! `SdpaAttributes` (all 43 fields of `sdpa_attributes.fbs`) and the mask-band resolution of
//! schema.md §6.1.

use super::sdpa_shared::{UidField, fields, sdpa_shared, with_set_uids, with_set_uids_of};
use super::{DataType, TensorAttributes};
use crate::error::{SchemaError, ValidationError};

/// Which diagonal the band is anchored to: top-left (offset 0) or bottom-right
/// (offset `S_kv - S_q`, per batch for ragged tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DiagonalAlignment {
    #[default]
    TopLeft,
    BottomRight,
    /// A value a newer producer may write; engines decline it.
    Unknown(i8),
}

impl DiagonalAlignment {
    pub fn from_wire(v: i8) -> Self {
        match v {
            0 => DiagonalAlignment::TopLeft,
            1 => DiagonalAlignment::BottomRight,
            other => DiagonalAlignment::Unknown(other),
        }
    }
    pub fn to_wire(self) -> i8 {
        match self {
            DiagonalAlignment::TopLeft => 0,
            DiagonalAlignment::BottomRight => 1,
            DiagonalAlignment::Unknown(v) => v,
        }
    }
    pub fn json_name(self) -> Option<&'static str> {
        match self {
            DiagonalAlignment::TopLeft => Some("TOP_LEFT"),
            DiagonalAlignment::BottomRight => Some("BOTTOM_RIGHT"),
            DiagonalAlignment::Unknown(_) => None,
        }
    }
    pub fn from_json_name(s: &str) -> Option<Self> {
        match s {
            "TOP_LEFT" => Some(DiagonalAlignment::TopLeft),
            "BOTTOM_RIGHT" => Some(DiagonalAlignment::BottomRight),
            _ => None,
        }
    }
}

/// Upstream's implementation hint; the project's engines ignore it but keep it for round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AttentionImplementation {
    #[default]
    Auto,
    Composite,
    Unified,
    Unknown(i8),
}

impl AttentionImplementation {
    pub fn from_wire(v: i8) -> Self {
        match v {
            0 => AttentionImplementation::Auto,
            1 => AttentionImplementation::Composite,
            2 => AttentionImplementation::Unified,
            other => AttentionImplementation::Unknown(other),
        }
    }
    pub fn to_wire(self) -> i8 {
        match self {
            AttentionImplementation::Auto => 0,
            AttentionImplementation::Composite => 1,
            AttentionImplementation::Unified => 2,
            AttentionImplementation::Unknown(v) => v,
        }
    }
    pub fn json_name(self) -> Option<&'static str> {
        match self {
            AttentionImplementation::Auto => Some("AUTO"),
            AttentionImplementation::Composite => Some("COMPOSITE"),
            AttentionImplementation::Unified => Some("UNIFIED"),
            AttentionImplementation::Unknown(_) => None,
        }
    }
    pub fn from_json_name(s: &str) -> Option<Self> {
        match s {
            "AUTO" => Some(AttentionImplementation::Auto),
            "COMPOSITE" => Some(AttentionImplementation::Composite),
            "UNIFIED" => Some(AttentionImplementation::Unified),
            _ => None,
        }
    }
}

/// The attention mask band after folding the deprecated causal booleans into the modern
/// bounds. `None` means unbounded on that side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiagonalBand {
    pub left: Option<i64>,
    pub right: Option<i64>,
    pub alignment: DiagonalAlignment,
}

/// SDPA forward node attributes; field names and wire order as in schema.md §6.
///
/// Optional uids are `None` when unset (distinct from uid 0, which is a valid uid).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SdpaAttributes {
    pub q_tensor_uid: i64,
    pub k_tensor_uid: i64,
    pub v_tensor_uid: i64,
    pub o_tensor_uid: i64,
    pub attn_mask_tensor_uid: Option<i64>,
    pub scale_tensor_uid: Option<i64>,
    pub seq_len_q_tensor_uid: Option<i64>,
    pub seq_len_kv_tensor_uid: Option<i64>,
    pub seed_tensor_uid: Option<i64>,
    pub offset_tensor_uid: Option<i64>,
    pub dropout_mask_tensor_uid: Option<i64>,
    pub dropout_scale_tensor_uid: Option<i64>,
    pub page_table_k_tensor_uid: Option<i64>,
    pub page_table_v_tensor_uid: Option<i64>,
    pub block_mask_tensor_uid: Option<i64>,
    pub sink_token_tensor_uid: Option<i64>,
    pub descale_q_tensor_uid: Option<i64>,
    pub descale_k_tensor_uid: Option<i64>,
    pub descale_v_tensor_uid: Option<i64>,
    pub descale_s_tensor_uid: Option<i64>,
    pub scale_s_tensor_uid: Option<i64>,
    pub scale_o_tensor_uid: Option<i64>,
    pub stats_tensor_uid: Option<i64>,
    pub max_tensor_uid: Option<i64>,
    pub sum_exp_tensor_uid: Option<i64>,
    pub rng_dump_tensor_uid: Option<i64>,
    pub amax_s_tensor_uid: Option<i64>,
    pub amax_o_tensor_uid: Option<i64>,
    pub generate_stats: Option<bool>,
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
    pub max_seq_len_kv: Option<i32>,
    pub diagonal_alignment: DiagonalAlignment,
    pub mma_core_mode: DataType,
    pub implementation: AttentionImplementation,
    /// RFC 0019 §8 JsonLogic expression; binary only (the JSON writer omits it).
    pub umd_flops: Option<String>,
    pub umd_bytes: Option<String>,
}

/// Optional input uids, in schema order (the JSON `inputs` object holds these plus q, k, v).
pub(crate) const OPTIONAL_INPUT_UIDS: [UidField<SdpaAttributes>; 18] = fields!(
    SdpaAttributes:
    attn_mask_tensor_uid,
    scale_tensor_uid,
    seq_len_q_tensor_uid,
    seq_len_kv_tensor_uid,
    seed_tensor_uid,
    offset_tensor_uid,
    dropout_mask_tensor_uid,
    dropout_scale_tensor_uid,
    page_table_k_tensor_uid,
    page_table_v_tensor_uid,
    block_mask_tensor_uid,
    sink_token_tensor_uid,
    descale_q_tensor_uid,
    descale_k_tensor_uid,
    descale_v_tensor_uid,
    descale_s_tensor_uid,
    scale_s_tensor_uid,
    scale_o_tensor_uid,
);

/// Optional output uids, in schema order (the JSON `outputs` object holds these plus o).
pub(crate) const OPTIONAL_OUTPUT_UIDS: [UidField<SdpaAttributes>; 6] = fields!(
    SdpaAttributes:
    stats_tensor_uid,
    max_tensor_uid,
    sum_exp_tensor_uid,
    rng_dump_tensor_uid,
    amax_s_tensor_uid,
    amax_o_tensor_uid,
);

sdpa_shared!(SdpaAttributes);

impl SdpaAttributes {
    /// An SDPA node over the four required tensors; everything else unset or default.
    pub fn new(q_uid: i64, k_uid: i64, v_uid: i64, o_uid: i64) -> Self {
        SdpaAttributes {
            q_tensor_uid: q_uid,
            k_tensor_uid: k_uid,
            v_tensor_uid: v_uid,
            o_tensor_uid: o_uid,
            ..SdpaAttributes::default()
        }
    }

    /// The log-sum-exp output.
    pub fn set_stats(mut self, stats: &TensorAttributes) -> Self {
        self.stats_tensor_uid = Some(stats.uid);
        self
    }
    /// Every tensor uid the node refers to, as `(field name, uid)`, required ones first.
    pub fn tensor_uids(&self) -> Vec<(&'static str, i64)> {
        let required = [
            ("q_tensor_uid", self.q_tensor_uid),
            ("k_tensor_uid", self.k_tensor_uid),
            ("v_tensor_uid", self.v_tensor_uid),
            ("o_tensor_uid", self.o_tensor_uid),
        ];
        with_set_uids_of(
            &required,
            &[&OPTIONAL_INPUT_UIDS, &OPTIONAL_OUTPUT_UIDS],
            self,
        )
    }

    /// The tensors the node reads: Q, K, V and the optional inputs that are set.
    pub fn inputs(&self) -> Vec<(&'static str, i64)> {
        let required = [
            ("q_tensor_uid", self.q_tensor_uid),
            ("k_tensor_uid", self.k_tensor_uid),
            ("v_tensor_uid", self.v_tensor_uid),
        ];
        with_set_uids(&required, &OPTIONAL_INPUT_UIDS, self)
    }

    /// The tensors the node writes: O and the optional outputs that are set.
    pub fn outputs(&self) -> Vec<(&'static str, i64)> {
        with_set_uids(
            &[("o_tensor_uid", self.o_tensor_uid)],
            &OPTIONAL_OUTPUT_UIDS,
            self,
        )
    }

    /// Folds the deprecated causal booleans into a band (schema.md §6.1, as upstream's
    /// `resolveDiagonalBand`). Negative bounds mean unbounded and come back as `None`.
    pub fn resolve_diagonal_band(&self) -> Result<DiagonalBand, SchemaError> {
        let bounded = |b: Option<i64>| b.filter(|v| *v >= 0);
        let left = bounded(self.left_bound);
        let right = bounded(self.right_bound);
        match (self.causal_mask, self.causal_mask_bottom_right) {
            (true, true) => Err(ValidationError::AmbiguousCausalMask.into()),
            (false, false) => Ok(DiagonalBand {
                left,
                right,
                alignment: self.diagonal_alignment,
            }),
            (true, false) => Ok(DiagonalBand {
                left,
                right: Some(right.unwrap_or(0)),
                alignment: self.diagonal_alignment,
            }),
            (false, true) => Ok(DiagonalBand {
                left,
                right: Some(right.unwrap_or(0)),
                alignment: DiagonalAlignment::BottomRight,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(s: &SdpaAttributes) -> DiagonalBand {
        match s.resolve_diagonal_band() {
            Ok(b) => b,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn no_mask_is_unbounded() {
        let s = SdpaAttributes::new(1, 2, 3, 4);
        assert_eq!(
            band(&s),
            DiagonalBand {
                left: None,
                right: None,
                alignment: DiagonalAlignment::TopLeft
            }
        );
    }

    #[test]
    fn negative_bounds_mean_unbounded() {
        let s = SdpaAttributes {
            left_bound: Some(-1),
            right_bound: Some(-5),
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        assert_eq!(band(&s).left, None);
        assert_eq!(band(&s).right, None);
    }

    #[test]
    fn deprecated_causal_keeps_stored_alignment() {
        let s = SdpaAttributes {
            causal_mask: true,
            diagonal_alignment: DiagonalAlignment::BottomRight,
            left_bound: Some(8),
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        assert_eq!(
            band(&s),
            DiagonalBand {
                left: Some(8),
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight
            }
        );
    }

    #[test]
    fn deprecated_bottom_right_forces_alignment_and_keeps_nonnegative_right() {
        let s = SdpaAttributes {
            causal_mask_bottom_right: true,
            right_bound: Some(3),
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        assert_eq!(
            band(&s),
            DiagonalBand {
                left: None,
                right: Some(3),
                alignment: DiagonalAlignment::BottomRight
            }
        );
    }

    #[test]
    fn both_deprecated_flags_are_an_error() {
        let s = SdpaAttributes {
            causal_mask: true,
            causal_mask_bottom_right: true,
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        assert_eq!(
            s.resolve_diagonal_band(),
            Err(SchemaError::Validation(
                ValidationError::AmbiguousCausalMask
            ))
        );
    }

    #[test]
    fn tensor_uids_lists_required_then_set_optionals() {
        let s = SdpaAttributes {
            stats_tensor_uid: Some(9),
            seq_len_q_tensor_uid: Some(7),
            ..SdpaAttributes::new(1, 2, 3, 4)
        };
        assert_eq!(
            s.tensor_uids(),
            vec![
                ("q_tensor_uid", 1),
                ("k_tensor_uid", 2),
                ("v_tensor_uid", 3),
                ("o_tensor_uid", 4),
                ("seq_len_q_tensor_uid", 7),
                ("stats_tensor_uid", 9),
            ]
        );
    }

    #[test]
    fn builder_setters_store_uids_and_band() {
        let t = |uid| TensorAttributes::new().set_uid(uid);
        let s = SdpaAttributes::new(1, 2, 3, 4)
            .set_seq_len_q(&t(5))
            .set_seq_len_kv(&t(6))
            .set_stats(&t(7))
            .set_scale_tensor(&t(8))
            .set_attn_scale_value(0.5)
            .set_diagonal_band(Some(4), Some(0), DiagonalAlignment::BottomRight);
        assert_eq!(
            (
                s.seq_len_q_tensor_uid,
                s.seq_len_kv_tensor_uid,
                s.stats_tensor_uid,
                s.scale_tensor_uid
            ),
            (Some(5), Some(6), Some(7), Some(8))
        );
        assert_eq!(s.attn_scale_value, Some(0.5));
        assert_eq!(
            band(&s),
            DiagonalBand {
                left: Some(4),
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight
            }
        );
    }
}
