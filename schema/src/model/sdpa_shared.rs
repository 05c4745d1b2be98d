//! What the forward and backward SDPA nodes have in common: optional tensor uids walked from
//! tables, the mask flags, dropout and scale scalars and band bounds that both tables carry
//! under the same names, and the builder setters of those. Written once so JSON, validation and
//! the builders cannot treat the two node kinds differently by accident.

/// One named field of a node, read and written through plain functions so a table of them can
/// be walked by generic code (JSON, validation, tests).
pub(crate) struct Field<T, V> {
    pub(crate) name: &'static str,
    pub(crate) get: fn(&T) -> V,
    pub(crate) slot: fn(&mut T) -> &mut V,
}

/// One optional tensor-uid field.
pub(crate) type UidField<T> = Field<T, Option<i64>>;

/// A table of [`Field`]s over `$ty`, in the order given.
macro_rules! fields {
    ($ty:ty: $($field:ident),* $(,)?) => {
        [$($crate::model::sdpa_shared::Field::<$ty, _> {
            name: stringify!($field),
            get: |s| s.$field,
            slot: |s| &mut s.$field,
        }),*]
    };
}
pub(crate) use fields;

/// The `(field name, uid)` pairs of `fields` that are set on `node`, after `required`.
pub(crate) fn with_set_uids<T>(
    required: &[(&'static str, i64)],
    fields: &[UidField<T>],
    node: &T,
) -> Vec<(&'static str, i64)> {
    with_set_uids_of(required, &[fields], node)
}

/// `required`, then the set uids of each list of `optional` in order, in one allocation of the
/// exact size: these lists are built on every GetApplicableEngineIds (issue 14 item 5).
pub(crate) fn with_set_uids_of<T>(
    required: &[(&'static str, i64)],
    optional: &[&[UidField<T>]],
    node: &T,
) -> Vec<(&'static str, i64)> {
    let set = || {
        optional
            .iter()
            .flat_map(|fields| fields.iter())
            .filter_map(|f| (f.get)(node).map(|uid| (f.name, uid)))
    };
    let mut out = Vec::with_capacity(required.len() + set().count());
    out.extend_from_slice(required);
    out.extend(set());
    out
}

/// The attribute fields both SDPA tables carry under one name and meaning, in wire order.
pub(crate) trait SdpaShared: Sized + 'static {
    /// `alibi_mask`, `padding_mask`, `causal_mask`, `causal_mask_bottom_right`: absent is false.
    const FLAGS: [Field<Self, bool>; 4];
    /// `dropout_probability`, `attn_scale_value`.
    const SCALARS: [Field<Self, Option<f32>>; 2];
    /// `left_bound`, `right_bound`.
    const BOUNDS: [Field<Self, Option<i64>>; 2];
    /// `seq_len_q_tensor_uid`, `seq_len_kv_tensor_uid`.
    const SEQ_LENS: [UidField<Self>; 2];
}

/// Implements [`SdpaShared`] for a node type and gives it the builder setters both node kinds
/// offer (lengths, scale, band).
macro_rules! sdpa_shared {
    ($ty:ident) => {
        impl $crate::model::sdpa_shared::SdpaShared for $ty {
            const FLAGS: [$crate::model::sdpa_shared::Field<Self, bool>; 4] = $crate::model::sdpa_shared::fields!(
                $ty: alibi_mask,
                padding_mask,
                causal_mask,
                causal_mask_bottom_right
            );
            const SCALARS: [$crate::model::sdpa_shared::Field<Self, Option<f32>>; 2] =
                $crate::model::sdpa_shared::fields!($ty: dropout_probability, attn_scale_value);
            const BOUNDS: [$crate::model::sdpa_shared::Field<Self, Option<i64>>; 2] =
                $crate::model::sdpa_shared::fields!($ty: left_bound, right_bound);
            const SEQ_LENS: [$crate::model::sdpa_shared::UidField<Self>; 2] =
                $crate::model::sdpa_shared::fields!($ty: seq_len_q_tensor_uid, seq_len_kv_tensor_uid);
        }

        impl $ty {
            /// Per-batch valid query lengths (`[B, 1, 1, 1]`, int32/int64): the RFC's
            /// `set_seq_len_q`.
            pub fn set_seq_len_q(mut self, seq_len_q: &$crate::model::TensorAttributes) -> Self {
                self.seq_len_q_tensor_uid = Some(seq_len_q.uid);
                self
            }
            /// Per-batch valid key/value lengths, usually shared by K and V.
            pub fn set_seq_len_kv(mut self, seq_len_kv: &$crate::model::TensorAttributes) -> Self {
                self.seq_len_kv_tensor_uid = Some(seq_len_kv.uid);
                self
            }
            /// A scale scalar tensor (baked value or runtime pass-by-value); wins over the baked
            /// float.
            pub fn set_scale_tensor(mut self, scale: &$crate::model::TensorAttributes) -> Self {
                self.scale_tensor_uid = Some(scale.uid);
                self
            }
            pub fn set_attn_scale_value(mut self, scale: f32) -> Self {
                self.attn_scale_value = Some(scale);
                self
            }
            /// The modern mask band; `None` is unbounded. Causal is `(None, Some(0), alignment)`.
            pub fn set_diagonal_band(
                mut self,
                left: Option<i64>,
                right: Option<i64>,
                alignment: $crate::model::DiagonalAlignment,
            ) -> Self {
                self.left_bound = left;
                self.right_bound = right;
                self.diagonal_alignment = alignment;
                self
            }
        }
    };
}
pub(crate) use sdpa_shared;
