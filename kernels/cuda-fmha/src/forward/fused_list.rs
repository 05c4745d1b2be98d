//! The fused list (`kernels/cuda-fmha/cuda/fmha/fused_list.cuh`): whether an execute lets the persistent
//! forward build its tile list itself instead of launching the pre-pass, and the nonce that
//! execute carries.
//!
//! The pre-pass costs ≈ 7 µs between two forwards on the H200 (`bench/DECISIONS.md`),
//! most of it a kernel's cold start after the forward; building the same list inside the
//! forward removes that kernel from the stream. Every block builds the same list; they agree on
//! which of them zeroes the work counter through two words of the workspace, which is the caller's
//! and uninitialized: a nonce that no earlier execute carried makes whatever those words hold read
//! as "not this execute".

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::device_abi;

/// Environment variable: `0` keeps the pre-pass launch for every execute (for A/B measurements
/// against the fused list); any other value, or none, lets the forward build the list. Read
/// once per process.
pub const FUSED_LIST_ENV: &str = "RAGGED_SDPA_CUDA_FUSED_LIST";

/// Whether [`FUSED_LIST_ENV`] leaves the fused list on.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| setting(std::env::var_os(FUSED_LIST_ENV).as_deref()))
}

fn setting(value: Option<&OsStr>) -> bool {
    value.and_then(OsStr::to_str) != Some("0")
}

/// Whether a forward block can sort this problem's tiles itself: every batch needs a thread of the
/// block (`threads`), and the tiles, at most B · ceil(S_q_max / BM), must fit the block's sort
/// ([`device_abi::FL_MAX_TILES`]); larger problems keep the pre-pass.
pub fn fits(batch: i32, max_tiles: i32, threads: u32) -> bool {
    i64::from(batch) <= i64::from(threads)
        && i64::from(batch) * i64::from(max_tiles) <= device_abi::FL_MAX_TILES
}

/// A nonce for one execute: never 0 (0 tells the forward that the pre-pass ran), distinct from
/// every other nonce of this process, and seeded per process so that a workspace still holding
/// another process's words does not match either (except with probability 2^-64).
pub fn next_nonce() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(u64::from(std::process::id()));
        hasher.finish()
    });
    loop {
        // splitmix64's finalizer is a bijection, so distinct sequence numbers give distinct nonces.
        let mut z = seed.wrapping_add(
            SEQUENCE
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if z != 0 {
            return z;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn only_zero_turns_the_fused_list_off() {
        assert!(setting(None));
        assert!(setting(Some(OsStr::new("1"))));
        assert!(setting(Some(OsStr::new("off-by-typo"))));
        assert!(!setting(Some(OsStr::new("0"))));
    }

    #[test]
    fn a_problem_fits_the_block_sort_only_within_both_limits() {
        // The ragged mix at d128: 6 batches, 16 384 rows at most, BM 128, 384 threads.
        assert!(fits(6, 128, 384));
        // Exactly the limit: 768 tiles.
        assert!(fits(6, 128, 384) && fits(768, 1, 1024) && fits(1, 768, 384));
        assert!(!fits(7, 128, 384));
        assert!(!fits(385, 1, 384));
        // No overflow on large values.
        assert!(!fits(i32::MAX, i32::MAX, u32::MAX));
    }

    #[test]
    fn nonces_are_nonzero_and_distinct_across_threads() {
        let handles: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..10_000).map(|_| next_nonce()).collect::<Vec<_>>()))
            .collect();
        let mut seen = HashSet::new();
        for handle in handles {
            for nonce in handle.join().unwrap() {
                assert_ne!(nonce, 0);
                assert!(seen.insert(nonce), "nonce {nonce:#x} issued twice");
            }
        }
        assert_eq!(seen.len(), 40_000);
    }
}
