//! The host's copy of the contract in `kernels/cuda-fmha/cuda/ragged_paged_decode.cu`
//! (`cuda/decode/README.md`): entry-point names, the per-sequence record, the page-id window and
//! the shared-memory arithmetic. Nothing here can be checked by the compiler against the `.cu`
//! file, so every constant names its counterpart; the device tests (`plugin/tests/gpu/paged.rs`)
//! fail if they drift apart.

use ragged_core::DataType;
use ragged_gpu_runtime::cuda::error::GpuError;

/// `sizeof(PagedSeq)` (`decode/common.cuh`): i64 row0; int lq, lkv, valid, unused.
pub const RECORD_BYTES: u64 = 24;
/// `RAGGED_PAGED_WINDOW`: keys whose page ids a split block holds in shared memory at a time.
pub const WINDOW_KEYS: i64 = 2048;
/// `RAGGED_PAGED_NW * 32`: threads per block of both kernels.
pub const THREADS: u32 = 128;
/// Query heads per block of the combine kernel (one warp each).
pub const COMBINE_HEADS_PER_BLOCK: i64 = 4;
/// Keys per tile of the split kernel: a split's chunk is a multiple of it.
pub const KEY_TILE: i64 = 16;

/// Head dims with compiled paged entry points, as (Q/K head dim, V/O head dim): the forward's set.
pub const HEAD_DIMS: [(i64, i64); 5] = [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)];

/// `paged_ids_cap(ps)`: page-table entries a window of [`WINDOW_KEYS`] keys can touch.
pub fn ids_cap(page_size: i64) -> i64 {
    WINDOW_KEYS / page_size + 2
}

/// The pair of entry points for one element type and head-dim pair, built only from a pair the
/// kernel file compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedKernel {
    dtype: DataType,
    d_qk: i64,
    d_v: i64,
    split: &'static str,
    combine: &'static str,
}

/// Every split entry point then its combine entry point, bf16 then f16 per [`HEAD_DIMS`] entry.
pub const KERNELS: [(&str, &str); 10] = [
    (
        "ragged_paged_split_bf16_d64",
        "ragged_paged_combine_bf16_d64",
    ),
    ("ragged_paged_split_f16_d64", "ragged_paged_combine_f16_d64"),
    (
        "ragged_paged_split_bf16_d96",
        "ragged_paged_combine_bf16_d96",
    ),
    ("ragged_paged_split_f16_d96", "ragged_paged_combine_f16_d96"),
    (
        "ragged_paged_split_bf16_d128",
        "ragged_paged_combine_bf16_d128",
    ),
    (
        "ragged_paged_split_f16_d128",
        "ragged_paged_combine_f16_d128",
    ),
    (
        "ragged_paged_split_bf16_d256",
        "ragged_paged_combine_bf16_d256",
    ),
    (
        "ragged_paged_split_f16_d256",
        "ragged_paged_combine_f16_d256",
    ),
    (
        "ragged_paged_split_bf16_d192v128",
        "ragged_paged_combine_bf16_d192v128",
    ),
    (
        "ragged_paged_split_f16_d192v128",
        "ragged_paged_combine_f16_d192v128",
    ),
];

/// The gathered route's entry points (`decode/gather.cuh`), element-type free: the starts kernel,
/// the gather kernel, the finish kernel. Each publishes `{0, 0, threads, 0}` like the combine kernels.
pub const GATHER_KERNELS: [&str; 3] = [
    "ragged_paged_gather_starts",
    "ragged_paged_gather",
    "ragged_paged_gather_finish",
];

impl PagedKernel {
    /// The entry points for `dtype` with Q/K head dim `d_qk` and V/O head dim `d_v`, if compiled.
    pub fn select(dtype: DataType, d_qk: i64, d_v: i64) -> Option<Self> {
        let index = HEAD_DIMS.iter().position(|&dims| dims == (d_qk, d_v))?;
        let (split, combine) = match dtype {
            DataType::BF16 => KERNELS[2 * index],
            DataType::F16 => KERNELS[2 * index + 1],
            _ => return None,
        };
        Some(Self {
            dtype,
            d_qk,
            d_v,
            split,
            combine,
        })
    }

    /// The split kernel's symbol.
    pub fn split(self) -> &'static str {
        self.split
    }

    /// The combine kernel's symbol.
    pub fn combine(self) -> &'static str {
        self.combine
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

/// What an entry point publishes in `NAME_config[4]`: the split kernel `{16, 16, threads, shared
/// memory before the page-id windows}`, the combine kernel `{0, 0, threads, 0}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryConfig {
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory, without the page-id windows.
    pub shared_mem_bytes: u32,
}

/// Checks a published table against what the launcher relies on.
pub fn entry_config(kernel: &str, raw: [i32; 4]) -> Result<EntryConfig, GpuError> {
    let [_, _, threads, smem] = raw;
    let bad = |detail: String| GpuError::KernelContract {
        kernel: kernel.to_owned(),
        detail,
    };
    if threads != THREADS as i32 {
        return Err(bad(format!(
            "{threads} threads per block, the launcher assumes {THREADS}"
        )));
    }
    if smem < 0 {
        return Err(bad(format!("dynamic shared memory {smem} is negative")));
    }
    Ok(EntryConfig {
        threads: THREADS,
        shared_mem_bytes: smem as u32,
    })
}

/// Dynamic shared memory of a split launch: the published part plus both tables' page-id windows.
pub fn split_shared_bytes(published: u32, page_size_k: i64, page_size_v: i64) -> u64 {
    u64::from(published) + 4 * (ids_cap(page_size_k) + ids_cap(page_size_v)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_follow_the_head_dim_list() {
        for (index, &(d_qk, d_v)) in HEAD_DIMS.iter().enumerate() {
            let suffix = if d_qk == d_v {
                format!("d{d_qk}")
            } else {
                format!("d{d_qk}v{d_v}")
            };
            for (dtype, name, offset) in [(DataType::BF16, "bf16", 0), (DataType::F16, "f16", 1)] {
                let k = PagedKernel::select(dtype, d_qk, d_v).expect("compiled");
                assert_eq!(k.split(), format!("ragged_paged_split_{name}_{suffix}"));
                assert_eq!(k.combine(), format!("ragged_paged_combine_{name}_{suffix}"));
                assert_eq!(KERNELS[2 * index + offset], (k.split(), k.combine()));
            }
        }
        assert_eq!(PagedKernel::select(DataType::F32, 128, 128), None);
        assert_eq!(PagedKernel::select(DataType::BF16, 128, 64), None);
    }

    #[test]
    fn windows_hold_every_entry_a_window_touches() {
        // A window of 2048 keys starting mid-page touches at most 2048 / ps + 2 entries.
        for ps in [1, 3, 16, 48, 4096] {
            let worst = (ps - 1 + WINDOW_KEYS + ps - 1) / ps;
            assert!(ids_cap(ps) >= worst, "page size {ps}");
        }
        assert_eq!(split_shared_bytes(1000, 16, 32), 1000 + 4 * (130 + 66));
    }

    #[test]
    fn configs_are_checked() {
        assert_eq!(
            entry_config("k", [16, 16, 128, 4096]),
            Ok(EntryConfig {
                threads: 128,
                shared_mem_bytes: 4096
            })
        );
        assert!(entry_config("k", [16, 16, 256, 0]).is_err());
        assert!(entry_config("k", [16, 16, 128, -1]).is_err());
    }
}
