//! The host's copy of the fused backward's contract (`fmha_bwd/fused_dq.cuh`,
//! `fmha_bwd/dq_convert.cuh`, their entry points in `fmha_bwd/entries.cuh`): the kernels of
//! `fmha_bwd/fused_ws.cuh` and `fmha_bwd/fused_wide.cuh`: the fused kernels of both
//! [`super::plan::DqForm`]s on sm_90a and the layout of their f32 dQ accumulator.

use super::device_abi::{ALL, BackwardKernels, HOPPER_ARCH};

/// The fused dK/dV/dQ kernels of one set of [`ALL`] and the pass that writes dQ from their
/// accumulator. Every fused kernel takes RAGGED_BWD_PARAMS (its `dq` unused), the TMA ones then
/// three tensor maps (Q and dO, box rows [`FUSED_BLOCK_M`], and the Di pass's statistics), then
/// the accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedKernels {
    /// `ragged_fmha_bwd_ordered_<dt>_d<D>`: the warp-specialized kernel adding each blob's
    /// contributions in a fixed order (the deterministic engine's).
    pub ordered: &'static str,
    /// `ragged_fmha_bwd_fused_ws_<dt>_d<D>`: the same kernel adding in whatever order the blocks
    /// get there (the non-deterministic engine's).
    pub ws: &'static str,
    /// `ragged_fmha_bwd_fused_wg_<dt>_d<D>` (D 64 and 128): a two-warpgroup fused kernel filled
    /// by cp.async, the non-deterministic engine's for a layout the driver cannot describe as a
    /// tensor map. Without one (D 96) such a layout runs the deterministic pair.
    pub wg: Option<&'static str>,
    /// `ragged_fmha_bwd_dq_convert_<dt>_d<D>`.
    pub convert: &'static str,
}

/// How many leading entries of [`super::device_abi::HEAD_DIMS`] have fused kernels on
/// [`HOPPER_ARCH`]: all five. D 96 runs the D 128 kernel's layout, its rows padded to 128 columns
/// in shared memory; D 256 and Q/K 192 with V/O 128 the column-split kernel of `fused_wide.cuh`
/// (64-key blocks).
pub const FUSED_HEAD_DIMS: usize = 5;

/// Per set of [`ALL`] at the first [`FUSED_HEAD_DIMS`] head dims, in its order: the fused kernels
/// and their convert pass, compiled for [`HOPPER_ARCH`] only.
pub const FUSED_ALL: [FusedKernels; 2 * FUSED_HEAD_DIMS] = [
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_bf16_d64",
        ws: "ragged_fmha_bwd_fused_ws_bf16_d64",
        wg: Some("ragged_fmha_bwd_fused_wg_bf16_d64"),
        convert: "ragged_fmha_bwd_dq_convert_bf16_d64",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_f16_d64",
        ws: "ragged_fmha_bwd_fused_ws_f16_d64",
        wg: Some("ragged_fmha_bwd_fused_wg_f16_d64"),
        convert: "ragged_fmha_bwd_dq_convert_f16_d64",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_bf16_d128",
        ws: "ragged_fmha_bwd_fused_ws_bf16_d128",
        wg: Some("ragged_fmha_bwd_fused_wg_bf16_d128"),
        convert: "ragged_fmha_bwd_dq_convert_bf16_d128",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_f16_d128",
        ws: "ragged_fmha_bwd_fused_ws_f16_d128",
        wg: Some("ragged_fmha_bwd_fused_wg_f16_d128"),
        convert: "ragged_fmha_bwd_dq_convert_f16_d128",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_bf16_d96",
        ws: "ragged_fmha_bwd_fused_ws_bf16_d96",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_bf16_d96",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_f16_d96",
        ws: "ragged_fmha_bwd_fused_ws_f16_d96",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_f16_d96",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_bf16_d256",
        ws: "ragged_fmha_bwd_fused_ws_bf16_d256",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_bf16_d256",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_f16_d256",
        ws: "ragged_fmha_bwd_fused_ws_f16_d256",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_f16_d256",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_bf16_d192v128",
        ws: "ragged_fmha_bwd_fused_ws_bf16_d192v128",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_bf16_d192v128",
    },
    FusedKernels {
        ordered: "ragged_fmha_bwd_ordered_f16_d192v128",
        ws: "ragged_fmha_bwd_fused_ws_f16_d192v128",
        wg: None,
        convert: "ragged_fmha_bwd_dq_convert_f16_d192v128",
    },
];

/// `RAGGED_BWD_FUSED_ROWS`: query rows of one accumulator blob, the fused kernel's BM and the
/// convert pass's rows per block.
pub const FUSED_BLOCK_M: i64 = 64;
/// The fused kernels' BN (keys per block): 128, or 64 for the column-split kernel (D 256, 192/128).
pub const FUSED_BLOCK_N: [i32; 2] = [128, 64];
/// The two-warpgroup fused kernel's threads.
pub const FUSED_THREADS: i32 = 256;
/// The warp-specialized fused kernels' threads (a loader and a dQ-writer warp in the first of three
/// warpgroups).
pub const FUSED_WS_THREADS: i32 = 384;
/// `RAGGED_BWD_FUSED_BLOB`: f32 values between blobs up to D 128, 64 rows × 128 (each warpgroup
/// holds half of the columns; D 96's last 32 columns are padding, D 64 uses the first 64 × 64).
pub const FUSED_BLOB_FLOATS: u64 = 8192;

/// `bwd_dq_blob_stride(d)`: f32 values between blobs at Q/K head dim `d_qk`, [`FUSED_BLOB_FLOATS`]
/// up to D 128 and 64 × `d_qk` past it.
pub fn blob_stride_floats(d_qk: i64) -> u64 {
    if d_qk <= 128 {
        FUSED_BLOB_FLOATS
    } else {
        FUSED_BLOCK_M.unsigned_abs() * d_qk.unsigned_abs()
    }
}

/// The fused kernels for `set` on a module compiled for `arch`; `None` where they do not exist
/// (every target but [`HOPPER_ARCH`], and there every head dim past the first
/// [`FUSED_HEAD_DIMS`]), and the deterministic pair runs instead.
pub fn fused_for_target(set: BackwardKernels, arch: &str) -> Option<FusedKernels> {
    let index = ALL.iter().position(|k| *k == set)?;
    FUSED_ALL
        .get(index)
        .copied()
        .filter(|_| arch == HOPPER_ARCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backward::device_abi::{
        Part, check_config, kernels, takes_tensor_maps, without_tensor_maps,
    };
    use ragged_core::DataType;

    #[test]
    fn fused_kernels_exist_only_on_sm90a() {
        let set = kernels(DataType::F16, 128, 128).expect("compiled");
        assert_eq!(fused_for_target(set, "sm_80"), None);
        assert_eq!(fused_for_target(set, "compute_90"), None);
        let fused = fused_for_target(set, "sm_90a").expect("fused on sm_90a");
        assert_eq!(fused.ordered, "ragged_fmha_bwd_ordered_f16_d128");
        assert_eq!(fused.convert, "ragged_fmha_bwd_dq_convert_f16_d128");
        for (set, fused) in ALL.iter().zip(FUSED_ALL) {
            if let Some(wg) = fused.wg {
                assert_eq!(wg, set.dkdv.replace("_dkdv_", "_fused_wg_"));
            }
            assert_eq!(fused.ws, set.dkdv.replace("_dkdv_", "_fused_ws_"));
            assert_eq!(fused.ordered, set.dkdv.replace("_dkdv_", "_ordered_"));
            assert_eq!(fused.convert, set.dq.replace("_dq_", "_dq_convert_"));
        }
    }

    /// Every head dim has a fused kernel on sm_90a; D 96, 256 and 192/128 only the
    /// warp-specialized ones, not the two-warpgroup fallback.
    #[test]
    fn every_head_dim_has_a_fused_kernel_and_past_128_no_two_warpgroup_one() {
        assert_eq!(FUSED_ALL.len(), ALL.len());
        for set in ALL {
            assert!(fused_for_target(set, HOPPER_ARCH).is_some(), "{set:?}");
        }
        for (d, dv, suffix) in [
            (96, 96, "_d96"),
            (256, 256, "_d256"),
            (192, 128, "_d192v128"),
        ] {
            for dtype in [DataType::BF16, DataType::F16] {
                let set = kernels(dtype, d, dv).expect("compiled");
                let fused = fused_for_target(set, HOPPER_ARCH).expect("fused");
                assert!(fused.ordered.ends_with(suffix) && fused.convert.ends_with(suffix));
                assert_eq!(fused.wg, None);
            }
        }
    }

    #[test]
    fn the_tma_fused_kernels_take_maps_and_the_unordered_one_falls_back_to_its_wg_twin() {
        for fused in FUSED_ALL {
            assert!(takes_tensor_maps(fused.ws) && takes_tensor_maps(fused.ordered));
            // No twin: the pair runs instead (the launcher).
            assert_eq!(without_tensor_maps(fused.ordered), fused.ordered);
            assert!(!takes_tensor_maps(fused.convert));
            match fused.wg {
                Some(wg) => {
                    assert_eq!(without_tensor_maps(fused.ws), wg);
                    assert!(!takes_tensor_maps(wg));
                    assert_eq!(without_tensor_maps(wg), wg);
                }
                None => assert_eq!(without_tensor_maps(fused.ws), fused.ws),
            }
        }
    }

    #[test]
    fn every_fused_entry_point_is_defined_in_the_kernel_file() {
        let text = include_str!("../../cuda/fmha_bwd/entries.cuh");
        for k in FUSED_ALL {
            for name in [k.wg, Some(k.ws), Some(k.ordered)].into_iter().flatten() {
                let pattern = name
                    .replace("_bf16_", "_##DT##_")
                    .replace("_f16_", "_##DT##_");
                assert!(text.contains(&format!("({pattern},")), "{name}");
            }
            assert!(text.contains(&format!("({},", k.convert)), "{}", k.convert);
        }
        let layout = include_str!("../../cuda/fmha_bwd/fused_dq.cuh");
        assert!(layout.contains(&format!("#define RAGGED_BWD_FUSED_ROWS {FUSED_BLOCK_M}\n")));
        assert!(layout.contains(&format!(
            "#define RAGGED_BWD_FUSED_BLOB {FUSED_BLOB_FLOATS}\n"
        )));
    }

    /// The blob's layout, replayed on the host: where the fused kernels store accumulator register
    /// i of thread t of a warpgroup holding dQ's columns [c0, c0 + n) ([c0 / 8 + i / 4][t][i % 4],
    /// the m64 wgmma layout: row 16 (t / 32) + (t % 32) / 4 + 8 ((i % 4) / 2), column
    /// c0 + 8 (i / 4) + 2 (t % 4) + i % 2 of the padded width P) is where `bwd_dq_convert_body`
    /// reads (row r, column c) back, once. The formulas are transcribed from fmha_bwd/fused_dq.cuh,
    /// fmha_bwd/fused_wide.cuh (the column split) and fmha_bwd/dq_convert.cuh: change them together.
    #[test]
    fn the_convert_pass_reads_each_element_where_the_fused_step_stored_it() {
        // (Q/K head dim, each warpgroup's (first column, columns)).
        let splits: [(usize, [(usize, usize); 2]); 5] = [
            (64, [(0, 32), (32, 32)]),
            (96, [(0, 64), (64, 64)]),
            (128, [(0, 64), (64, 64)]),
            (256, [(0, 128), (128, 128)]),
            (192, [(0, 128), (128, 64)]),
        ];
        for (d, shares) in splits {
            let p = d.div_ceil(64) * 64;
            // held[at]: the (row, column) of dQ that float `at` of the blob adds into.
            let mut held = vec![None; 64 * p];
            for (c0, n) in shares {
                for t in 0..128 {
                    for i in 0..n / 2 {
                        let row = (t / 32) * 16 + (t % 32) / 4 + 8 * ((i % 4) / 2);
                        let col = c0 + (i / 4) * 8 + 2 * (t % 4) + i % 2;
                        let at = (c0 / 8 + i / 4) * 512 + t * 4 + i % 4;
                        assert!(
                            held[at].replace((row, col)).is_none(),
                            "D {d}: stored twice at {at}"
                        );
                    }
                }
            }
            let mut read = vec![0u8; 64 * p];
            for r in 0..64 {
                for cg in 0..d / 8 {
                    let at0 = cg * 512 + ((r >> 4) * 32 + (r & 7) * 4) * 4 + ((r >> 3) & 1) * 2;
                    for lt in 0..4 {
                        for e in 0..2 {
                            let at = at0 + lt * 4 + e;
                            assert_eq!(
                                held[at],
                                Some((r, cg * 8 + 2 * lt + e)),
                                "D {d}: row {r}, columns {cg}·8 + {lt}·2 + {e}"
                            );
                            read[at] += 1;
                        }
                    }
                }
            }
            // Exactly once where the float holds one of dQ's D columns (D 96: not the padding).
            for (at, (&n, &h)) in read.iter().zip(&held).enumerate() {
                let column = h.map(|(_, c)| c).expect("every float stored");
                assert_eq!(
                    n,
                    u8::from(column < d),
                    "D {d}: float {at} (column {column})"
                );
            }
            assert!(
                64 * p <= blob_stride_floats(d as i64) as usize,
                "D {d}: the blob fits its slot"
            );
        }
    }

    /// The column-split kernel's dQ staging, replayed on the host: each warpgroup stages the
    /// 64-column parts of dQ it holds over slot regions (`BwdWideTraits::dq_part`) that no other
    /// warpgroup's products read in the same step (they may still be running), inside the slot's
    /// Q, dO or pad buffer, disjoint from each other, one per part of the blob. Transcribed from
    /// fmha_bwd/fused_wide.cuh (the traits' K1 / V1 split and dq_part): change them together.
    #[test]
    fn the_wide_kernels_dq_parts_overwrite_only_what_their_warpgroup_alone_read() {
        const BOX: usize = 64 * 128; // one 64-column box of a 64-row tile, bytes
        const PART: usize = 64 * 64 * 4; // 64 rows x 64 columns of f32
        #[derive(Clone, Copy, PartialEq, Debug)]
        enum Buf {
            Q,
            DO,
            Pad,
        }
        // (Q/K head dim, V/O head dim, K1, V1, slot pad bytes, dq_part(i) as (buffer, offset)).
        type DqPart = fn(usize) -> (Buf, usize);
        let configs: [(usize, usize, usize, usize, usize, DqPart); 2] = [
            (256, 256, 128, 128, 0, |i| {
                (if i % 2 == 0 { Buf::Q } else { Buf::DO }, (i / 2) * 2 * BOX)
            }),
            (192, 128, 128, 0, PART, |i| match i {
                0 => (Buf::Q, 0),
                1 => (Buf::Pad, 0),
                _ => (Buf::DO, 0),
            }),
        ];
        for (d, dv, k1, v1, pad, dq_part) in configs {
            // Warpgroup w's columns: dK / dQ [k0, k0 + kn), dV [v0, v0 + vn).
            let share = |w: usize| {
                if w == 0 {
                    (0, k1, 0, v1)
                } else {
                    (k1, d - k1, v1, dv - v1)
                }
            };
            // The bytes of the slot a warpgroup's products read: dK reads Q's boxes of its
            // columns, dV dO's (dQ reads K, outside the slot).
            let reads = |w: usize| {
                let (k0, kn, v0, vn) = share(w);
                let q = (k0 / 64..(k0 + kn) / 64).map(|b| (Buf::Q, b * BOX, BOX));
                let o = (v0 / 64..(v0 + vn) / 64).map(|b| (Buf::DO, b * BOX, BOX));
                q.chain(o).collect::<Vec<_>>()
            };
            let size = |b: Buf| match b {
                Buf::Q => d / 64 * BOX,
                Buf::DO => dv / 64 * BOX,
                Buf::Pad => pad,
            };
            let overlaps = |(b1, o1, n1): (Buf, usize, usize),
                            (b2, o2, n2): (Buf, usize, usize)| {
                b1 == b2 && o1 < o2 + n2 && o2 < o1 + n1
            };
            let mut staged = Vec::new();
            for w in 0..2 {
                let (k0, kn, _, _) = share(w);
                for i in k0 / 64..(k0 + kn) / 64 {
                    let (b, o) = dq_part(i);
                    let region = (b, o, PART);
                    assert!(
                        o + PART <= size(b),
                        "D {d}/{dv}: part {i} past its buffer {b:?}"
                    );
                    for r in reads(1 - w) {
                        assert!(
                            !overlaps(region, r),
                            "D {d}/{dv}: part {i} over {r:?}, read by warpgroup {}",
                            1 - w
                        );
                    }
                    for &(j, other) in &staged {
                        assert!(
                            !overlaps(region, other),
                            "D {d}/{dv}: parts {i} and {j} overlap"
                        );
                    }
                    staged.push((i, region));
                }
            }
            let parts: Vec<usize> = staged.iter().map(|&(i, _)| i).collect();
            assert_eq!(
                parts,
                (0..d / 64).collect::<Vec<_>>(),
                "D {d}/{dv}: every part once"
            );
            assert_eq!(
                parts.len() * PART,
                4 * blob_stride_floats(d as i64) as usize
            );
        }
    }

    #[test]
    fn fused_tables_fit_the_launch_checks() {
        // RAGGED_BWD_FUSED_SMEM at D 128: the TMA dK/dV kernel's 166 448 bytes, 1024 of alignment,
        // the dS^T tile (16 KiB) and the step's dQ (32 KiB).
        let smem = 166_448 + 1024 + 16_384 + 32_768;
        let t = check_config("k", Part::Fused, [64, 128, 256, smem]).expect("fits");
        assert_eq!((t.block_m, t.block_n, t.threads), (64, 128, 256));
        // RAGGED_BWD_WS_SMEM at D 128.
        let ws = 1024 + 65_536 + 65_536 + 32_768 + 65_536 + 1024 + 32;
        let t = check_config("k", Part::Fused, [64, 128, 384, ws]).expect("fits");
        assert_eq!(t.threads, 384);
        // BwdWideD256::SMEM: K and V of 64 keys, two Q and two dO buffers, two pairs of P^T / dS^T
        // tiles, the LSE / Di rows and the ring's mbarriers; BwdWideD192V128 has two pads of 16 KiB.
        let wide = 1024 + 65_536 + 131_072 + 32_768 + 1024 + 32;
        let t = check_config("k", Part::Fused, [64, 64, 384, wide]).expect("fits");
        assert_eq!(t.block_n, 64);
        let wide_192 = 1024 + 40_960 + 81_920 + 32_768 + 32_768 + 1024 + 32;
        check_config("k", Part::Fused, [64, 64, 384, wide_192]).expect("fits");
        check_config("k", Part::Convert, [64, 0, 256, 0]).expect("fits");
        for (part, raw) in [
            (Part::Fused, [128, 128, 256, smem]),
            (Part::Fused, [64, 64, 128, smem]),
            (Part::Fused, [64, 32, 384, smem]),
            (Part::Fused, [64, 128, 512, smem]),
            (Part::Convert, [128, 0, 256, 0]),
        ] {
            let err = check_config("k", part, raw).unwrap_err().to_string();
            assert!(err.contains("kernel k violates"), "{raw:?}: {err}");
        }
    }
}

#[cfg(test)]
#[path = "dq_order_tests.rs"]
mod dq_order_tests;
