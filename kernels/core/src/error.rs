//! The crate's single error type.
//!
//! Tensor constructors do not know which graph tensor they wrap, so their variants name the field
//! and value; callers that do know the uid attach it with [`KernelError::for_tensor`]. SDPA
//! variants name the tensor's role in the operation, which the plugin maps back to a uid.

use std::fmt;

use crate::dtype::DataType;

/// A backward feature the graph asks for and the CPU reference does not compute. It lives with
/// the error type that carries it, so the error module depends on no algorithm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BackwardFeature {
    /// Dropout with this probability (any value above 0, or NaN).
    Dropout {
        /// The requested probability.
        probability: f32,
    },
    /// An additive attention bias (`attn_mask_tensor_uid`).
    AttnBias,
    /// ALiBi positional bias.
    Alibi,
    /// The bias gradient output.
    DBias,
    /// FP8 operands, which the tensor SDK cannot hold.
    Fp8,
}

impl fmt::Display for BackwardFeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackwardFeature::Dropout { probability } => {
                write!(f, "dropout (probability {probability})")
            }
            BackwardFeature::AttnBias => f.write_str("an additive attention bias"),
            BackwardFeature::Alibi => f.write_str("an ALiBi mask"),
            BackwardFeature::DBias => f.write_str("the bias gradient dBias"),
            BackwardFeature::Fp8 => f.write_str("FP8 operands"),
        }
    }
}

/// The role a tensor plays in the SDPA forward operation; used to say which input is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Queries.
    Q,
    /// Keys.
    K,
    /// Values.
    V,
    /// Attention output.
    O,
    /// Log-sum-exp statistics output.
    Lse,
    /// Per-batch valid query lengths.
    SeqLenQ,
    /// Per-batch valid key/value lengths.
    SeqLenKv,
    /// A scalar tensor such as the attention scale.
    Scalar,
    /// Backward: the gradient flowing into O.
    DO,
    /// Backward: the gradient of Q.
    DQ,
    /// Backward: the gradient of K.
    DK,
    /// Backward: the gradient of V.
    DV,
    /// K's page table (paged K/V).
    PageTableK,
    /// V's page table (paged K/V).
    PageTableV,
    /// Per-head sink logits.
    Sinks,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Q => "Q",
            Role::K => "K",
            Role::V => "V",
            Role::O => "O",
            Role::Lse => "LSE",
            Role::SeqLenQ => "seq_len_q",
            Role::SeqLenKv => "seq_len_kv",
            Role::Scalar => "scalar",
            Role::DO => "dO",
            Role::DQ => "dQ",
            Role::DK => "dK",
            Role::DV => "dV",
            Role::PageTableK => "page_table_k",
            Role::PageTableV => "page_table_v",
            Role::Sinks => "sink_token",
        })
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum KernelError {
    /// Context wrapper added by callers that know the graph uid of the offending tensor.
    #[error("tensor uid {uid}: {source}")]
    InTensor {
        /// Graph uid of the tensor.
        uid: i64,
        /// What was wrong with it.
        #[source]
        source: Box<KernelError>,
    },

    // ---- geometry of any tensor -------------------------------------------------------------
    /// `dims` and `strides` have different lengths.
    #[error("dims has {dims} entries but strides has {strides}")]
    StridesRankMismatch {
        /// Number of dims.
        dims: usize,
        /// Number of strides.
        strides: usize,
    },
    /// A dimension is negative.
    #[error("dims[{axis}] = {value} is negative")]
    NegativeDim {
        /// Axis index.
        axis: usize,
        /// Offending value.
        value: i64,
    },
    /// A stride is negative (the SDK addresses forward from the base pointer only).
    #[error("strides[{axis}] = {value} is negative")]
    NegativeStride {
        /// Axis index.
        axis: usize,
        /// Offending value.
        value: i64,
    },
    /// An element count or offset does not fit in 64-bit arithmetic.
    #[error("{what} overflows 64-bit arithmetic")]
    Overflow {
        /// The quantity being computed.
        what: &'static str,
    },
    /// The buffer holds fewer elements than the geometry addresses.
    #[error("buffer holds {available} elements but the tensor addresses {required}")]
    BufferTooSmall {
        /// Elements the geometry needs.
        required: usize,
        /// Elements in the buffer.
        available: usize,
    },
    /// A borrowed byte length is not a whole number of elements.
    #[error("byte length {byte_len} is not a multiple of the {dtype} element size {size}")]
    ByteLengthNotWhole {
        /// Borrowed byte length.
        byte_len: usize,
        /// Element type.
        dtype: DataType,
        /// Element size in bytes.
        size: usize,
    },
    /// A borrowed buffer would span more bytes than one allocation may (`isize::MAX`).
    #[error("a buffer of {byte_len} bytes exceeds the isize::MAX bytes one allocation may span")]
    ExtentAboveIsizeMax {
        /// Requested byte length.
        byte_len: usize,
    },
    /// A borrowed pointer is null although the byte length is non-zero.
    #[error("null data pointer for a buffer of {byte_len} bytes")]
    NullPointer {
        /// Borrowed byte length.
        byte_len: usize,
    },
    /// A borrowed pointer is not aligned for its element type.
    #[error("data pointer {address:#x} is not aligned to {align} bytes for {dtype}")]
    Misaligned {
        /// Pointer value.
        address: usize,
        /// Required alignment.
        align: usize,
        /// Element type.
        dtype: DataType,
    },

    // ---- typed access -----------------------------------------------------------------------
    /// A multi-index has the wrong number of components.
    #[error("index has {got} components but the tensor has rank {rank}")]
    IndexArity {
        /// Components supplied.
        got: usize,
        /// Tensor rank.
        rank: usize,
    },
    /// A multi-index component is outside its axis.
    #[error("index[{axis}] = {index} is outside 0..{extent}")]
    IndexOutOfBounds {
        /// Axis index.
        axis: usize,
        /// Offending component.
        index: i64,
        /// Axis extent.
        extent: i64,
    },
    /// A ragged access lies beyond the sequence extent of its batch.
    #[error("sequence index {index} is outside batch {batch}'s extent 0..{extent}")]
    SeqIndexOutOfBounds {
        /// Batch index.
        batch: usize,
        /// Offending sequence index.
        index: i64,
        /// The batch's sequence extent.
        extent: i64,
    },
    /// Typed access with a type that is not the tensor's element type.
    #[error("tensor holds {actual} but was accessed as {requested}")]
    TypeMismatch {
        /// Element type asked for.
        requested: DataType,
        /// Element type stored.
        actual: DataType,
    },

    // ---- ragged layout: structural pass (RFC §4.5 item 5) -----------------------------------
    /// Ragged tensors need at least the batch dimension.
    #[error("ragged tensor dims are empty")]
    RaggedDimsEmpty,
    /// The caller-provided sequence axis is not a non-batch axis of the tensor.
    #[error("sequence axis {seq_axis} is not in 1..{rank}")]
    SeqAxisOutOfRange {
        /// Requested axis.
        seq_axis: usize,
        /// Tensor rank.
        rank: usize,
    },
    /// The ragged_offset aux does not hold B + 1 elements.
    #[error("ragged_offset has {actual} elements, expected B + 1 = {expected}")]
    AuxElementCount {
        /// B + 1.
        expected: usize,
        /// Elements in the aux.
        actual: usize,
    },
    /// The ragged_offset aux is not rank 4.
    #[error("ragged_offset has rank {rank}, expected 4")]
    AuxRank {
        /// Rank of the aux.
        rank: usize,
    },
    /// The ragged_offset aux element type is not int32 or int64.
    #[error("ragged_offset element type {dtype} ({size} bytes) is not int32 or int64")]
    AuxElementType {
        /// Element type of the aux.
        dtype: DataType,
        /// Its size in bytes.
        size: usize,
    },
    /// The ragged_offset aux is not packed, so element b is not at linear position b.
    #[error("ragged_offset is not packed (dims {dims:?}, strides {strides:?})")]
    AuxNotPacked {
        /// Aux dims.
        dims: Vec<i64>,
        /// Aux strides.
        strides: Vec<i64>,
    },
    /// ragged_offset_multiplier is below 1.
    #[error("ragged_offset_multiplier = {multiplier} is below 1")]
    MultiplierNotPositive {
        /// Offending multiplier.
        multiplier: i64,
    },

    // ---- ragged layout: content pass (RFC §4.5 item 5) --------------------------------------
    /// stored offset × multiplier overflows int64.
    #[error("ragged_offset[{batch}] = {stored} times multiplier {multiplier} overflows int64")]
    OffsetOverflow {
        /// Offset index.
        batch: usize,
        /// Stored value.
        stored: i64,
        /// Multiplier.
        multiplier: i64,
    },
    /// `ragged_offset[0]` is not zero.
    #[error("ragged_offset[0] = {value} (in elements), expected 0")]
    FirstOffsetNotZero {
        /// Offending value.
        value: i64,
    },
    /// Offsets decrease between batch b and b + 1.
    #[error("ragged_offset[{next_batch}] = {next} is below ragged_offset[{batch}] = {value}")]
    OffsetsDecrease {
        /// Batch index b.
        batch: usize,
        /// Offset of b, in elements.
        value: i64,
        /// b + 1.
        next_batch: usize,
        /// Offset of b + 1, in elements.
        next: i64,
    },
    /// The stride of the sequence axis is zero or negative.
    #[error("sequence stride strides[{seq_axis}] = {stride} is not positive")]
    SeqStrideNotPositive {
        /// Sequence axis.
        seq_axis: usize,
        /// Offending stride.
        stride: i64,
    },
    /// A batch's block is not a whole number of sequence rows.
    #[error(
        "batch {batch} spans {elements} elements (stored offsets × ragged_offset_multiplier \
         {multiplier}), not a multiple of the sequence stride {seq_stride}: the offsets do not \
         make whole tokens"
    )]
    PartialRow {
        /// Batch index.
        batch: usize,
        /// Elements in its block.
        elements: i64,
        /// The multiplier the stored offsets were scaled by.
        multiplier: i64,
        /// Sequence stride.
        seq_stride: i64,
    },
    /// A batch holds more rows than the padded dimension S_max.
    #[error("batch {batch} has sequence extent {extent}, above S_max = {s_max}")]
    ExtentAboveMax {
        /// Batch index.
        batch: usize,
        /// Its extent in rows.
        extent: i64,
        /// `dims[seq_axis]`.
        s_max: i64,
    },
    /// The offsets address more elements than the buffer holds.
    #[error("ragged_offset[B] = {total} elements exceeds the buffer's {buffer_len} elements")]
    OffsetsBeyondBuffer {
        /// `ragged_offset[B]` in elements.
        total: i64,
        /// Buffer length in elements.
        buffer_len: usize,
    },

    // ---- SDPA forward -----------------------------------------------------------------------
    /// An SDPA tensor is not rank 4.
    #[error("{role}: rank {rank}, expected 4")]
    SdpaRank {
        /// Tensor role.
        role: Role,
        /// Its rank.
        rank: usize,
    },
    /// An SDPA tensor has an element type the operation does not accept.
    #[error("{role}: element type {dtype}, expected {expected}")]
    SdpaDataType {
        /// Tensor role.
        role: Role,
        /// Its element type.
        dtype: DataType,
        /// What is accepted.
        expected: String,
    },
    /// A dimension disagrees with the same dimension of another tensor or is out of range.
    #[error("{role}: {field} = {value}, expected {expected}")]
    SdpaDim {
        /// Tensor role.
        role: Role,
        /// Which dimension (batch, heads, head_dim, ...).
        field: &'static str,
        /// Its value.
        value: i64,
        /// What it must be.
        expected: String,
    },
    /// A ragged SDPA tensor's sequence axis is neither middle axis.
    #[error(
        "{role}: ragged sequence axis {seq_axis}, expected 1 ([B, S, H, D] dims) or 2 \
         ([B, H, S, D] dims)"
    )]
    SdpaSeqAxis {
        /// Tensor role.
        role: Role,
        /// Its sequence axis.
        seq_axis: usize,
    },
    /// The rows of a ragged batch spill out of the batch's offset range.
    #[error(
        "{role}: batch {batch} rows end at element {end}, beyond ragged_offset[{next_batch}] = {limit}"
    )]
    RowsOutsideBatch {
        /// Tensor role.
        role: Role,
        /// Batch index.
        batch: usize,
        /// One past the last element its rows address.
        end: i64,
        /// b + 1.
        next_batch: usize,
        /// The next batch's start offset.
        limit: i64,
    },
    /// An index inside every dim still lands outside its batch's offset range, because the
    /// non-sequence strides reach past the sequence stride.
    #[error(
        "index {index:?} of batch {batch} addresses element {position}, outside \
         ragged_offset[{batch}]..ragged_offset[{next_batch}] = {start}..{limit}"
    )]
    ElementOutsideBatch {
        /// The multi-index.
        index: Vec<i64>,
        /// Batch index.
        batch: usize,
        /// The element it addresses.
        position: i64,
        /// The batch's start offset in elements.
        start: i64,
        /// b + 1.
        next_batch: usize,
        /// The next batch's start offset.
        limit: i64,
    },
    /// The f32 staging copy of an operand's logical rows cannot be allocated: its size follows
    /// the dims, which broadcast (zero) strides free from the buffer's size.
    #[error(
        "{role}: staging its logical rows needs {elements} f32 elements, which cannot be allocated"
    )]
    StagingTooLarge {
        /// Tensor role.
        role: Role,
        /// Elements the staging buffer needs.
        elements: String,
    },
    /// Two tensors that must have equal per-batch sequence extents differ.
    #[error("{role}: batch {batch} has sequence extent {extent} but {other} has {other_extent}")]
    ExtentMismatch {
        /// Tensor role.
        role: Role,
        /// Batch index.
        batch: usize,
        /// Its extent.
        extent: i64,
        /// The tensor it must match.
        other: Role,
        /// That tensor's extent.
        other_extent: i64,
    },
    /// An output has fewer rows in a batch than the batch's logical length needs.
    #[error(
        "{role}: batch {batch} has sequence extent {extent}, below the {rows} rows {source_role} defines"
    )]
    RowsBeyondExtent {
        /// Tensor role.
        role: Role,
        /// Batch index.
        batch: usize,
        /// Its extent.
        extent: i64,
        /// Rows the operation addresses.
        rows: i64,
        /// Where that row count comes from.
        source_role: Role,
    },
    /// A page table entry a sequence reads names no page of the pool (paged-kv-and-sinks.md
    /// §5.2): refused before any pool element is read.
    #[error("{role}[{batch}][{entry}] = {value} is not a page of the pool (page ids 0..{pages})")]
    PageIdOutOfRange {
        /// page_table_k or page_table_v.
        role: Role,
        /// Sequence index.
        batch: usize,
        /// Column of the table.
        entry: usize,
        /// The page id read.
        value: i64,
        /// Pages in the pool.
        pages: i64,
    },
    /// A sequence is longer than its page table reaches, or than `max_seq_len_kv`.
    #[error(
        "{role}[{batch}] = {value} is above the {max} keys a paged sequence may hold \
         ({why})"
    )]
    PagedLengthAboveMax {
        /// seq_len_kv.
        role: Role,
        /// Sequence index.
        batch: usize,
        /// The length.
        value: i64,
        /// max_seq_len_kv, or the table capacity.
        max: i64,
        /// Which bound.
        why: String,
    },
    /// Packed queries: the sequences' lengths add up to more rows than Q holds.
    #[error(
        "{role}: the lengths add up to {rows} rows through sequence {batch}, above the {extent} \
         rows of the packed tensor"
    )]
    PackedRowsBeyondExtent {
        /// seq_len_q.
        role: Role,
        /// The first sequence whose rows end past the tensor.
        batch: usize,
        /// Rows through that sequence.
        rows: i64,
        /// Rows the packed tensor has.
        extent: i64,
    },
    /// A seq_lens entry is negative or beyond its batch's extent.
    #[error("{role}[{batch}] = {value} is outside 0..={extent}")]
    SeqLenOutOfRange {
        /// seq_len_q or seq_len_kv.
        role: Role,
        /// Batch index.
        batch: usize,
        /// Offending value.
        value: i64,
        /// The batch's extent.
        extent: i64,
    },
    /// A scalar tensor does not hold exactly one element.
    #[error("{role}: {count} elements, expected a scalar (1 element)")]
    NotScalar {
        /// Tensor role.
        role: Role,
        /// Element count.
        count: usize,
    },

    // ---- SDPA backward ----------------------------------------------------------------------
    /// The graph asks for a backward feature the CPU reference does not implement.
    #[error("SDPA backward: {feature} is not supported")]
    BackwardUnsupported {
        /// What was asked for.
        feature: BackwardFeature,
    },
    /// A ragged backward operand's sequence axis is neither of the two upstream forms.
    #[error(
        "{role}: ragged sequence axis {seq_axis}, expected 1 ([B, S, H, D] dims) or 2 ([B, H, S, D] dims)"
    )]
    BackwardSeqAxis {
        /// Tensor role.
        role: Role,
        /// Its sequence axis.
        seq_axis: usize,
    },

    // ---- one call's bindings ----------------------------------------------------------------
    /// An engine asked a call for a buffer its problem does not declare in that form: a bug of
    /// the engine or the binder, never of the caller.
    #[error("tensor uid {uid} is not bound in this call in the form the engine reads it")]
    Unbound {
        /// The uid asked for.
        uid: i64,
    },
    /// A scale read at execute is NaN or infinite (as the kernels' f32).
    #[error(
        "invalid value: scale_tensor_uid tensor uid {uid} holds the scale {value} at execute; a \
         finite scale is required"
    )]
    NonFiniteScale {
        /// The scale tensor's uid.
        uid: i64,
        /// Its value.
        value: f32,
    },
    /// A device-resident scale reached a GPU engine, which declines one at planning.
    #[error(
        "scale_tensor_uid tensor uid {uid} is a device-resident scale, which GPU engines decline \
         at planning; it reached execute"
    )]
    DeviceScale {
        /// The scale tensor's uid.
        uid: i64,
    },
    /// A GPU engine's own failure, with what it means for the caller.
    #[error("{0}")]
    Engine(EngineFailure),
    /// A state the plan should have made impossible.
    #[error("internal error: {0}")]
    Internal(String),

    // ---- graphs -----------------------------------------------------------------------------
    /// A pointwise mode outside the set the CPU executor runs.
    #[error("pointwise mode {mode} is not supported by the CPU executor")]
    UnsupportedPointwiseMode {
        /// Upstream's mode name.
        mode: String,
    },
}

/// What a failure means for the caller, which the plugin turns into its status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The values in the caller's buffers (offsets, seq_lens, a scale): INVALID_VALUE.
    CallerValues,
    /// The caller's arguments (a pointer, a workspace): BAD_PARAM.
    CallerArguments,
    /// The host could not allocate what the problem needs: ALLOC_FAILED.
    OutOfMemory,
    /// Ours: a runtime, compiler or engine failure: INTERNAL_ERROR.
    Internal,
}

/// An engine's error with its [`Fault`]; the source keeps its own type for whoever inspects it.
#[derive(Debug, Clone)]
pub struct EngineFailure {
    /// The engine's name, which prefixes the message.
    pub engine: &'static str,
    pub fault: Fault,
    pub source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for EngineFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.engine, self.source)
    }
}

impl PartialEq for EngineFailure {
    fn eq(&self, other: &Self) -> bool {
        self.engine == other.engine
            && self.fault == other.fault
            && self.source.to_string() == other.source.to_string()
    }
}

impl KernelError {
    /// An engine's own error.
    pub fn engine(
        engine: &'static str,
        fault: Fault,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        KernelError::Engine(EngineFailure {
            engine,
            fault,
            source: std::sync::Arc::new(source),
        })
    }

    /// Whose fault this is: bad offset or seq_len contents and non-finite scales are the
    /// caller's values; unusable pointers its arguments; a staging copy too large for the host
    /// is out of memory; anything else means the plan let through what the kernel cannot run,
    /// which is ours.
    pub fn fault(&self) -> Fault {
        use KernelError as K;
        match self {
            K::InTensor { source, .. } => source.fault(),
            K::Engine(failure) => failure.fault,
            K::OffsetOverflow { .. }
            | K::FirstOffsetNotZero { .. }
            | K::OffsetsDecrease { .. }
            | K::PartialRow { .. }
            | K::ExtentAboveMax { .. }
            | K::OffsetsBeyondBuffer { .. }
            | K::RowsOutsideBatch { .. }
            | K::RowsBeyondExtent { .. }
            | K::ExtentMismatch { .. }
            | K::SeqLenOutOfRange { .. }
            | K::PageIdOutOfRange { .. }
            | K::PagedLengthAboveMax { .. }
            | K::PackedRowsBeyondExtent { .. }
            | K::NonFiniteScale { .. }
            // A buffer beyond isize::MAX bytes is the caller's geometry (planning declines it
            // first).
            | K::ExtentAboveIsizeMax { .. } => Fault::CallerValues,
            K::NullPointer { .. } | K::Misaligned { .. } | K::ByteLengthNotWhole { .. } => {
                Fault::CallerArguments
            }
            K::StagingTooLarge { .. } => Fault::OutOfMemory,
            _ => Fault::Internal,
        }
    }

    /// Attaches the graph uid of the tensor the error is about.
    #[must_use]
    pub fn for_tensor(self, uid: i64) -> Self {
        KernelError::InTensor {
            uid,
            source: Box::new(self),
        }
    }
}
