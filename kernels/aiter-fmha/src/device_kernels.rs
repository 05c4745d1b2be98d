//! The engine's own device kernels (`kernels/aiter-fmha/hip/*.cu`) and their launch arguments.
//!
//! The sources are embedded and compiled by hipRTC for the device's `gcnArchName` at first
//! use. They are written in the subset HIP and CUDA share, which is how they were checked on an
//! NVIDIA GPU through NVRTC (`bench/aiter/check_device_kernels.py`) without AMD hardware.
//! Launch arguments are built here as named, typed values; a test holds them against the
//! parameter lists in the sources, so the two cannot drift apart silently.

use super::mapping::{DeviceBuffers, region_address};
use super::problem::{AiterProblem, LseLayout, RaggedAux};
use super::workspace::WorkspacePlan;
use ragged_core::DiagonalAlignment;
pub use ragged_gpu_runtime::launch::{KernelArg, LaunchConfig};

/// Source of the pre-pass (token starts, logical lengths, precondition bits).
pub const PREPASS_SOURCE: &str = include_str!("../hip/ragged_aiter_prepass.cu");
/// Source of the fix-up (LSE scatter, O = 0 / LSE = −∞ for rows without keys).
pub const FIXUP_SOURCE: &str = include_str!("../hip/ragged_aiter_fixup.cu");
/// Entry point of [`PREPASS_SOURCE`].
pub const PREPASS_KERNEL: &str = "ragged_aiter_prepass";
/// Entry point of [`FIXUP_SOURCE`].
pub const FIXUP_KERNEL: &str = "ragged_aiter_fixup";
/// `RAGGED_PREPASS_THREADS`: the pre-pass runs as exactly one block of this many threads.
pub const PREPASS_THREADS: u32 = 256;
/// Threads per fix-up block.
pub const FIXUP_THREADS: u32 = 256;
/// Cap on fix-up blocks; the kernel loops over the rest (grid-stride).
pub const FIXUP_MAX_BLOCKS: u32 = 65_535;

/// Bits the pre-pass ORs into the workspace status word (`RAGGED_STATUS_*`).
pub const STATUS_BITS: [(u32, &str); 6] = [
    (1, "offset[0] != 0"),
    (2, "offsets decrease (or are negative)"),
    (4, "an offset is not a whole number of rows"),
    (8, "an extent exceeds S_max"),
    (16, "an element or token offset overflows"),
    (32, "a seq_len was clamped into [0, extent]"),
];

/// Human reading of a status word, for debug logs and conformance failures.
pub fn describe_status(status: u32) -> Vec<&'static str> {
    STATUS_BITS
        .iter()
        .filter(|(bit, _)| status & bit != 0)
        .map(|(_, what)| *what)
        .collect()
}

/// A kernel launch: its shape and arguments in parameter order, each with its source name.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The entry point.
    pub kernel: &'static str,
    /// Grid and block (both 1-D), no dynamic shared memory.
    pub config: LaunchConfig,
    /// Arguments in parameter order.
    pub args: Vec<(&'static str, KernelArg)>,
}

impl Launch {
    /// The argument values in parameter order, as the launch call takes them.
    pub fn values(&self) -> Vec<KernelArg> {
        self.args.iter().map(|(_, arg)| *arg).collect()
    }
}

/// Blocks of `threads` covering `items` (the kernels loop over what does not fit): at least
/// one, at most `max_blocks`.
pub(super) fn linear_blocks(items: i64, threads: u32, max_blocks: u32) -> u32 {
    let threads = i64::from(threads);
    u32::try_from(items.saturating_add(threads - 1) / threads)
        .unwrap_or(max_blocks)
        .clamp(1, max_blocks)
}

/// The stats tensor as the kernels that read or write it take it: layout code (0 none,
/// 1 dense, 2 ragged), the dense `[B, H, S]` strides, and for ragged stats its offsets with
/// its sequence and head strides.
pub(super) fn stats_layout(lse: &LseLayout) -> (i32, [i64; 3], Option<(RaggedAux, i64, i64)>) {
    match *lse {
        LseLayout::None => (0, [0, 0, 0], None),
        LseLayout::Dense { strides, .. } => (1, [strides[0], strides[1], strides[2]], None),
        LseLayout::Ragged {
            seq_stride,
            head_stride,
            aux,
            ..
        } => (2, [0, 0, 0], Some((aux, seq_stride, head_stride))),
    }
}

/// The trailing arguments of a kernel that writes the graph's LSE (the forward's fix-up, the
/// serving route's finish): its pointer (named `pointer`; null without an LSE), layout code, dense
/// strides and, for a ragged LSE, its offsets, their width and multiplier, and its sequence and
/// head strides.
pub(super) fn lse_output_args(
    pointer: &'static str,
    lse: &LseLayout,
    buffers: &DeviceBuffers,
) -> [(&'static str, KernelArg); 10] {
    use KernelArg::{I32, I64};
    let (layout, strides, aux) = stats_layout(lse);
    [
        (
            pointer,
            KernelArg::ptr(if layout == 0 { 0 } else { buffers.lse }),
        ),
        ("lse_layout", I32(layout)),
        ("lse_stride_b", I64(strides[0])),
        ("lse_stride_h", I64(strides[1])),
        ("lse_stride_s", I64(strides[2])),
        (
            "lse_offsets",
            KernelArg::ptr(if aux.is_some() {
                buffers.lse_offsets
            } else {
                0
            }),
        ),
        (
            "lse_offset_width",
            I32(aux.map_or(0, |(a, _, _)| a.width.bytes())),
        ),
        (
            "lse_multiplier",
            I64(aux.map_or(1, |(a, _, _)| a.multiplier)),
        ),
        ("lse_seq_stride", I64(aux.map_or(0, |(_, s, _)| s))),
        ("lse_head_stride", I64(aux.map_or(0, |(_, _, h)| h))),
    ]
}

/// Pre-pass launch for one execution.
pub fn prepass_launch(
    problem: &AiterProblem,
    plan: &WorkspacePlan,
    buffers: &DeviceBuffers,
    aligned_workspace: usize,
) -> Launch {
    use KernelArg::{I32, I64};
    let ptr = KernelArg::ptr;
    let at = |r| region_address(aligned_workspace, r);
    let (q, k) = (&problem.q, &problem.k);
    Launch {
        kernel: PREPASS_KERNEL,
        config: LaunchConfig::linear(1, PREPASS_THREADS),
        args: vec![
            ("q_offsets", ptr(buffers.q_offsets)),
            ("q_offset_width", I32(q.aux.width.bytes())),
            ("q_multiplier", I64(q.aux.multiplier)),
            ("q_seq_stride", I64(q.seq_stride)),
            ("q_s_max", I64(problem.s_q_max)),
            ("k_offsets", ptr(buffers.k_offsets)),
            ("k_offset_width", I32(k.aux.width.bytes())),
            ("k_multiplier", I64(k.aux.multiplier)),
            ("k_seq_stride", I64(k.seq_stride)),
            ("k_s_max", I64(problem.s_kv_max)),
            ("seq_len_q", ptr(buffers.seq_len_q)),
            (
                "seq_len_q_width",
                I32(problem.seq_len_q.map_or(0, |s| s.width.bytes())),
            ),
            ("seq_len_kv", ptr(buffers.seq_len_kv)),
            (
                "seq_len_kv_width",
                I32(problem.seq_len_kv.map_or(0, |s| s.width.bytes())),
            ),
            ("batch", I32(i32::try_from(problem.batch).unwrap_or(0))),
            ("seqstart_q", ptr(at(plan.seqstart_q))),
            ("seqstart_k", ptr(at(plan.seqstart_k))),
            ("len_q", ptr(at(plan.len_q))),
            ("len_kv", ptr(at(plan.len_kv))),
            ("cu_seqlen_q", ptr(plan.cu_seqlen_q.map_or(0, at))),
            ("cu_seqlen_k", ptr(plan.cu_seqlen_k.map_or(0, at))),
            ("status", ptr(at(plan.status))),
        ],
    }
}

/// Fix-up launch for one execution. It runs even without stats: rows with no admitted key
/// still need O = 0.
pub fn fixup_launch(
    problem: &AiterProblem,
    plan: &WorkspacePlan,
    buffers: &DeviceBuffers,
    aligned_workspace: usize,
) -> Launch {
    use KernelArg::{I32, I64};
    let ptr = KernelArg::ptr;
    let at = |r| region_address(aligned_workspace, r);
    let rows = problem
        .batch
        .saturating_mul(problem.s_q_max)
        .saturating_mul(problem.q.heads);
    let blocks = linear_blocks(rows, FIXUP_THREADS, FIXUP_MAX_BLOCKS);
    let to_i32 = |v: i64| I32(i32::try_from(v).unwrap_or(0));
    Launch {
        kernel: FIXUP_KERNEL,
        config: LaunchConfig::linear(blocks, FIXUP_THREADS),
        args: vec![
            ("seqstart_q", ptr(at(plan.seqstart_q))),
            ("len_q", ptr(at(plan.len_q))),
            ("len_kv", ptr(at(plan.len_kv))),
            ("batch", to_i32(problem.batch)),
            ("s_q_max", to_i32(problem.s_q_max)),
            ("heads_q", to_i32(problem.q.heads)),
            ("mask_left", I64(problem.mask.left.unwrap_or(-1))),
            ("mask_right", I64(problem.mask.right.unwrap_or(-1))),
            (
                "mask_bottom_right",
                I32(i32::from(
                    problem.mask.alignment == DiagonalAlignment::BottomRight,
                )),
            ),
            ("o_ptr", ptr(buffers.o)),
            ("o_elem_bytes", to_i32(problem.o_dtype.size() as i64)),
            ("o_seq_stride", I64(problem.o.seq_stride)),
            ("o_head_stride", I64(problem.o.head_stride)),
            ("d_v", to_i32(problem.o.head_dim)),
            ("lse_scratch", ptr(plan.lse_scratch.map_or(0, at))),
            (
                "scratch_head_stride",
                I64(WorkspacePlan::scratch_head_stride(problem)),
            ),
        ]
        .into_iter()
        .chain(lse_output_args("lse_out", &problem.lse, buffers))
        .collect(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::{self, base_problem};
    use crate::problem::{IndexWidth, RaggedAux, SeqLens};
    use ragged_core::MaskBand;

    /// `(name, kind)` of every parameter of `kernel` in `source`, kind being "ptr", "int" or
    /// "long long"; comments are stripped first.
    pub(crate) fn parameters(source: &str, kernel: &str) -> Vec<(String, &'static str)> {
        let code: String = source
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let start = code
            .find(&format!("__global__ void {kernel}("))
            .expect("kernel in source");
        let open = start + code[start..].find('(').expect("(");
        let close = open + code[open..].find(')').expect(")");
        code[open + 1..close]
            .split(',')
            .map(|p| {
                let p = p.trim();
                let name = p
                    .rsplit(|c: char| c.is_whitespace() || c == '*')
                    .next()
                    .expect("name")
                    .to_owned();
                let kind = if p.contains('*') {
                    "ptr"
                } else if p.starts_with("long long") {
                    "long long"
                } else if p.starts_with("int") {
                    "int"
                } else {
                    panic!("unexpected parameter type in `{p}`")
                };
                (name, kind)
            })
            .collect()
    }

    pub(crate) fn signature(launch: &Launch) -> Vec<(String, &'static str)> {
        launch
            .args
            .iter()
            .map(|(name, arg)| ((*name).to_owned(), arg.c_type()))
            .collect()
    }

    fn stats_problem() -> AiterProblem {
        AiterProblem {
            seq_len_q: Some(SeqLens {
                uid: 30,
                width: IndexWidth::I64,
            }),
            lse: LseLayout::Ragged {
                uid: 9,
                seq_stride: 4,
                head_stride: 1,
                aux: RaggedAux {
                    uid: 22,
                    width: IndexWidth::I64,
                    multiplier: 4,
                },
                alignment: 16,
            },
            mask: MaskBand {
                left: Some(2),
                right: Some(0),
                alignment: DiagonalAlignment::BottomRight,
            },
            ..base_problem()
        }
    }

    fn buffers() -> DeviceBuffers {
        DeviceBuffers {
            seq_len_kv: 0,
            ..fixtures::buffers()
        }
    }

    #[test]
    fn launch_arguments_follow_the_kernel_sources() {
        let p = stats_problem();
        let plan = WorkspacePlan::for_problem(&p);
        let pre = prepass_launch(&p, &plan, &buffers(), 0x10000);
        assert_eq!(signature(&pre), parameters(PREPASS_SOURCE, PREPASS_KERNEL));
        let fix = fixup_launch(&p, &plan, &buffers(), 0x10000);
        assert_eq!(signature(&fix), parameters(FIXUP_SOURCE, FIXUP_KERNEL));
    }

    #[test]
    fn the_prepass_block_size_is_the_one_the_source_scans_with() {
        assert!(
            PREPASS_SOURCE.contains(&format!("#define RAGGED_PREPASS_THREADS {PREPASS_THREADS}"))
        );
    }

    fn arg(launch: &Launch, name: &str) -> KernelArg {
        launch
            .args
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no argument {name}"))
    }

    /// Every `(name, value)` pair is an argument of `launch`.
    fn assert_args(launch: &Launch, expected: &[(&str, KernelArg)]) {
        for (name, value) in expected {
            assert_eq!(arg(launch, name), *value, "argument {name}");
        }
    }

    #[test]
    fn prepass_arguments() {
        let p = stats_problem();
        let plan = WorkspacePlan::for_problem(&p);
        let pre = prepass_launch(&p, &plan, &buffers(), 0x10000);
        assert_eq!((pre.config.grid.0, pre.config.block.0), (1, 256));
        assert_args(
            &pre,
            &[
                ("q_offsets", KernelArg::Ptr(0x5000)),
                ("q_offset_width", KernelArg::I32(4)),
                ("q_seq_stride", KernelArg::I64(512)),
                ("k_seq_stride", KernelArg::I64(256)),
                ("k_s_max", KernelArg::I64(16)),
                ("seq_len_q_width", KernelArg::I32(8)),
                ("seq_len_kv_width", KernelArg::I32(0)),
                ("batch", KernelArg::I32(2)),
                // seqstart_q @0, seqstart_k @256, len_q @512, len_kv @768, cu_q @1024, status @1280
                ("seqstart_k", KernelArg::Ptr(0x10100)),
                ("cu_seqlen_q", KernelArg::Ptr(0x10400)),
                ("cu_seqlen_k", KernelArg::Ptr(0)),
                ("status", KernelArg::Ptr(0x10500)),
            ],
        );
    }

    #[test]
    fn fixup_arguments_for_ragged_stats_and_a_bottom_right_window() {
        let p = stats_problem();
        let plan = WorkspacePlan::for_problem(&p);
        let fix = fixup_launch(&p, &plan, &buffers(), 0x10000);
        assert_eq!((fix.config.grid.0, fix.config.block.0), (1, 256));
        assert_args(
            &fix,
            &[
                ("mask_left", KernelArg::I64(2)),
                ("mask_right", KernelArg::I64(0)),
                ("mask_bottom_right", KernelArg::I32(1)),
                ("o_elem_bytes", KernelArg::I32(2)),
                ("d_v", KernelArg::I32(128)),
                ("lse_scratch", KernelArg::Ptr(0x10600)),
                ("scratch_head_stride", KernelArg::I64(16)),
                ("lse_layout", KernelArg::I32(2)),
                ("lse_offsets", KernelArg::Ptr(0xa000)),
                ("lse_offset_width", KernelArg::I32(8)),
                ("lse_multiplier", KernelArg::I64(4)),
                ("lse_seq_stride", KernelArg::I64(4)),
                ("lse_head_stride", KernelArg::I64(1)),
            ],
        );
    }

    /// An FP8 forward's O is bf16: the fix-up zeroes 2-byte elements, not Q's 1-byte ones.
    #[test]
    fn the_fixup_writes_o_in_os_element_size() {
        let p = crate::fixtures::fp8_problem();
        let plan = WorkspacePlan::for_problem(&p);
        let fix = fixup_launch(&p, &plan, &buffers(), 0x10000);
        assert_args(&fix, &[("o_elem_bytes", KernelArg::I32(2))]);
    }

    #[test]
    fn fixup_without_stats_still_runs_for_empty_rows_and_writes_no_lse() {
        let p = AiterProblem {
            batch: 1000,
            s_q_max: 100,
            ..base_problem()
        };
        let plan = WorkspacePlan::for_problem(&p);
        let fix = fixup_launch(&p, &plan, &buffers(), 0x10000);
        // 1000 · 100 · 4 rows / 256 = 1562.5 → 1563 blocks
        assert_eq!(fix.config.grid.0, 1563);
        assert_args(
            &fix,
            &[
                ("lse_layout", KernelArg::I32(0)),
                ("lse_out", KernelArg::Ptr(0)),
                ("lse_scratch", KernelArg::Ptr(0)),
                ("mask_left", KernelArg::I64(-1)),
                ("mask_right", KernelArg::I64(-1)),
            ],
        );
        let huge = AiterProblem {
            batch: 1 << 20,
            s_q_max: 1 << 10,
            ..base_problem()
        };
        assert_eq!(
            fixup_launch(&huge, &plan, &buffers(), 0).config.grid.0,
            FIXUP_MAX_BLOCKS
        );
    }

    #[test]
    fn status_bits_match_the_source_and_read_as_text() {
        for (bit, _) in STATUS_BITS {
            assert!(
                PREPASS_SOURCE.contains(&format!(" {bit}u\n")),
                "bit {bit} defined in the source"
            );
        }
        assert_eq!(
            describe_status(1 | 32),
            ["offset[0] != 0", "a seq_len was clamped into [0, extent]"]
        );
        assert!(describe_status(0).is_empty());
    }
}
