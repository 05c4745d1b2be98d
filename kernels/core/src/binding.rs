//! One call's buffers, bound once against what the plan reads and writes.
//!
//! An execute hands the plugin `(uid, pointer)` pairs, a stream and a workspace. The plugin's
//! binder checks them once against the problem's [`Signature`] and builds a [`Call`]: for every
//! declared buffer either a [`DevicePtr`] or a host slice of exactly the buffer's extent, the
//! validated [`RaggedLayout`] of every ragged host tensor, and the value of a runtime scale.
//!
//! The values a [`Call`] holds that carry a promise about memory ([`DevicePtr`], [`Stream`]) have
//! `unsafe` constructors, called only by the binder under the caller's promise; host slices are
//! ordinary borrows. Engines read a [`Call`] in safe code and never re-check what it holds.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::Arc;

use crate::dtype::{DataType, HostData, HostDataMut};
use crate::error::KernelError;
use crate::graph::ExecGraph;
use crate::problem::{
    BackwardProblem, IndexWidth, Multiplier, OFFSETS_ROLE, Operand, RaggedSdpaProblem, SINK_ROLE,
    ScalarType, ScalePlan,
};
use crate::tensor::{RaggedLayout, Tensor};

/// The SDPA field a scale tensor is bound through, for messages.
pub const SCALE_ROLE: &str = "scale_tensor_uid";

/// Whether the engine reads or writes a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// How a ragged tensor's extent is found: `offsets[B] × multiplier` elements, where `offsets`
/// is the uid of another declared buffer (an index, or a graph's integer tensor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaggedSpec {
    pub offsets: i64,
    pub multiplier: Multiplier,
    pub seq_axis: usize,
}

/// What one declared buffer is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A tensor over `dims` and `strides` (elements), or, when `ragged`, over the extent its
    /// offsets give.
    Tensor {
        dtype: DataType,
        dims: Vec<i64>,
        strides: Vec<i64>,
        ragged: Option<RaggedSpec>,
        access: Access,
    },
    /// `entries` int32 or int64 values the engine reads: ragged offsets (`B + 1`) or a seq_len
    /// (`B`).
    Index { width: IndexWidth, entries: usize },
    /// One scale element. `host_only`: a pass-by-value scalar, a host pointer by contract
    /// (plugin-abi.md §5.7); otherwise a tensor in any memory the engine reaches.
    Scale { dtype: ScalarType, host_only: bool },
}

/// One buffer a problem binds.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub uid: i64,
    /// The field that names it (`q_tensor_uid`, …), for messages.
    pub role: &'static str,
    pub kind: Kind,
}

impl Declared {
    /// Whether the engine writes it.
    pub fn is_output(&self) -> bool {
        matches!(
            self.kind,
            Kind::Tensor {
                access: Access::Write,
                ..
            }
        )
    }
}

/// Every buffer a problem binds, each uid once, ragged tensors after every buffer their extent
/// is read from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Signature {
    buffers: Vec<Declared>,
    /// The first uid the problem names in two roles of which one is written: such an output
    /// would overlap the other binding entirely.
    aliased_output: Option<(i64, &'static str, &'static str)>,
}

impl Signature {
    pub fn buffers(&self) -> &[Declared] {
        &self.buffers
    }

    /// A uid named in two roles, one of them written (uid, the first role, the second).
    pub fn aliased_output(&self) -> Option<(i64, &'static str, &'static str)> {
        self.aliased_output
    }

    /// Position of `uid` among [`Signature::buffers`].
    pub fn position(&self, uid: i64) -> Option<usize> {
        self.buffers.iter().position(|d| d.uid == uid)
    }

    /// Q, K, V read; O and the LSE written; their offsets, the seq_lens and a scale read.
    pub fn forward(problem: &RaggedSdpaProblem) -> Signature {
        let mut s = Signature::default();
        s.index_inputs(problem);
        for t in [&problem.q, &problem.k, &problem.v] {
            s.tensor(t, Access::Read);
        }
        for table in problem.paged.iter().flat_map(|p| p.tables()) {
            s.push(Declared {
                uid: table.uid,
                role: table.role,
                kind: Kind::Tensor {
                    dtype: DataType::I32,
                    dims: table.dims(),
                    strides: table.strides(),
                    ragged: None,
                    access: Access::Read,
                },
            });
        }
        if let Some(sinks) = &problem.sinks {
            s.push(Declared {
                uid: sinks.uid,
                role: SINK_ROLE,
                kind: Kind::Tensor {
                    dtype: DataType::F32,
                    dims: sinks.dims(),
                    strides: sinks.strides(),
                    ragged: None,
                    access: Access::Read,
                },
            });
        }
        s.tensor(&problem.o, Access::Write);
        if let Some(stats) = &problem.stats {
            s.tensor(stats, Access::Write);
        }
        for amax in problem.fp8.iter().flat_map(|f| f.amaxes()) {
            s.push(Declared {
                uid: amax.uid,
                role: amax.role,
                kind: Kind::Tensor {
                    dtype: DataType::F32,
                    dims: amax.dims(),
                    strides: amax.strides(),
                    ragged: None,
                    access: Access::Write,
                },
            });
        }
        s
    }

    /// Q, K, V, O, dO and the LSE read; dQ, dK, dV written.
    pub fn backward(problem: &BackwardProblem) -> Signature {
        let mut s = Signature::default();
        s.index_inputs(&problem.forward);
        for t in problem.outputs() {
            s.offsets(t);
        }
        for t in [&problem.d_o, &problem.lse] {
            s.offsets(t);
        }
        for t in problem.inputs() {
            s.tensor(t, Access::Read);
        }
        for t in problem.outputs() {
            s.tensor(t, Access::Write);
        }
        s
    }

    /// Every tensor the caller binds (neither virtual nor a baked constant): written when a node
    /// writes it, read otherwise; dense ones (the offset auxes among them) first.
    pub fn graph(graph: &ExecGraph) -> Signature {
        let mut s = Signature::default();
        let bound = || {
            graph
                .tensors
                .iter()
                .filter(|t| !t.is_virtual && t.value.is_none())
        };
        let dense = bound().filter(|t| t.ragged.is_none());
        for t in dense.chain(bound().filter(|t| t.ragged.is_some())) {
            let written = graph.nodes.iter().any(|n| n.op.outputs().contains(&t.uid));
            s.push(Declared {
                uid: t.uid,
                role: "graph tensor",
                kind: Kind::Tensor {
                    dtype: t.data_type,
                    dims: t.dims.clone(),
                    strides: t.strides.clone(),
                    ragged: t.ragged.map(|r| RaggedSpec {
                        offsets: r.aux_uid,
                        multiplier: r.multiplier,
                        seq_axis: t.seq_axis(),
                    }),
                    access: if written { Access::Write } else { Access::Read },
                },
            });
        }
        s
    }

    /// The offsets of every forward tensor, the seq_lens and a scale bound at execute.
    fn index_inputs(&mut self, problem: &RaggedSdpaProblem) {
        for t in problem.tensors() {
            self.offsets(t);
        }
        let batch = usize::try_from(problem.batch()).unwrap_or(0);
        for s in problem.seq_lens() {
            self.push(Declared {
                uid: s.uid,
                role: s.role,
                kind: Kind::Index {
                    width: s.width,
                    entries: batch,
                },
            });
        }
        self.scalar(SCALE_ROLE, problem.scale);
        for scalar in problem.fp8.iter().flat_map(|f| f.scalars()) {
            self.scalar(scalar.role, scalar.plan);
        }
    }

    /// A scale read at execute (nothing for a baked one).
    fn scalar(&mut self, role: &'static str, plan: ScalePlan) {
        let (uid, dtype, host_only) = match plan {
            ScalePlan::Fixed(_) => return,
            ScalePlan::RuntimeHostScalar { uid, data_type } => (uid, data_type, true),
            ScalePlan::DeviceTensor { uid, data_type } => (uid, data_type, false),
        };
        self.push(Declared {
            uid,
            role,
            kind: Kind::Scale { dtype, host_only },
        });
    }

    fn offsets(&mut self, t: &Operand) {
        if let Some(r) = t.ragged {
            let entries = usize::try_from(t.dims[0]).unwrap_or(0).saturating_add(1);
            self.push(Declared {
                uid: r.uid,
                role: OFFSETS_ROLE,
                kind: Kind::Index {
                    width: r.width,
                    entries,
                },
            });
        }
    }

    fn tensor(&mut self, t: &Operand, access: Access) {
        self.push(Declared {
            uid: t.uid,
            role: t.role,
            kind: Kind::Tensor {
                dtype: t.dtype,
                dims: t.dims.to_vec(),
                strides: t.strides.to_vec(),
                ragged: t.ragged.map(|r| RaggedSpec {
                    offsets: r.uid,
                    multiplier: r.multiplier,
                    seq_axis: t.axes().seq,
                }),
                access,
            },
        });
    }

    /// Keeps the first declaration of a uid: an offsets tensor shared by several tensors is
    /// one buffer, and so is one tensor read in two roles (K and V one buffer). A written role
    /// sharing its uid with another is recorded for the binder to refuse.
    fn push(&mut self, declared: Declared) {
        match self.position(declared.uid) {
            None => self.buffers.push(declared),
            Some(i) => {
                let first = &self.buffers[i];
                if (first.is_output() || declared.is_output()) && self.aliased_output.is_none() {
                    self.aliased_output = Some((declared.uid, first.role, declared.role));
                }
            }
        }
    }
}

/// A device address bound for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr<'call> {
    address: NonZeroU64,
    _call: PhantomData<&'call ()>,
}

impl DevicePtr<'_> {
    /// # Safety
    /// `address` is device memory of the call's stream's context, valid for the extent its
    /// declaration implies (readable for an input, writable and touched by nothing else for an
    /// output) until the stream has completed the call's work.
    pub unsafe fn new(address: NonZeroU64) -> Self {
        DevicePtr {
            address,
            _call: PhantomData,
        }
    }

    pub fn address(self) -> u64 {
        self.address.get()
    }
}

/// The stream of one call (`SetStream`'s value; NULL is the default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream<'call> {
    raw: *mut c_void,
    _call: PhantomData<&'call ()>,
}

impl Stream<'_> {
    /// # Safety
    /// `raw` is NULL or a stream that stays live for the call.
    pub unsafe fn new(raw: *mut c_void) -> Self {
        Stream {
            raw,
            _call: PhantomData,
        }
    }

    /// The default stream (NULL), which needs no promise.
    pub fn default_stream() -> Self {
        Stream {
            raw: std::ptr::null_mut(),
            _call: PhantomData,
        }
    }

    /// The handle, for the runtime layer that enqueues work on it.
    pub fn raw(self) -> *mut c_void {
        self.raw
    }
}

/// The caller's scratch for one call: `bytes` bytes at `ptr` (absent when the plan needs none or
/// the caller passed NULL; engines that need it report which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workspace<'call> {
    pub ptr: Option<DevicePtr<'call>>,
    pub bytes: usize,
}

/// One declared buffer as bound in this call.
pub enum Bound<'call> {
    /// Device memory, for an engine that hands addresses to device code.
    Device(DevicePtr<'call>),
    /// Host memory the engine reads: exactly the buffer's extent.
    Host(HostData<'call>),
    /// An index tensor (offsets, seq_len) in host memory, with an owned copy of its values that
    /// travels as a tensor (ragged layouts hold it; the reference reads seq_lens through it).
    HostIndex {
        data: HostData<'call>,
        tensor: Arc<dyn Tensor>,
    },
    /// Host memory the engine writes: exactly the buffer's extent, overlapping no other bound
    /// buffer; taken once ([`Call::take_output`]).
    Output(Option<HostDataMut<'call>>),
    /// A scale's value, read on the host.
    Scale(f64),
}

impl fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Device(ptr) => f.debug_tuple("Device").field(ptr).finish(),
            Bound::Host(data) => write!(f, "Host({} elements)", data.len()),
            Bound::HostIndex { data, .. } => write!(f, "HostIndex({} entries)", data.len()),
            Bound::Output(data) => match data {
                Some(data) => write!(f, "Output({} elements)", data.len()),
                None => f.write_str("Output(taken)"),
            },
            Bound::Scale(value) => f.debug_tuple("Scale").field(value).finish(),
        }
    }
}

/// One execute's bound buffers, in the order of the problem's [`Signature`].
#[derive(Debug)]
pub struct Call<'call> {
    signature: &'call Signature,
    bound: Vec<Bound<'call>>,
    layouts: Vec<Option<RaggedLayout>>,
    stream: Stream<'call>,
    workspace: Workspace<'call>,
}

impl<'call> Call<'call> {
    /// `bound` and `layouts` hold one entry per declared buffer (a layout for each ragged
    /// tensor bound in host memory).
    pub fn new(
        signature: &'call Signature,
        bound: Vec<Bound<'call>>,
        layouts: Vec<Option<RaggedLayout>>,
        stream: Stream<'call>,
        workspace: Workspace<'call>,
    ) -> Result<Self, KernelError> {
        let n = signature.buffers().len();
        if bound.len() != n || layouts.len() != n {
            return Err(KernelError::Internal(format!(
                "a call binds {} buffers and {} layouts for a signature of {n}",
                bound.len(),
                layouts.len()
            )));
        }
        Ok(Call {
            signature,
            bound,
            layouts,
            stream,
            workspace,
        })
    }

    /// What this call binds, in order.
    pub fn signature(&self) -> &'call Signature {
        self.signature
    }

    pub fn stream(&self) -> Stream<'call> {
        self.stream
    }

    pub fn workspace(&self) -> Workspace<'call> {
        self.workspace
    }

    fn position(&self, uid: i64) -> Result<usize, KernelError> {
        self.signature
            .position(uid)
            .ok_or(KernelError::Unbound { uid })
    }

    /// The device address of `uid`.
    pub fn device(&self, uid: i64) -> Result<DevicePtr<'call>, KernelError> {
        match self.bound[self.position(uid)?] {
            Bound::Device(ptr) => Ok(ptr),
            _ => Err(KernelError::Unbound { uid }),
        }
    }

    /// The device address of `uid`, or 0 (the launchers' "absent") for `None`.
    pub fn device_address(&self, uid: Option<i64>) -> Result<u64, KernelError> {
        uid.map_or(Ok(0), |uid| self.device(uid).map(DevicePtr::address))
    }

    /// The host elements of input `uid`.
    pub fn host(&self, uid: i64) -> Result<HostData<'call>, KernelError> {
        match &self.bound[self.position(uid)?] {
            Bound::Host(data) | Bound::HostIndex { data, .. } => Ok(*data),
            _ => Err(KernelError::Unbound { uid }),
        }
    }

    /// Index tensor `uid` (offsets, seq_len) as an owned tensor of this call's values.
    pub fn index_tensor(&self, uid: i64) -> Result<Arc<dyn Tensor>, KernelError> {
        match &self.bound[self.position(uid)?] {
            Bound::HostIndex { tensor, .. } => Ok(Arc::clone(tensor)),
            _ => Err(KernelError::Unbound { uid }),
        }
    }

    /// The host elements of output `uid`, exclusively (once per call).
    pub fn take_output(&mut self, uid: i64) -> Result<HostDataMut<'call>, KernelError> {
        let i = self.position(uid)?;
        match &mut self.bound[i] {
            Bound::Output(data) => data.take().ok_or(KernelError::Unbound { uid }),
            _ => Err(KernelError::Unbound { uid }),
        }
    }

    /// The layouts' storage, emptied, for the binder to reuse in the next call.
    pub fn into_layouts(self) -> Vec<Option<RaggedLayout>> {
        let mut layouts = self.layouts;
        layouts.iter_mut().for_each(|l| *l = None);
        layouts
    }

    /// The validated layout of ragged host tensor `uid` (moved out: once per call).
    pub fn take_layout(&mut self, uid: i64) -> Option<RaggedLayout> {
        let i = self.signature.position(uid)?;
        self.layouts[i].take()
    }

    /// The attention scale of this call: fixed in the graph, or read from its binding; a value
    /// that is not finite as the kernels' f32 is INVALID_VALUE naming uid and value.
    pub fn scale(&self, plan: ScalePlan) -> Result<f32, KernelError> {
        let value = self.scalar(plan)?;
        match plan {
            ScalePlan::RuntimeHostScalar { uid, .. } | ScalePlan::DeviceTensor { uid, .. }
                if !value.is_finite() =>
            {
                Err(KernelError::NonFiniteScale { uid, value })
            }
            _ => Ok(value),
        }
    }

    /// A scalar of this call as f32, whatever its value: an FP8 scale or descale that is NaN
    /// or infinite propagates into the outputs (fp8-attention.md §3.7) rather than failing.
    pub fn scalar(&self, plan: ScalePlan) -> Result<f32, KernelError> {
        let uid = match plan {
            ScalePlan::Fixed(value) => return Ok(value),
            ScalePlan::RuntimeHostScalar { uid, .. } | ScalePlan::DeviceTensor { uid, .. } => uid,
        };
        match self.bound[self.position(uid)?] {
            Bound::Scale(value) => Ok(value as f32),
            Bound::Device(_) => Err(KernelError::DeviceScale { uid }),
            _ => Err(KernelError::Unbound { uid }),
        }
    }
}
