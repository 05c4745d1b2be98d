//! The host engine's SDPA forward: the call's host slices as tensors, then the CPU reference.
//!
//! The binder has already read and validated every offset (each ragged tensor arrives with its
//! layout) and checked that O and the LSE overlap nothing else; the reference validates the rest
//! before it writes, so a failing execute writes no output byte.

use std::sync::Arc;

use ragged_core::binding::Call;
use ragged_core::engine::{Planned, Reach};
use ragged_core::problem::{Fp8Forward, Fp8OutputPlan, RaggedSdpaProblem};
use ragged_core::{HostData, HostDataMut, KernelError, Role, SdpaParams, Tensor};
use ragged_reference::{
    ForwardExtras, Fp8Attributes, Fp8Scales, Fp8Tensors, PagedInputs, SoftmaxQuantization,
    sdpa_forward_fp8_tensors, sdpa_forward_with,
};

use crate::pool;
use crate::views::{self, View};

/// The host engine's plan for one SDPA forward: the problem is all it needs.
#[derive(Debug)]
pub struct HostForward {
    problem: Arc<RaggedSdpaProblem>,
}

impl HostForward {
    pub fn new(problem: Arc<RaggedSdpaProblem>) -> Self {
        HostForward { problem }
    }
}

impl Planned for HostForward {
    fn reach(&self) -> Reach {
        Reach::Host
    }

    fn execute(&self, call: &mut Call<'_>) -> Result<(), KernelError> {
        let p = &*self.problem;
        let scale = call.scale(p.scale)?;
        if let Some(fp8) = &p.fp8 {
            return execute_fp8(p, fp8, scale, call).map_err(|error| name_tensor(error, p));
        }
        let Operands {
            q,
            k,
            v,
            mut o,
            mut lse,
            seq_len_q,
            seq_len_kv,
        } = Operands::bind(call, p)?;
        let tables = p
            .paged
            .map(|paged| -> Result<_, KernelError> {
                let [k, v] = paged.tables();
                Ok((
                    views::dense(call, k.uid, k.dims(), k.strides())?,
                    views::dense(call, v.uid, v.dims(), v.strides())?,
                    paged.max_seq_len_kv,
                ))
            })
            .transpose()?;
        let sinks = p
            .sinks
            .map(|s| views::dense(call, s.uid, s.dims(), s.strides()))
            .transpose()?;
        let params = SdpaParams {
            scale,
            band: p.mask,
        };
        let extras = ForwardExtras {
            paged: tables.as_ref().map(|(k, v, max)| PagedInputs {
                table_k: k,
                table_v: v,
                max_seq_len_kv: Some(*max),
            }),
            sinks: sinks.as_ref().map(|s| s as &dyn ragged_core::Tensor),
        };
        let forward = || {
            sdpa_forward_with(
                q.tensor(),
                k.tensor(),
                v.tensor(),
                o.tensor_mut(),
                lse.as_mut().map(View::tensor_mut),
                seq_len_q.as_deref(),
                seq_len_kv.as_deref(),
                &extras,
                &params,
            )
        };
        // A problem whose whole work is below INLINE_WORK runs on the caller's thread: waking a
        // pool thread and waiting for it would cost more than it saves. Otherwise the parallel
        // loops run on the engine's own pool, and only this CPU-only step.
        let result = if forward_work(p) <= INLINE_WORK {
            ragged_reference::sdpa::on_calling_thread(forward)
        } else {
            pool::install(forward)?
        };
        result.map_err(|error| name_tensor(error, p))
    }
}

/// The operands every forward binds, the 16-bit and the FP8 one alike: Q, K, V, O, the LSE
/// and the sequence lengths, as views over the call's host slices.
struct Operands<'call> {
    q: View<HostData<'call>>,
    k: View<HostData<'call>>,
    v: View<HostData<'call>>,
    o: View<HostDataMut<'call>>,
    lse: Option<View<HostDataMut<'call>>>,
    seq_len_q: Option<Arc<dyn Tensor>>,
    seq_len_kv: Option<Arc<dyn Tensor>>,
}

impl<'call> Operands<'call> {
    fn bind(call: &mut Call<'call>, p: &RaggedSdpaProblem) -> Result<Self, KernelError> {
        Ok(Operands {
            q: views::input(call, &p.q)?,
            k: views::input(call, &p.k)?,
            v: views::input(call, &p.v)?,
            o: views::output(call, &p.o)?,
            lse: p
                .stats
                .as_ref()
                .map(|s| views::output(call, s))
                .transpose()?,
            seq_len_q: p.seq_len_q.map(|s| views::index(call, s)).transpose()?,
            seq_len_kv: p.seq_len_kv.map(|s| views::index(call, s)).transpose()?,
        })
    }
}

/// The FP8 forward (fp8-attention.md §3): the scalars read like the attention scale, the
/// reference's staged scalar definition, then the amax outputs, written only once O and the LSE
/// are. It runs on the calling thread: the definition is one scalar loop, not split in tiles.
fn execute_fp8(
    p: &RaggedSdpaProblem,
    fp8: &Fp8Forward,
    attn_scale: f32,
    call: &mut Call<'_>,
) -> Result<(), KernelError> {
    let softmax = fp8
        .softmax
        .map(|s| -> Result<_, KernelError> {
            Ok(SoftmaxQuantization {
                scale_s: call.scalar(s.scale_s.plan)?,
                descale_s: call.scalar(s.descale_s.plan)?,
            })
        })
        .transpose()?;
    let attributes = Fp8Attributes {
        attn_scale,
        mask: p.mask,
        scales: Fp8Scales {
            descale_q: call.scalar(fp8.descale_q.plan)?,
            descale_k: call.scalar(fp8.descale_k.plan)?,
            descale_v: call.scalar(fp8.descale_v.plan)?,
            softmax,
        },
        scale_o: match fp8.output {
            Fp8OutputPlan::Fp8 { scale_o, .. } => Some(call.scalar(scale_o.plan)?),
            Fp8OutputPlan::Wide => None,
        },
    };
    let Operands {
        q,
        k,
        v,
        mut o,
        mut lse,
        seq_len_q,
        seq_len_kv,
    } = Operands::bind(call, p)?;
    let mut amax_s = fp8.amax_s.map(|a| call.take_output(a.uid)).transpose()?;
    let mut amax_o = fp8.amax_o.map(|a| call.take_output(a.uid)).transpose()?;
    let amaxes = sdpa_forward_fp8_tensors(
        Fp8Tensors {
            q: q.tensor(),
            k: k.tensor(),
            v: v.tensor(),
            o: o.tensor_mut(),
            lse: lse.as_mut().map(View::tensor_mut),
            seq_len_q: seq_len_q.as_deref(),
            seq_len_kv: seq_len_kv.as_deref(),
        },
        &attributes,
    )?;
    for (slot, value) in [(&mut amax_s, amaxes.amax_s), (&mut amax_o, amaxes.amax_o)] {
        match slot {
            None => {}
            Some(HostDataMut::F32([element])) => *element = value,
            Some(other) => {
                return Err(KernelError::Internal(format!(
                    "an amax output bound as {} elements of {}, not one f32",
                    other.len(),
                    other.data_type()
                )));
            }
        }
    }
    Ok(())
}

/// Multiply-adds below which the forward runs on the calling thread: about 50 µs of one core's
/// work at the reference's tile throughput, against a few µs per pool hand-off.
const INLINE_WORK: u128 = 1 << 20;

/// An upper bound of the forward's multiply-adds from the graph's dims alone (every batch at
/// S_max, every key admitted): B · H_q · S_q · S_kv · (D_qk + D_v), with `max_seq_len_kv` as
/// S_kv for paged K/V.
fn forward_work(problem: &RaggedSdpaProblem) -> u128 {
    let dim = |x: i64| u128::try_from(x).unwrap_or(u128::MAX);
    let [_, s_q, h_q, d_qk] = problem.q.bshd();
    let b = problem.batch();
    let s_kv = match &problem.paged {
        Some(paged) => paged.max_seq_len_kv,
        None => problem.k.seq_max(),
    };
    let d_v = problem.v.head_dim();
    [b, h_q, s_q, s_kv]
        .into_iter()
        .map(dim)
        .fold(dim(d_qk).saturating_add(dim(d_v)), u128::saturating_mul)
}

/// SDPA errors name a role; the backend needs the uid.
pub fn name_tensor(error: KernelError, plan: &RaggedSdpaProblem) -> KernelError {
    views::name_role(error, |role| match role {
        Role::Q => Some(plan.q.uid),
        Role::K => Some(plan.k.uid),
        Role::V => Some(plan.v.uid),
        Role::O => Some(plan.o.uid),
        Role::Lse => plan.stats.as_ref().map(|s| s.uid),
        Role::SeqLenQ => plan.seq_len_q.map(|s| s.uid),
        Role::SeqLenKv => plan.seq_len_kv.map(|s| s.uid),
        Role::PageTableK => plan.paged.map(|p| p.table_k.uid),
        Role::PageTableV => plan.paged.map(|p| p.table_v.uid),
        Role::Sinks => plan.sinks.map(|s| s.uid),
        Role::Scalar | Role::DO | Role::DQ | Role::DK | Role::DV => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragged_core::problem::test_support::problem;

    #[test]
    fn sdpa_errors_about_an_output_name_its_uid() {
        let plan = problem();
        let error = name_tensor(
            KernelError::RowsBeyondExtent {
                role: Role::O,
                batch: 0,
                extent: 1,
                rows: 2,
                source_role: Role::Q,
            },
            &plan,
        );
        assert_eq!(
            error.to_string(),
            format!(
                "tensor uid {}: O: batch 0 has sequence extent 1, below the 2 rows Q defines",
                plan.o.uid
            )
        );
    }
}

#[cfg(test)]
mod call_tests {
    use std::sync::Arc;

    use half::bf16;
    use ragged_core::binding::{Bound, Call, Signature, Stream, Workspace};
    use ragged_core::problem::test_support::packed;
    use ragged_core::tensor::RaggedLayout;
    use ragged_core::{DenseTensor, HostData, HostDataMut, Tensor};

    use super::*;

    /// K and V bound to one buffer (one uid): both views read it, each over its own layout
    /// (S_max 4, two keys: the buffer holds only what the offsets address).
    #[test]
    fn one_buffer_as_both_k_and_v_runs() {
        let mut problem = packed(1, (1, 1), (4, 1), 1);
        problem.v.uid = problem.k.uid;
        let signature = Signature::forward(&problem);
        let (q_offsets, kv_offsets) = ([0i32, 1], [0i32, 2]);
        let (q, kv) = ([bf16::ONE], [bf16::ONE, bf16::from_f32(3.0)]);
        let mut o = [bf16::ZERO];
        let index = |values: &[i32]| -> Arc<dyn Tensor> {
            let n = values.len() as i64;
            Arc::new(DenseTensor::from_vec(values.to_vec(), vec![n, 1, 1, 1], vec![1; 4]).unwrap())
        };
        let (q_aux, kv_aux) = (index(&q_offsets), index(&kv_offsets));
        let mut layouts = Vec::new();
        let mut bound = Vec::new();
        let mut out = Some(HostDataMut::BF16(&mut o));
        for declared in signature.buffers() {
            let (b, layout) = match declared.uid {
                10 => (
                    Bound::HostIndex {
                        data: HostData::I32(&q_offsets),
                        tensor: q_aux.clone(),
                    },
                    None,
                ),
                11 => (
                    Bound::HostIndex {
                        data: HostData::I32(&kv_offsets),
                        tensor: kv_aux.clone(),
                    },
                    None,
                ),
                1 => (Bound::Host(HostData::BF16(&q)), Some(q_aux.clone())),
                2 => (Bound::Host(HostData::BF16(&kv)), Some(kv_aux.clone())),
                4 => (Bound::Output(out.take()), Some(q_aux.clone())),
                other => panic!("undeclared uid {other}"),
            };
            let t = [&problem.q, &problem.k, &problem.o]
                .into_iter()
                .find(|t| t.uid == declared.uid);
            layouts.push(layout.zip(t).map(|(aux, t)| {
                RaggedLayout::new(t.dims.to_vec(), t.strides.to_vec(), t.axes().seq, aux, 1)
                    .unwrap()
            }));
            bound.push(b);
        }
        let stream = Stream::default_stream();
        let workspace = Workspace {
            ptr: None,
            bytes: 0,
        };
        let mut call = Call::new(&signature, bound, layouts, stream, workspace).unwrap();
        HostForward::new(Arc::new(problem))
            .execute(&mut call)
            .unwrap();
        // One query (1) over keys 1 and 3 at scale 0.125; the values are the keys.
        let (w1, w3) = (0.125f64.exp(), 0.375f64.exp());
        let want = (w1 + 3.0 * w3) / (w1 + w3);
        assert!(
            (f64::from(o[0].to_f32()) - want).abs() < 1e-2,
            "{} vs {want}",
            o[0]
        );
    }
}
