//! The host's copy of the contract in `kernels/cuda-fmha/cuda/ragged_fmha_bwd.cu`: entry-point names and
//! the checks on the tile table each one publishes (`NAME_config`). The pre-pass and its records
//! are the forward's ([`crate::forward::device_abi`]).

use super::fused_abi::{FUSED_ALL, FUSED_BLOCK_M, FUSED_BLOCK_N, FUSED_THREADS, FUSED_WS_THREADS};
use crate::forward::device_abi::TileConfig;
use ragged_core::DataType;
use ragged_gpu_runtime::cuda::error::GpuError;

/// Head dims with compiled backward kernels, as (Q/K head dim, V/O head dim): the forward's
/// ([`crate::forward::device_abi::HEAD_DIMS`]). The mma.sync kernels of every entry run on every
/// target; the first [`HOPPER_HEAD_DIMS`] entries also have wgmma and fused kernels on
/// [`HOPPER_ARCH`].
pub const HEAD_DIMS: [(i64, i64); 5] = [(64, 64), (128, 128), (96, 96), (256, 256), (192, 128)];

/// How many leading entries of [`HEAD_DIMS`] (D 64 and 128) have the sm_90a kernels of
/// [`HOPPER_ALL`], [`HOPPER_TMA_ALL`] and the fused ones; the sets after them run their mma.sync
/// kernels on sm_90a too.
pub const HOPPER_HEAD_DIMS: usize = 2;

/// `RAGGED_BWD_DOT_ROWS`: query rows per block of the Di pass.
pub const DOT_ROWS: i32 = 64;
/// `RAGGED_BWD_DOT_THREADS`.
pub const DOT_THREADS: u32 = 256;

/// The dQ kernel's BM is also the pre-pass's tile size; every compiled dQ kernel has at least
/// this many rows per tile, so a tile list sized for it at plan time holds any of them.
pub const MIN_DQ_BLOCK_M: i64 = 64;

/// The three entry points of one (data type, head dims).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardKernels {
    /// `ragged_fmha_bwd_dot_<dt>_d<D>` (`_d<D_qk>v<D_v>` where the head dims differ, as for
    /// the other two).
    pub dot: &'static str,
    /// `ragged_fmha_bwd_dkdv_<dt>_d<D>`.
    pub dkdv: &'static str,
    /// `ragged_fmha_bwd_dq_<dt>_d<D>`.
    pub dq: &'static str,
}

/// Every compiled set: bf16 then f16 for each entry of [`HEAD_DIMS`], in its order.
pub const ALL: [BackwardKernels; 10] = [
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_bf16_d64",
        dkdv: "ragged_fmha_bwd_dkdv_bf16_d64",
        dq: "ragged_fmha_bwd_dq_bf16_d64",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_f16_d64",
        dkdv: "ragged_fmha_bwd_dkdv_f16_d64",
        dq: "ragged_fmha_bwd_dq_f16_d64",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_bf16_d128",
        dkdv: "ragged_fmha_bwd_dkdv_bf16_d128",
        dq: "ragged_fmha_bwd_dq_bf16_d128",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_f16_d128",
        dkdv: "ragged_fmha_bwd_dkdv_f16_d128",
        dq: "ragged_fmha_bwd_dq_f16_d128",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_bf16_d96",
        dkdv: "ragged_fmha_bwd_dkdv_bf16_d96",
        dq: "ragged_fmha_bwd_dq_bf16_d96",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_f16_d96",
        dkdv: "ragged_fmha_bwd_dkdv_f16_d96",
        dq: "ragged_fmha_bwd_dq_f16_d96",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_bf16_d256",
        dkdv: "ragged_fmha_bwd_dkdv_bf16_d256",
        dq: "ragged_fmha_bwd_dq_bf16_d256",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_f16_d256",
        dkdv: "ragged_fmha_bwd_dkdv_f16_d256",
        dq: "ragged_fmha_bwd_dq_f16_d256",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_bf16_d192v128",
        dkdv: "ragged_fmha_bwd_dkdv_bf16_d192v128",
        dq: "ragged_fmha_bwd_dq_bf16_d192v128",
    },
    BackwardKernels {
        dot: "ragged_fmha_bwd_dot_f16_d192v128",
        dkdv: "ragged_fmha_bwd_dkdv_f16_d192v128",
        dq: "ragged_fmha_bwd_dq_f16_d192v128",
    },
];

/// The kernels for `dtype`, Q/K head dim `d_qk` and V/O head dim `d_v`, if compiled.
pub fn kernels(dtype: DataType, d_qk: i64, d_v: i64) -> Option<BackwardKernels> {
    let index = HEAD_DIMS.iter().position(|&dims| dims == (d_qk, d_v))?;
    match dtype {
        DataType::BF16 => Some(ALL[2 * index]),
        DataType::F16 => Some(ALL[2 * index + 1]),
        _ => None,
    }
}

/// The NVRTC target on which the Hopper wgmma entry points exist: they are compiled only under
/// `__CUDA_ARCH_FEAT_SM90_ALL` (`kernels/cuda-fmha/cuda/fmha_bwd/entries.cuh`), so a PTX target or any
/// other architecture has the mma.sync kernels of [`ALL`] alone.
pub const HOPPER_ARCH: &str = "sm_90a";

/// The wgmma dK/dV and dQ kernels of one set (`fmha_bwd/dkdv_wg.cuh`, `fmha_bwd/dq_wg.cuh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopperKernels {
    /// `ragged_fmha_bwd_dkdv_wg_<dt>_d<D>`.
    pub dkdv: &'static str,
    /// `ragged_fmha_bwd_dq_wg_<dt>_d<D>`.
    pub dq: &'static str,
}

/// Per set of [`ALL`] at the first [`HOPPER_HEAD_DIMS`] head dims, in its order: the wgmma kernels
/// compiled for [`HOPPER_ARCH`].
pub const HOPPER_ALL: [HopperKernels; 2 * HOPPER_HEAD_DIMS] = [
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_wg_bf16_d64",
        dq: "ragged_fmha_bwd_dq_wg_bf16_d64",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_wg_f16_d64",
        dq: "ragged_fmha_bwd_dq_wg_f16_d64",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_wg_bf16_d128",
        dq: "ragged_fmha_bwd_dq_wg_bf16_d128",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_wg_f16_d128",
        dq: "ragged_fmha_bwd_dq_wg_f16_d128",
    },
];

/// Per set of [`ALL`] at the first [`HOPPER_HEAD_DIMS`] head dims, in its order: the wgmma kernels
/// with the TMA / mbarrier fill
/// (`NBUF_TMA` in `fmha_bwd/dkdv_wg.cuh`, `fmha_bwd/dq_wg.cuh`). They publish `NAME_tma = {1}` and
/// take two tensor maps after the common parameters ([`takes_tensor_maps`]).
pub const HOPPER_TMA_ALL: [HopperKernels; 2 * HOPPER_HEAD_DIMS] = [
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_tma_bf16_d64",
        dq: "ragged_fmha_bwd_dq_tma_bf16_d64",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_tma_f16_d64",
        dq: "ragged_fmha_bwd_dq_tma_f16_d64",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_tma_bf16_d128",
        dq: "ragged_fmha_bwd_dq_tma_bf16_d128",
    },
    HopperKernels {
        dkdv: "ragged_fmha_bwd_dkdv_tma_f16_d128",
        dq: "ragged_fmha_bwd_dq_tma_f16_d128",
    },
];

/// Per set of [`ALL`] at D 64 (bf16, f16): the TMA dK/dV kernel with BM 128 query rows per step
/// instead of 64 (`bwd_dkdv_wg_body`'s BM), which pays a step's fixed costs once per 128 rows.
/// Its fallback without tensor maps is the BM 64 wgmma kernel of [`HOPPER_ALL`].
pub const HOPPER_TMA_BM128: [&str; 2] = [
    "ragged_fmha_bwd_dkdv_tma_bm128_bf16_d64",
    "ragged_fmha_bwd_dkdv_tma_bm128_f16_d64",
];

/// Whether `kernel` is one of [`HOPPER_TMA_ALL`], [`HOPPER_TMA_BM128`] or a fused TMA kernel: it takes, after
/// RAGGED_BWD_PARAMS, the tensor maps of the two tiles it streams — dK/dV and fused: Q and dO
/// (box rows = its BM); dQ: K and V (box rows = its BN).
pub fn takes_tensor_maps(kernel: &str) -> bool {
    HOPPER_TMA_ALL
        .iter()
        .any(|k| k.dkdv == kernel || k.dq == kernel)
        || HOPPER_TMA_BM128.contains(&kernel)
        || FUSED_ALL
            .iter()
            .any(|k| k.ws == kernel || k.ordered == kernel)
}

/// The kernel without tensor maps that computes the same as `kernel` (the wgmma kernel a TMA one
/// was derived from), for a layout the driver cannot describe with a tensor map; `kernel` itself
/// for every other name.
pub fn without_tensor_maps(kernel: &'static str) -> &'static str {
    for (tma, wg) in HOPPER_TMA_ALL.iter().zip(HOPPER_ALL) {
        if tma.dkdv == kernel {
            return wg.dkdv;
        }
        if tma.dq == kernel {
            return wg.dq;
        }
    }
    if let Some(index) = HOPPER_TMA_BM128.iter().position(|&k| k == kernel) {
        return HOPPER_ALL[index].dkdv;
    }
    FUSED_ALL
        .iter()
        .find(|k| k.ws == kernel)
        .and_then(|k| k.wg)
        .unwrap_or(kernel)
}

/// The head dims (Q/K, V/O) of a set of [`ALL`].
pub fn head_dims(set: BackwardKernels) -> Option<(i64, i64)> {
    let index = ALL.iter().position(|k| *k == set)?;
    Some(HEAD_DIMS[index / 2])
}

/// Which wgmma kernels replace the set's mma.sync kernels on [`HOPPER_ARCH`]: the single switch,
/// set from H200 measurements (a kernel is selected only where it passed the device harness and
/// was faster there; `bench/DECISIONS.md` keeps the figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopperSelection {
    /// Run `HopperKernels::dkdv` instead of `BackwardKernels::dkdv`.
    pub dkdv: bool,
    /// Run `HopperKernels::dq` instead of `BackwardKernels::dq`.
    pub dq: bool,
    /// Head dims (Q/K and V/O alike) at which the selected wgmma kernels are taken from
    /// [`HOPPER_TMA_ALL`] instead of [`HOPPER_ALL`].
    pub tma_head_dims: &'static [i64],
    /// Head dims at which the selected dK/dV kernel is the BM 128 TMA kernel of
    /// [`HOPPER_TMA_BM128`] (D 64 only has one), whatever `tma_head_dims` says.
    pub dkdv_bm128_head_dims: &'static [i64],
}

/// The selection the launcher uses: the wgmma dK/dV and dQ kernels at every head dim (on an
/// H200 they ran the ragged mix at D 128 about 1.4 × the mma.sync pair, D 64 about 1.2 ×), and
/// at D 128 their TMA twins, which were about 1.1–1.2 × faster still there and 2 % slower at
/// D 64 (`bench/DECISIONS.md`). At D 64 the dK/dV kernel is the BM 128 TMA kernel
/// ([`HOPPER_TMA_BM128`]) unless [`BM64_ENV`] asks for the BM 64 one.
pub const HOPPER_SELECTED: HopperSelection = HopperSelection {
    dkdv: true,
    dq: true,
    tma_head_dims: &[128],
    dkdv_bm128_head_dims: &[64],
};

/// Environment variable: `1` runs the D 64 dK/dV kernel of BM 64 query rows per step (the wgmma
/// kernel of [`HOPPER_ALL`]) instead of the BM 128 TMA kernel, for A/B measurements. Read once per
/// process.
pub const BM64_ENV: &str = "RAGGED_SDPA_CUDA_BWD_D64_BM64";

/// Environment variable: `1` runs the deterministic engine's dK/dV and dQ pair on sm_90a instead
/// of the ordered fused kernel, for A/B measurements and as a way around it. Read once per process.
pub const PAIR_ENV: &str = "RAGGED_SDPA_CUDA_BWD_PAIR";

/// Whether [`PAIR_ENV`] is `1`.
pub fn pair_selected() -> bool {
    static PAIR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAIR.get_or_init(|| switch_on(std::env::var_os(PAIR_ENV).as_deref()))
}

/// [`HOPPER_SELECTED`], without the BM 128 dK/dV kernel where [`BM64_ENV`] is `1`.
pub fn selected() -> HopperSelection {
    static BM64: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let bm64 = *BM64.get_or_init(|| switch_on(std::env::var_os(BM64_ENV).as_deref()));
    selection_for(bm64)
}

fn switch_on(value: Option<&std::ffi::OsStr>) -> bool {
    value.and_then(std::ffi::OsStr::to_str) == Some("1")
}

fn selection_for(bm64: bool) -> HopperSelection {
    if bm64 {
        HopperSelection {
            dkdv_bm128_head_dims: &[],
            ..HOPPER_SELECTED
        }
    } else {
        HOPPER_SELECTED
    }
}

/// The kernels to launch for `set` (one of [`ALL`]) on a module compiled for `arch`: its own
/// mma.sync kernels except on [`HOPPER_ARCH`] at a head dim with wgmma kernels.
pub fn for_target(set: BackwardKernels, arch: &str, selection: HopperSelection) -> BackwardKernels {
    let Some(index) = ALL.iter().position(|k| *k == set) else {
        return set;
    };
    if arch != HOPPER_ARCH || index >= HOPPER_ALL.len() {
        return set;
    }
    let hopper = if selection.tma_head_dims.contains(&HEAD_DIMS[index / 2].0) {
        HOPPER_TMA_ALL[index]
    } else {
        HOPPER_ALL[index]
    };
    let dkdv = if selection
        .dkdv_bm128_head_dims
        .contains(&HEAD_DIMS[index / 2].0)
        && let Some(bm128) = HOPPER_TMA_BM128.get(index)
    {
        *bm128
    } else {
        hopper.dkdv
    };
    BackwardKernels {
        dot: set.dot,
        dkdv: if selection.dkdv { dkdv } else { set.dkdv },
        dq: if selection.dq { hopper.dq } else { set.dq },
    }
}

/// Which of the three kernels a published table belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The Di pass: `{DOT_ROWS, 0, DOT_THREADS, 0}` exactly.
    Dot,
    /// dK/dV: BN = 16 × warps (one warp per 16 key rows) or 8 × warps (two warps per 16 key
    /// rows, each with half of dK's and dV's columns), BM a multiple of 16.
    DkDv,
    /// dQ: BM = 16 × warps, at least [`MIN_DQ_BLOCK_M`]; BN a multiple of 16.
    Dq,
    /// A fused dK/dV/dQ kernel: exactly BM 64 (its accumulator blobs assume it), BN 128 or the
    /// column-split kernel's 64, 256 threads or the warp-specialized 384.
    Fused,
    /// The dQ convert pass: `{FUSED_BLOCK_M, 0, DOT_THREADS, 0}` exactly.
    Convert,
}

/// Checks a published `{BM, BN, threads, smem}` against what the launcher relies on.
pub fn check_config(kernel: &str, part: Part, raw: [i32; 4]) -> Result<TileConfig, GpuError> {
    let [block_m, block_n, threads, smem] = raw;
    let bad = |detail: String| GpuError::KernelContract {
        kernel: kernel.to_owned(),
        detail,
    };
    let tiles = |bm: i32, bn: i32| bm >= 16 && bm % 16 == 0 && bn >= 16 && bn % 16 == 0;
    let ok = match part {
        Part::Dot => raw == [DOT_ROWS, 0, DOT_THREADS as i32, 0],
        Part::Fused => {
            block_m == FUSED_BLOCK_M as i32
                && FUSED_BLOCK_N.contains(&block_n)
                && (threads == FUSED_THREADS || threads == FUSED_WS_THREADS)
        }
        Part::Convert => raw == [FUSED_BLOCK_M as i32, 0, DOT_THREADS as i32, 0],
        Part::DkDv => tiles(block_m, block_n) && (threads == 2 * block_n || threads == 4 * block_n),
        Part::Dq => {
            tiles(block_m, block_n)
                && threads == 2 * block_m
                && i64::from(block_m) >= MIN_DQ_BLOCK_M
        }
    };
    if !ok || smem < 0 {
        return Err(bad(format!(
            "published {{BM, BN, threads, smem}} = {raw:?} does not fit the {part:?} launch"
        )));
    }
    Ok(TileConfig {
        block_m,
        block_n,
        threads: threads as u32,
        shared_mem_bytes: smem as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dtype_and_head_dim() {
        let k = kernels(DataType::F16, 128, 128).expect("compiled");
        assert_eq!(k.dot, "ragged_fmha_bwd_dot_f16_d128");
        assert_eq!(k.dkdv, "ragged_fmha_bwd_dkdv_f16_d128");
        assert_eq!(k.dq, "ragged_fmha_bwd_dq_f16_d128");
        assert_eq!(
            kernels(DataType::BF16, 64, 64).map(|k| k.dq),
            Some("ragged_fmha_bwd_dq_bf16_d64")
        );
        assert_eq!(
            kernels(DataType::BF16, 96, 96).map(|k| k.dkdv),
            Some("ragged_fmha_bwd_dkdv_bf16_d96")
        );
        assert_eq!(
            kernels(DataType::F16, 256, 256).map(|k| k.dot),
            Some("ragged_fmha_bwd_dot_f16_d256")
        );
        assert_eq!(
            kernels(DataType::BF16, 192, 128).map(|k| k.dq),
            Some("ragged_fmha_bwd_dq_bf16_d192v128")
        );
        assert_eq!(kernels(DataType::BF16, 128, 192), None);
        assert_eq!(kernels(DataType::BF16, 192, 192), None);
        assert_eq!(kernels(DataType::F16, 80, 80), None);
        assert_eq!(kernels(DataType::F32, 64, 64), None);
        for (index, (d_qk, d_v)) in HEAD_DIMS.iter().enumerate() {
            let dims = if d_qk == d_v {
                format!("d{d_qk}")
            } else {
                format!("d{d_qk}v{d_v}")
            };
            for (offset, dt) in ["bf16", "f16"].iter().enumerate() {
                let k = ALL[2 * index + offset];
                assert_eq!(k.dkdv, format!("ragged_fmha_bwd_dkdv_{dt}_{dims}"));
                assert_eq!(k.dot, format!("ragged_fmha_bwd_dot_{dt}_{dims}"));
                assert_eq!(k.dq, format!("ragged_fmha_bwd_dq_{dt}_{dims}"));
                assert_eq!(head_dims(k), Some((*d_qk, *d_v)));
            }
        }
    }

    /// The backward runs what the forward runs: every head dim pair with a forward kernel has
    /// backward kernels, and no other.
    #[test]
    fn the_backward_has_the_forward_head_dims() {
        let mut forward = crate::forward::device_abi::HEAD_DIMS.to_vec();
        let mut backward = HEAD_DIMS.to_vec();
        forward.sort_unstable();
        backward.sort_unstable();
        assert_eq!(forward, backward);
    }

    #[test]
    fn every_compiled_entry_point_is_named_in_the_kernel_file() {
        let text = include_str!("../../cuda/fmha_bwd/entries.cuh");
        for k in ALL {
            for name in [k.dot, k.dkdv, k.dq] {
                let (stem, dims) = name.rsplit_once("_d").expect("a _d<D> suffix");
                let dt = stem.rsplit('_').next().expect("a dtype");
                let part = stem
                    .trim_start_matches("ragged_fmha_bwd_")
                    .trim_end_matches(dt)
                    .trim_end_matches('_');
                let pattern = format!("ragged_fmha_bwd_{part}_##DT##_d{dims}");
                assert!(
                    text.contains(&pattern),
                    "{name}: {pattern} not in entries.cuh"
                );
            }
        }
    }

    /// Head dims past the first [`HOPPER_HEAD_DIMS`] have no wgmma kernels: their mma.sync
    /// kernels run on sm_90a as elsewhere, whatever the selection.
    #[test]
    fn head_dims_without_wgmma_kernels_keep_theirs_on_sm90a() {
        let all = HopperSelection {
            dkdv: true,
            dq: true,
            tma_head_dims: &[64, 96, 128, 192, 256],
            dkdv_bm128_head_dims: &[],
        };
        for set in &ALL[2 * HOPPER_HEAD_DIMS..] {
            assert_eq!(for_target(*set, HOPPER_ARCH, all), *set, "{set:?}");
            assert_eq!(for_target(*set, HOPPER_ARCH, HOPPER_SELECTED), *set);
            assert!(!takes_tensor_maps(set.dkdv) && !takes_tensor_maps(set.dq));
        }
        for (set, wg) in ALL.iter().zip(HOPPER_ALL) {
            assert_eq!(
                for_target(*set, HOPPER_ARCH, all).dkdv,
                wg.dkdv.replace("_wg_", "_tma_")
            );
        }
    }

    #[test]
    fn hopper_kernels_replace_only_on_sm90a_and_only_where_selected() {
        let both = HopperSelection {
            dkdv: true,
            dq: true,
            tma_head_dims: &[],
            dkdv_bm128_head_dims: &[],
        };
        let set = kernels(DataType::BF16, 128, 128).expect("compiled");
        assert_eq!(for_target(set, "sm_80", both), set);
        assert_eq!(for_target(set, "compute_90", both), set);
        let hopper = for_target(set, "sm_90a", both);
        assert_eq!(hopper.dot, set.dot);
        assert_eq!(hopper.dkdv, "ragged_fmha_bwd_dkdv_wg_bf16_d128");
        assert_eq!(hopper.dq, "ragged_fmha_bwd_dq_wg_bf16_d128");
        let dkdv_only = HopperSelection {
            dkdv: true,
            dq: false,
            tma_head_dims: &[],
            dkdv_bm128_head_dims: &[],
        };
        let mixed = for_target(set, "sm_90a", dkdv_only);
        assert_eq!((mixed.dkdv, mixed.dq), (hopper.dkdv, set.dq));
        let none = HopperSelection {
            dkdv: false,
            dq: false,
            tma_head_dims: &[64, 128],
            dkdv_bm128_head_dims: &[],
        };
        assert_eq!(for_target(set, "sm_90a", none), set);
        for (default, wg) in ALL.iter().zip(HOPPER_ALL) {
            assert_eq!(wg.dkdv, default.dkdv.replace("dkdv_", "dkdv_wg_"));
            assert_eq!(wg.dq, default.dq.replace("dq_", "dq_wg_"));
        }
    }

    #[test]
    fn tma_kernels_take_maps_and_fall_back_to_their_wgmma_kernels() {
        let set = kernels(DataType::F16, 64, 64).expect("compiled");
        let tma = HopperSelection {
            dkdv: true,
            dq: true,
            tma_head_dims: &[64, 128],
            dkdv_bm128_head_dims: &[],
        };
        let picked = for_target(set, "sm_90a", tma);
        let d128_only = HopperSelection {
            tma_head_dims: &[128],
            ..tma
        };
        assert_eq!(
            for_target(set, "sm_90a", d128_only).dq,
            "ragged_fmha_bwd_dq_wg_f16_d64"
        );
        assert_eq!(
            for_target(ALL[3], "sm_90a", d128_only).dq,
            "ragged_fmha_bwd_dq_tma_f16_d128"
        );
        assert_eq!(picked.dkdv, "ragged_fmha_bwd_dkdv_tma_f16_d64");
        assert_eq!(picked.dq, "ragged_fmha_bwd_dq_tma_f16_d64");
        assert_eq!(for_target(set, "sm_80", tma), set);
        assert!(takes_tensor_maps(picked.dkdv) && takes_tensor_maps(picked.dq));
        assert_eq!(
            without_tensor_maps(picked.dkdv),
            "ragged_fmha_bwd_dkdv_wg_f16_d64"
        );
        assert_eq!(
            without_tensor_maps(picked.dq),
            "ragged_fmha_bwd_dq_wg_f16_d64"
        );
        for name in [set.dkdv, set.dq, HOPPER_ALL[1].dkdv, HOPPER_ALL[1].dq] {
            assert!(!takes_tensor_maps(name), "{name}");
            assert_eq!(without_tensor_maps(name), name);
        }
        for (tma, wg) in HOPPER_TMA_ALL.iter().zip(HOPPER_ALL) {
            assert_eq!(tma.dkdv, wg.dkdv.replace("_wg_", "_tma_"));
            assert_eq!(tma.dq, wg.dq.replace("_wg_", "_tma_"));
        }
        assert_eq!(head_dims(set), Some((64, 64)));
        assert_eq!(head_dims(ALL[3]), Some((128, 128)));
    }

    #[test]
    fn d64_dkdv_takes_the_bm128_kernel_unless_the_knob_says_bm64() {
        for (index, dt) in ["bf16", "f16"].iter().enumerate() {
            let set = ALL[index];
            let picked = for_target(set, HOPPER_ARCH, HOPPER_SELECTED);
            assert_eq!(
                picked.dkdv,
                format!("ragged_fmha_bwd_dkdv_tma_bm128_{dt}_d64")
            );
            assert_eq!(picked.dq, format!("ragged_fmha_bwd_dq_wg_{dt}_d64"));
            assert!(takes_tensor_maps(picked.dkdv));
            assert_eq!(without_tensor_maps(picked.dkdv), HOPPER_ALL[index].dkdv);
            let bm64 = for_target(set, HOPPER_ARCH, selection_for(true));
            assert_eq!(bm64.dkdv, format!("ragged_fmha_bwd_dkdv_wg_{dt}_d64"));
            assert_eq!(bm64.dq, picked.dq);
            assert_eq!(for_target(set, "sm_80", HOPPER_SELECTED), set);
            let no_dkdv = HopperSelection {
                dkdv: false,
                ..HOPPER_SELECTED
            };
            assert_eq!(for_target(set, HOPPER_ARCH, no_dkdv).dkdv, set.dkdv);
        }
        assert_eq!(selection_for(false), HOPPER_SELECTED);
        // D 128 has no BM 128 dK/dV kernel: its TMA kernel either way.
        for bm64 in [false, true] {
            assert_eq!(
                for_target(ALL[2], HOPPER_ARCH, selection_for(bm64)).dkdv,
                "ragged_fmha_bwd_dkdv_tma_bf16_d128"
            );
        }
        assert!(switch_on(Some(std::ffi::OsStr::new("1"))));
        assert!(!switch_on(Some(std::ffi::OsStr::new("0"))));
        assert!(!switch_on(None));
    }

    #[test]
    fn every_hopper_entry_point_is_defined_in_the_kernel_file() {
        let text = include_str!("../../cuda/fmha_bwd/entries.cuh");
        for k in HOPPER_ALL.iter().chain(HOPPER_TMA_ALL.iter()) {
            for name in [k.dkdv, k.dq] {
                let pattern = name
                    .replace("_bf16_", "_##DT##_")
                    .replace("_f16_", "_##DT##_");
                assert!(
                    text.contains(&format!("({pattern},")),
                    "{name}: {pattern} not in entries.cuh"
                );
            }
        }
        for name in HOPPER_TMA_BM128 {
            let pattern = name
                .replace("_bf16_", "_##DT##_")
                .replace("_f16_", "_##DT##_");
            assert!(
                text.contains(&format!(
                    "RAGGED_BWD_DKDV_TMA_ENTRY({pattern}, BF16, 64, 128)"
                )),
                "{name}: {pattern} with BM 128 not in entries.cuh"
            );
        }
    }

    #[test]
    fn hopper_tables_fit_the_launch_checks() {
        // {BM, BN, threads, smem} as RAGGED_BWD_DKDV_WG_ENTRY / RAGGED_BWD_DQ_WG_ENTRY publish them
        // at D 128.
        check_config("k", Part::DkDv, [64, 128, 256, 166_400]).expect("wgmma dK/dV fits");
        check_config("k", Part::Dq, [128, 64, 256, 164_864]).expect("wgmma dQ fits");
        check_config("k", Part::DkDv, [64, 128, 256, 166_448]).expect("TMA dK/dV fits");
        // D 64, BM 128: (2 · 128 + 2 · 3 · 128) rows · 128 B + 2 · 3 · 128 f32 + 1024 + 3 · 16.
        check_config("k", Part::DkDv, [128, 128, 256, 135_216]).expect("BM 128 TMA dK/dV fits");
        check_config("k", Part::Dq, [128, 64, 256, 164_912]).expect("TMA dQ fits");
    }

    #[test]
    fn published_tables_are_checked() {
        let dkdv = check_config("k", Part::DkDv, [64, 64, 128, 99_328]).expect("fits");
        assert_eq!((dkdv.block_m, dkdv.block_n, dkdv.threads), (64, 64, 128));
        // D 256: two warps per 16 key rows (RAGGED_BWD_DKDV_SMEM(256, 256, 32, 64)).
        let split = check_config("k", Part::DkDv, [32, 64, 256, 131_584]).expect("fits");
        assert_eq!((split.block_m, split.block_n, split.threads), (32, 64, 256));
        check_config("k", Part::DkDv, [32, 64, 128, 1]).expect("BM 32 is fine for dK/dV");
        check_config("k", Part::Dq, [64, 64, 128, 98_304]).expect("fits");
        check_config("k", Part::Dot, [64, 0, 256, 0]).expect("fits");
        for (part, raw) in [
            (Part::Dq, [32, 64, 64, 0]),
            (Part::Dq, [64, 64, 256, 0]),
            (Part::DkDv, [64, 64, 192, 0]),
            (Part::DkDv, [64, 64, 512, 0]),
            (Part::DkDv, [64, 8, 32, 0]),
            (Part::Dot, [32, 0, 256, 0]),
            (Part::Dq, [64, 64, 128, -1]),
        ] {
            let err = check_config("k", part, raw).unwrap_err().to_string();
            assert!(err.contains("kernel k violates"), "{raw:?}: {err}");
        }
    }
}
