//! The host's copy of the contract in `kernels/cuda-fmha/cuda/ragged_fmha_fwd.cu`: entry-point names, tile
//! shapes, the pre-pass's scratch records and error-flag bits.
//!
//! Nothing here can be checked by the compiler against the `.cu` file, so every constant names
//! its counterpart there; the device tests (`plugin/tests/gpu/`) fail if they drift apart.

use ragged_core::DataType;
use ragged_gpu_runtime::cuda::error::GpuError;

/// `sizeof(RaggedBatch)`: i64 q_tok, kv_tok, lse_elem; int lq, lkv.
pub const RAGGED_BATCH_BYTES: u64 = 32;
/// `sizeof(int2)`: one (batch, query tile) entry of the pre-pass's tile list.
pub const TILE_ENTRY_BYTES: u64 = 8;
/// `RAGGED_PREPASS_THREADS`: the pre-pass is one block of this many threads.
pub const PREPASS_THREADS: u32 = 1024;
/// Name of the pre-pass kernel.
pub const PREPASS_KERNEL: &str = "ragged_fmha_prepass";

/// `RAGGED_ERR_*` bits, per offsets tensor (shifted by the `*_SHIFT` below).
pub const ERR_FIRST_NONZERO: u32 = 1;
/// `offset[b+1] < offset[b]`.
pub const ERR_DECREASING: u32 = 2;
/// A batch's span is not a whole number of rows.
pub const ERR_PARTIAL_ROW: u32 = 4;
/// A batch's extent exceeds S_max.
pub const ERR_EXTENT: u32 = 8;
/// `stored × multiplier` overflows int64.
pub const ERR_OVERFLOW: u32 = 16;
/// Shift of the Q/O offsets' bits.
pub const ERR_Q_SHIFT: u32 = 0;
/// Shift of the K/V offsets' bits.
pub const ERR_KV_SHIFT: u32 = 8;
/// Shift of the ragged LSE offsets' bits.
pub const ERR_LSE_SHIFT: u32 = 24;
/// `seq_len_q[b]` outside `[0, extent_q(b)]`.
pub const ERR_SEQ_LEN_Q: u32 = 0x1_0000;
/// `seq_len_kv[b]` outside `[0, extent_kv(b)]`.
pub const ERR_SEQ_LEN_KV: u32 = 0x2_0000;
/// `RAGGED_ERR_DQ_ORDER`: the ordered backward waited past its limit for a dQ turn (other work
/// held the SMs a (batch, KV head)'s key tiles need at once) and took it out of order: dQ is right
/// but its last bits may differ from another call's.
pub const ERR_DQ_ORDER: u32 = 0x4000_0000;

/// Head dims with a compiled forward entry point, as (Q/K head dim, V/O head dim).
pub const HEAD_DIMS: [(i64, i64); 5] = [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)];

/// The forward entry point for `dtype`, Q/K head dim `d_qk` and V/O head dim `d_v`, if the kernel
/// file has one (`ragged_fmha_fwd_<dtype>_d<D>`, or `_d<D_qk>v<D_v>` where they differ).
pub fn forward_kernel(dtype: DataType, d_qk: i64, d_v: i64) -> Option<&'static str> {
    let index = HEAD_DIMS.iter().position(|&dims| dims == (d_qk, d_v))?;
    match dtype {
        DataType::BF16 => Some(FORWARD_KERNELS[2 * index]),
        DataType::F16 => Some(FORWARD_KERNELS[2 * index + 1]),
        _ => None,
    }
}

/// Every forward entry point, for loading their configurations up front: bf16 then f16 for each
/// entry of [`HEAD_DIMS`], in its order.
pub const FORWARD_KERNELS: [&str; 10] = [
    "ragged_fmha_fwd_bf16_d64",
    "ragged_fmha_fwd_f16_d64",
    "ragged_fmha_fwd_bf16_d96",
    "ragged_fmha_fwd_f16_d96",
    "ragged_fmha_fwd_bf16_d128",
    "ragged_fmha_fwd_f16_d128",
    "ragged_fmha_fwd_bf16_d256",
    "ragged_fmha_fwd_f16_d256",
    "ragged_fmha_fwd_bf16_d192v128",
    "ragged_fmha_fwd_f16_d192v128",
];

/// The FP8 (e4m3 Q, K, V) forward entry points (`fmha/fp8_sm90.cuh`, sm_90a modules only), as
/// (head dim, name).
pub const FP8_FORWARD_KERNELS: [(i64, &str); 3] = [
    (64, "ragged_fmha_fwd_e4m3_d64"),
    (128, "ragged_fmha_fwd_e4m3_d128"),
    (256, "ragged_fmha_fwd_e4m3_d256"),
];
/// `__constant__ int ragged_fmha_fp8[1]` (`fmha/entries.cuh`): 1 where the module has the FP8
/// entry points and their helper kernels (sm_90a), else 0.
pub const FP8_SYMBOL: &str = "ragged_fmha_fp8";
/// `ragged_fmha_fp8_vt`: V transposed into the workspace (`fmha/fp8_vt.cuh`).
pub const FP8_VT_KERNEL: &str = "ragged_fmha_fp8_vt";
/// `RAGGED_FP8_VT_THREADS`.
pub const FP8_VT_THREADS: u32 = 256;
/// Keys per transposed block of the D 64 entry point (`FmhaSm90Fp8ConfigD64`'s BN).
pub const FP8_VT_KEYS: i64 = 128;
/// Keys per transposed block of the D 128 entry point (`FmhaSm90Fp8ConfigD128`'s BN): three chunks
/// of 64 keys, each one box of the transposed V's map.
pub const FP8_VT_KEYS_D128: i64 = 192;
/// Keys per transposed block of the D 256 entry point (`FmhaSm90Fp8ConfigD256`'s BN): with blocks
/// of 128 its consumers' accumulators would not fit their registers.
pub const FP8_VT_KEYS_D256: i64 = 64;

/// Keys per transposed V block for the FP8 entry point of head dim `d`: its BN, which the
/// transposition's `keys` argument, the workspace and the transposed V's tensor map follow.
pub fn fp8_vt_keys(d: i64) -> i64 {
    match d {
        256 => FP8_VT_KEYS_D256,
        128 => FP8_VT_KEYS_D128,
        _ => FP8_VT_KEYS,
    }
}
/// `ragged_fmha_fp8_amax`: the amax partials reduced into the amax_o and amax_s outputs, one
/// block of [`FP8_AMAX_THREADS`].
pub const FP8_AMAX_KERNEL: &str = "ragged_fmha_fp8_amax";
/// Threads of [`FP8_AMAX_KERNEL`]'s block.
pub const FP8_AMAX_THREADS: u32 = 256;
/// `RAGGED_FP8_AMAX_WARPS` × `RAGGED_FP8_AMAX_BLOCKS` (`RAGGED_FP8_AMAX_S_OFFSET`): the most u32
/// partials the forward writes of each amax.
pub const FP8_AMAX_PARTIALS: u64 = 8 * 1024;
/// `f8_o_kind`: O's element type on the FP8 path (`RAGGED_FP8_O_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8OutputKind {
    /// BFLOAT16 O.
    Bf16 = 0,
    /// HALF O.
    F16 = 1,
    /// FP8_E4M3 O, scaled by `scale_o` before rounding.
    E4m3 = 2,
}

/// The smallest query tile (BM) of any configuration: a workspace sized for it at plan time,
/// before the device and hence the configuration are known, is large enough for all of them.
pub const MIN_BLOCK_M: i64 = 64;

/// The `__constant__ int NAME_config[4]` a forward entry point publishes.
pub fn config_symbol(kernel: &str) -> String {
    format!("{kernel}_config")
}

/// The `__constant__ int NAME_tma[1]` every forward entry point publishes: 1 when it takes the three
/// TMA tensor maps of Q, K and V after the common parameters (kernels/cuda-fmha/cuda/README.md), else 0.
pub fn tensor_map_symbol(kernel: &str) -> String {
    format!("{kernel}_tma")
}

/// The `__constant__ int NAME_fl[1]` every entry point with tensor maps publishes: 1 when, handed a
/// nonzero nonce, it builds the tile list itself instead of reading the pre-pass's
/// (`fmha/fused_list.cuh`; [`super::fused_list`]).
pub fn fused_list_symbol(kernel: &str) -> String {
    format!("{kernel}_fl")
}

/// `RAGGED_FL_MAX_TILES` (`fmha/fused_list.cuh`): the most tiles a forward block sorts itself.
pub const FL_MAX_TILES: i64 = 768;

/// `__constant__ int ragged_fmha_grid_dependency[1]` (`fmha/entries.cuh`): 1 when every forward
/// entry point of the module executes `griddepcontrol.wait` before its first read of the
/// pre-pass's workspace (modules compiled for sm_90 and later), so that the forward may be
/// launched with programmatic stream serialization after the pre-pass.
pub const GRID_DEPENDENCY_SYMBOL: &str = "ragged_fmha_grid_dependency";

/// `__constant__ int ragged_fmha_prepass_grid_dependency[1]` (`fmha/prepass.cuh`): 1 when the
/// module's pre-pass writes nothing before `griddepcontrol.wait` and checks every input word it
/// read before the wait against a read after it (sm_90 and later), so that the pre-pass may be
/// launched with programmatic stream serialization after whatever precedes it on the stream.
pub const PREPASS_DEPENDENCY_SYMBOL: &str = "ragged_fmha_prepass_grid_dependency";

/// Which of an execute's launches may be programmatic where the module allows it: unset (or any
/// other value) both, `forward` only the forward after its pre-pass (the pre-pass then starts in
/// plain stream order), `0` neither. For A/B measurements and for ruling the overlap out when a
/// problem is being chased. Read once per module load.
pub const PDL_ENV: &str = "RAGGED_SDPA_CUDA_PDL";

/// The launches [`PDL_ENV`] leaves programmatic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgrammaticLaunches {
    /// The forward after its pre-pass.
    pub forward: bool,
    /// The pre-pass after the stream's previous kernel (the previous execute's forward, usually).
    pub prepass: bool,
}

/// The launches the environment's [`PDL_ENV`] leaves programmatic.
pub fn programmatic_launches() -> ProgrammaticLaunches {
    pdl_setting(std::env::var_os(PDL_ENV).as_deref())
}

fn pdl_setting(value: Option<&std::ffi::OsStr>) -> ProgrammaticLaunches {
    match value.and_then(std::ffi::OsStr::to_str) {
        Some("0") => ProgrammaticLaunches {
            forward: false,
            prepass: false,
        },
        Some("forward") => ProgrammaticLaunches {
            forward: true,
            prepass: false,
        },
        _ => ProgrammaticLaunches {
            forward: true,
            prepass: true,
        },
    }
}

/// A compiled forward entry point, keyed by what selects it: element type and (D_qk, D_v). Built
/// only by [`ForwardKernel::select`] from a pair the kernel file compiles, so its name and its head
/// dims cannot disagree, and nothing recovers the dims from the name later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardKernel {
    dtype: DataType,
    d_qk: i64,
    d_v: i64,
    name: &'static str,
}

impl ForwardKernel {
    /// The entry point for `dtype` with Q/K head dim `d_qk` and V/O head dim `d_v`, if compiled.
    pub fn select(dtype: DataType, d_qk: i64, d_v: i64) -> Option<Self> {
        let name = forward_kernel(dtype, d_qk, d_v)?;
        Some(Self {
            dtype,
            d_qk,
            d_v,
            name,
        })
    }

    /// The FP8 (e4m3) entry point for head dim `d` (Q, K, V and O alike), if compiled.
    pub fn select_fp8(d: i64) -> Option<Self> {
        let &(_, name) = FP8_FORWARD_KERNELS.iter().find(|(dim, _)| *dim == d)?;
        Some(Self {
            dtype: DataType::Fp8(ragged_core::Fp8Format::E4M3),
            d_qk: d,
            d_v: d,
            name,
        })
    }

    /// Whether this is an FP8 entry point.
    pub fn is_fp8(self) -> bool {
        matches!(self.dtype, DataType::Fp8(_))
    }

    /// The entry point's symbol in the module.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Element type of Q, K, V and O.
    pub fn dtype(self) -> DataType {
        self.dtype
    }

    /// Q/K head dim.
    pub fn d_qk(self) -> i64 {
        self.d_qk
    }

    /// V/O head dim.
    pub fn d_v(self) -> i64 {
        self.d_v
    }
}

/// Tile shape and launch shape of one forward entry point, as the compiled module states it
/// (`{BM, BN, threads per block, dynamic shared memory bytes}`): the Hopper and the portable
/// paths differ, so these are read from the module, never assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    /// Query rows per block (BM).
    pub block_m: i32,
    /// Keys per main-loop step (BN).
    pub block_n: i32,
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block.
    pub shared_mem_bytes: u32,
}

impl TileConfig {
    /// Checks the raw table against what the launcher relies on.
    pub fn from_raw(kernel: &str, raw: [i32; 4]) -> Result<Self, GpuError> {
        let [block_m, block_n, threads, smem] = raw;
        let bad = |detail: String| GpuError::KernelContract {
            kernel: kernel.to_owned(),
            detail,
        };
        if block_m < i32::try_from(MIN_BLOCK_M).unwrap_or(i32::MAX) || block_m % 16 != 0 {
            return Err(bad(format!(
                "BM = {block_m} is not a multiple of 16 of at least {MIN_BLOCK_M}"
            )));
        }
        if block_n < 16 || block_n % 16 != 0 {
            return Err(bad(format!(
                "BN = {block_n} is not a positive multiple of 16"
            )));
        }
        if !(32..=1024).contains(&threads) || threads % 32 != 0 {
            return Err(bad(format!(
                "{threads} threads per block is not 32..=1024 in warps"
            )));
        }
        if smem < 0 {
            return Err(bad(format!("dynamic shared memory {smem} is negative")));
        }
        Ok(Self {
            block_m,
            block_n,
            threads: threads as u32,
            shared_mem_bytes: smem as u32,
        })
    }
}

/// The uids the device error flag can point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagUids {
    /// Q's `ragged_offset` aux (shared with O).
    pub q_offsets: i64,
    /// K's `ragged_offset` aux (shared with V).
    pub kv_offsets: i64,
    /// The ragged LSE's aux, if any.
    pub lse_offsets: Option<i64>,
    /// `seq_len_q`, if any.
    pub seq_len_q: Option<i64>,
    /// `seq_len_kv`, if any.
    pub seq_len_kv: Option<i64>,
    /// S_q_max and S_kv_max, quoted in extent errors.
    pub s_max: (i64, i64),
}

/// One sentence per rule the pre-pass found violated, each naming the tensor uid.
pub fn decode_error_flag(flag: u32, uids: &FlagUids) -> Vec<String> {
    let mut problems = Vec::new();
    let mut known = ERR_SEQ_LEN_Q | ERR_SEQ_LEN_KV;
    let groups = [
        (ERR_Q_SHIFT, "Q/O", Some(uids.q_offsets), uids.s_max.0),
        (ERR_KV_SHIFT, "K/V", Some(uids.kv_offsets), uids.s_max.1),
        (ERR_LSE_SHIFT, "LSE", uids.lse_offsets, 0),
    ];
    for (shift, what, uid, s_max) in groups {
        let bits = (flag >> shift) & 0x1f;
        known |= 0x1f << shift;
        let uid = uid.map_or_else(|| "?".to_owned(), |u| u.to_string());
        let rules = [
            (ERR_FIRST_NONZERO, "offset[0] is not 0".to_owned()),
            (ERR_DECREASING, "offsets decrease".to_owned()),
            (
                ERR_PARTIAL_ROW,
                "a batch's span is not a whole number of sequence rows".to_owned(),
            ),
            (
                ERR_EXTENT,
                format!("a batch's extent exceeds S_max = {s_max}"),
            ),
            (
                ERR_OVERFLOW,
                "offset × multiplier overflows int64".to_owned(),
            ),
        ];
        for (bit, text) in rules {
            if bits & bit != 0 {
                problems.push(format!("{what} ragged_offset (uid {uid}): {text}"));
            }
        }
    }
    for (bit, uid, name) in [
        (ERR_SEQ_LEN_Q, uids.seq_len_q, "seq_len_q"),
        (ERR_SEQ_LEN_KV, uids.seq_len_kv, "seq_len_kv"),
    ] {
        if flag & bit != 0 {
            let uid = uid.map_or_else(|| "?".to_owned(), |u| u.to_string());
            problems.push(format!(
                "{name} (uid {uid}): a length is outside [0, extent(b)] (clamped)"
            ));
        }
    }
    if flag & ERR_DQ_ORDER != 0 {
        known |= ERR_DQ_ORDER;
        problems.push(
            "the deterministic backward waited over 0.2 s for a block of dQ's turn (other work \
             held the GPU's SMs) and added it out of order: dQ is correct but not bitwise \
             reproducible this call"
                .to_owned(),
        );
    }
    if flag & !known != 0 {
        problems.push(format!("unknown error bits {:#x}", flag & !known));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pdl_setting_picks_the_programmatic_launches() {
        use std::ffi::OsStr;
        let both = ProgrammaticLaunches {
            forward: true,
            prepass: true,
        };
        assert_eq!(pdl_setting(None), both);
        assert_eq!(pdl_setting(Some(OsStr::new(""))), both);
        assert_eq!(pdl_setting(Some(OsStr::new("1"))), both);
        assert_eq!(
            pdl_setting(Some(OsStr::new("forward"))),
            ProgrammaticLaunches {
                forward: true,
                prepass: false,
            }
        );
        assert_eq!(
            pdl_setting(Some(OsStr::new("0"))),
            ProgrammaticLaunches {
                forward: false,
                prepass: false,
            }
        );
    }

    const UIDS: FlagUids = FlagUids {
        q_offsets: 10,
        kv_offsets: 11,
        lse_offsets: None,
        seq_len_q: Some(20),
        seq_len_kv: None,
        s_max: (128, 256),
    };

    #[test]
    fn a_selected_kernel_keeps_its_key() {
        for dims in HEAD_DIMS {
            for dtype in [DataType::BF16, DataType::F16] {
                let kernel = ForwardKernel::select(dtype, dims.0, dims.1).expect("compiled dims");
                assert_eq!((kernel.d_qk(), kernel.d_v()), dims, "{}", kernel.name());
                assert_eq!(kernel.dtype(), dtype);
                assert_eq!(Some(kernel.name()), forward_kernel(dtype, dims.0, dims.1));
            }
        }
        let d192 = ForwardKernel::select(DataType::F16, 192, 128).map(ForwardKernel::name);
        assert_eq!(d192, Some("ragged_fmha_fwd_f16_d192v128"));
        assert_eq!(ForwardKernel::select(DataType::F32, 64, 64), None);
        assert_eq!(ForwardKernel::select(DataType::BF16, 192, 192), None);
        assert_eq!(
            tensor_map_symbol("ragged_fmha_fwd_bf16_d128"),
            "ragged_fmha_fwd_bf16_d128_tma"
        );
    }

    #[test]
    fn a_clean_flag_has_no_problems() {
        assert!(decode_error_flag(0, &UIDS).is_empty());
    }

    #[test]
    fn each_bit_names_its_tensor() {
        assert_eq!(
            decode_error_flag(ERR_DECREASING << ERR_Q_SHIFT, &UIDS),
            ["Q/O ragged_offset (uid 10): offsets decrease"]
        );
        assert_eq!(
            decode_error_flag(ERR_EXTENT << ERR_KV_SHIFT, &UIDS),
            ["K/V ragged_offset (uid 11): a batch's extent exceeds S_max = 256"]
        );
        assert_eq!(
            decode_error_flag(ERR_SEQ_LEN_Q, &UIDS),
            ["seq_len_q (uid 20): a length is outside [0, extent(b)] (clamped)"]
        );
        let both = decode_error_flag(
            (ERR_FIRST_NONZERO << ERR_Q_SHIFT) | (ERR_OVERFLOW << ERR_LSE_SHIFT),
            &UIDS,
        );
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(both[1].starts_with("LSE ragged_offset (uid ?)"), "{both:?}");
    }

    #[test]
    fn unknown_bits_are_reported() {
        let problems = decode_error_flag(0x8000_0000, &UIDS);
        assert_eq!(problems, ["unknown error bits 0x80000000"]);
    }

    #[test]
    fn kernel_names_follow_dtype_and_head_dim() {
        assert_eq!(
            forward_kernel(DataType::BF16, 128, 128),
            Some("ragged_fmha_fwd_bf16_d128")
        );
        assert_eq!(
            forward_kernel(DataType::F16, 64, 64),
            Some("ragged_fmha_fwd_f16_d64")
        );
        assert_eq!(
            forward_kernel(DataType::F16, 96, 96),
            Some("ragged_fmha_fwd_f16_d96")
        );
        assert_eq!(
            forward_kernel(DataType::BF16, 256, 256),
            Some("ragged_fmha_fwd_bf16_d256")
        );
        assert_eq!(
            forward_kernel(DataType::BF16, 192, 128),
            Some("ragged_fmha_fwd_bf16_d192v128")
        );
        assert_eq!(forward_kernel(DataType::F32, 64, 64), None);
        assert_eq!(forward_kernel(DataType::F16, 80, 80), None);
        assert_eq!(forward_kernel(DataType::F16, 128, 192), None);
        // Every listed name follows the pattern its dims give.
        for (index, (d_qk, d_v)) in HEAD_DIMS.iter().enumerate() {
            let dims = if d_qk == d_v {
                format!("d{d_qk}")
            } else {
                format!("d{d_qk}v{d_v}")
            };
            assert_eq!(
                FORWARD_KERNELS[2 * index],
                format!("ragged_fmha_fwd_bf16_{dims}")
            );
            assert_eq!(
                FORWARD_KERNELS[2 * index + 1],
                format!("ragged_fmha_fwd_f16_{dims}")
            );
        }
        assert_eq!(config_symbol("k"), "k_config");
    }

    #[test]
    fn published_configs_are_checked() {
        // The sm_90a d128 values from kernels/cuda-fmha/cuda/README.md.
        let ok = TileConfig::from_raw("k", [192, 64, 384, 115_712]).unwrap();
        assert_eq!(
            (ok.block_m, ok.block_n, ok.threads, ok.shared_mem_bytes),
            (192, 64, 384, 115_712)
        );
        for (raw, what) in [
            ([32, 64, 128, 0], "BM = 32"),
            ([100, 64, 128, 0], "BM = 100"),
            ([128, 8, 128, 0], "BN = 8"),
            ([128, 64, 100, 0], "100 threads"),
            ([128, 64, 2048, 0], "2048 threads"),
            ([128, 64, 128, -1], "negative"),
        ] {
            let err = TileConfig::from_raw("k", raw).unwrap_err().to_string();
            assert!(err.contains(what) && err.contains("k"), "{raw:?}: {err}");
        }
    }
}
