//! An FP8 forward's scalars and amax outputs (kernels/core/fp8-attention.md §1): what the
//! plugin planned from the graph's eight FP8 fields, already checked against Q, K, V and O.

use super::ScalePlan;
use crate::fp8::Fp8Format;

/// One of the six one-element FLOAT inputs (`descale_q_tensor_uid`, …), read like the attention
/// scale (schema.md §6.2): baked into the graph, a pass-by-value host scalar, or a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp8Scalar {
    /// The SDPA field that names it, for messages and the binding.
    pub role: &'static str,
    /// Where its value comes from (always FLOAT when it is bound).
    pub plan: ScalePlan,
}

impl Fp8Scalar {
    /// The uid the call binds, `None` for a baked value.
    pub fn bound_uid(&self) -> Option<i64> {
        match self.plan {
            ScalePlan::Fixed(_) => None,
            ScalePlan::RuntimeHostScalar { uid, .. } | ScalePlan::DeviceTensor { uid, .. } => {
                Some(uid)
            }
        }
    }
}

/// P's quantization (`scale_s_tensor_uid` and `descale_s_tensor_uid`, both or neither).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp8Softmax {
    /// Multiplies P before it is rounded to the inputs' format.
    pub scale_s: Fp8Scalar,
    /// Multiplies the quantized P in the second product.
    pub descale_s: Fp8Scalar,
}

/// O's side of an FP8 forward.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fp8OutputPlan {
    /// O holds FP8 codes of `format` (the inputs' family), scaled by `scale_o` before rounding.
    Fp8 {
        /// O's format.
        format: Fp8Format,
        /// `scale_o_tensor_uid`.
        scale_o: Fp8Scalar,
    },
    /// O is FLOAT, HALF or BFLOAT16 (its operand's type), with no output scale.
    Wide,
}

/// A one-element FLOAT output (`amax_s_tensor_uid`, `amax_o_tensor_uid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amax {
    /// The SDPA field that names it.
    pub role: &'static str,
    /// Graph uid.
    pub uid: i64,
    /// Written `[1, 1, 1, 1]` (cuDNN) rather than `[1]`.
    pub rank4: bool,
    /// Declared pointer alignment in bytes.
    pub alignment: i64,
}

impl Amax {
    /// The dims as the graph writes them.
    pub fn dims(&self) -> Vec<i64> {
        vec![1; if self.rank4 { 4 } else { 1 }]
    }

    /// Strides over one element: every axis has extent 1, so any stride addresses element 0;
    /// 1 is what the binding is sized by.
    pub fn strides(&self) -> Vec<i64> {
        self.dims()
    }
}

/// The FP8 side of a forward whose Q, K and V hold codes of `input`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp8Forward {
    /// The format of Q, K and V (and of P when it is quantized).
    pub input: Fp8Format,
    /// `descale_q_tensor_uid`.
    pub descale_q: Fp8Scalar,
    /// `descale_k_tensor_uid`.
    pub descale_k: Fp8Scalar,
    /// `descale_v_tensor_uid`.
    pub descale_v: Fp8Scalar,
    /// P's quantization; `None` keeps P exact (upstream's shape).
    pub softmax: Option<Fp8Softmax>,
    /// O's type and scale.
    pub output: Fp8OutputPlan,
    /// `amax_s_tensor_uid`: `max P` before `scale_s`.
    pub amax_s: Option<Amax>,
    /// `amax_o_tensor_uid`: `max |O|` before `scale_o`.
    pub amax_o: Option<Amax>,
}

impl Fp8Forward {
    /// Every scalar input present, descales first.
    pub fn scalars(&self) -> impl Iterator<Item = &Fp8Scalar> {
        let softmax = self.softmax.iter().flat_map(|s| [&s.scale_s, &s.descale_s]);
        let scale_o = match &self.output {
            Fp8OutputPlan::Fp8 { scale_o, .. } => Some(scale_o),
            Fp8OutputPlan::Wide => None,
        };
        [&self.descale_q, &self.descale_k, &self.descale_v]
            .into_iter()
            .chain(softmax)
            .chain(scale_o)
    }

    /// The amax outputs present.
    pub fn amaxes(&self) -> impl Iterator<Item = &Amax> {
        self.amax_s.iter().chain(self.amax_o.iter())
    }

    /// The role of `uid` among the scalars and amax outputs.
    pub fn role_of(&self, uid: i64) -> Option<&'static str> {
        self.scalars()
            .find(|s| s.bound_uid() == Some(uid))
            .map(|s| s.role)
            .or_else(|| self.amaxes().find(|a| a.uid == uid).map(|a| a.role))
    }
}
