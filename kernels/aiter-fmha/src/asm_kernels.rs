//! Knowing, before `aiter::mha_fwd` is called, that it will not end the host process.
//!
//! AITER's `AITER_CHECK` calls `std::abort()` (it throws only when a thread-local flag inside
//! AITER is set, which nothing outside AITER can reach), and its asm path checks with it that
//! the `.co` file it loads from `$AITER_ASM_DIR/<arch>/…` opens. A C++ `catch` in the shim never
//! runs. So the engine asks the shim's preflight at applicability time, which names the kernel
//! AITER would pick with AITER's own table and rules and opens the file, and declines the
//! problem with the shim's reason when no kernel would run or the file cannot be read. The shim
//! repeats the file check before every forward call, so a file removed later is a status code.
//!
//! Top-left causal masks are kept off the asm path by [`check_applicability`]
//! (`use_asm_v3 = false`): with `seqlen_q == seqlen_k` and window `(-1, 0)` AITER's
//! `get_cfg_mask_type` maps `mask_type == 1` to its bottom-right causal kernel (pitfall 2; the
//! CI case `top_left_if_asm_were_on` in `kernels/aiter-fmha/shim/ci` shows it picking that kernel).
//!
//! [`check_applicability`]: super::applicability::check_applicability

use super::applicability::AiterPlan;
use super::mapping::{DeviceBuffers, shim_args};
use super::problem::AiterProblem;
use super::shim_abi::status_name;
use super::shim_library::ShimLibrary;
use ragged_core::contract::Decline;

/// The kernel AITER would run for `plan` on the calling thread's current device (`asm <kernel>
/// from <file>` or `ck`), or the decline that keeps the engine from calling AITER.
pub fn preflight(
    shim: &ShimLibrary,
    problem: &AiterProblem,
    plan: &AiterPlan,
) -> Result<String, Decline> {
    let args = shim_args(problem, plan, &DeviceBuffers::default(), 0, 0);
    shim.preflight(&args).map_err(|(status, message)| {
        Decline::graph(
            "AITER kernel",
            format!(
                "none would run here: {message} (shim preflight: {})",
                status_name(status)
            ),
            "one AITER can load without aborting the process (kernels/aiter-fmha/shim/README.md)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability::{GpuArch, check_applicability};
    use crate::fixtures::{base_problem, base_ragged, fake_rocm};
    use crate::shim_abi::{MASK_BOTTOM_RIGHT, MASK_TOP_LEFT};
    use crate::shim_library::ShimSearch;
    use ragged_core::{DiagonalAlignment, MaskBand};

    fn fake_shim() -> ShimLibrary {
        ShimLibrary::load(&ShimSearch {
            env_override: Some(fake_rocm().shim.clone()),
            plugin_dir: None,
        })
        .expect("fake shim")
    }

    fn causal(alignment: DiagonalAlignment) -> AiterProblem {
        AiterProblem {
            s_kv_max: base_problem().s_q_max,
            mask: MaskBand {
                left: None,
                right: Some(0),
                alignment,
            },
            ..base_problem()
        }
    }

    #[test]
    fn a_runnable_kernel_is_named() {
        let p = base_problem();
        let plan = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942").expect("taken");
        assert_eq!(
            preflight(&fake_shim(), &p, &plan).as_deref(),
            Ok("asm fake_kernel from /fake/hsa/gfx942/fake.co")
        );
    }

    #[test]
    fn an_unreadable_kernel_file_is_a_decline_with_the_shims_reason() {
        // The fake shim answers KERNEL_FILE_MISSING for batch 7, as the real one does when
        // $AITER_ASM_DIR is unset.
        let p = AiterProblem {
            batch: 7,
            ..base_problem()
        };
        let plan = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942").expect("taken");
        let decline = preflight(&fake_shim(), &p, &plan).expect_err("declined");
        assert_eq!(
            decline.to_string(),
            "AITER kernel = none would run here: AITER_ASM_DIR is unset; AITER would abort loading \
             gfx942/fake.co (shim preflight: RAGGED_AITER_KERNEL_FILE_MISSING), need one AITER can \
             load without aborting the process (kernels/aiter-fmha/shim/README.md)"
        );
    }

    #[test]
    fn no_kernel_on_any_path_is_a_decline() {
        // The fake shim answers UNSUPPORTED when use_asm_v3 is off (an asm-only build).
        let p = causal(DiagonalAlignment::TopLeft);
        let plan = check_applicability(&p, &GpuArch::new("gfx942"), "gfx942").expect("taken");
        let decline = preflight(&fake_shim(), &p, &plan).expect_err("declined");
        assert!(
            decline
                .to_string()
                .contains("no CK in this build (shim preflight: RAGGED_AITER_UNSUPPORTED)"),
            "{decline}"
        );
    }

    #[test]
    fn top_left_causal_reaches_aiter_with_asm_off_exactly_where_aiter_would_swap_the_mask() {
        // AITER's asm path treats mask_type 1 as bottom-right when seqlen_q == seqlen_k and the
        // window is (-1, 0): these are those arguments, so use_asm_v3 must be 0.
        let p = causal(DiagonalAlignment::TopLeft);
        let plan = check_applicability(&p, &GpuArch::new("gfx950"), "gfx950").expect("taken");
        let args = shim_args(&p, &plan, &DeviceBuffers::default(), 0, 0);
        assert_eq!(
            (
                args.mask_type,
                args.window_size_left,
                args.window_size_right,
                args.seqlen_q == args.seqlen_k,
                args.use_asm_v3
            ),
            (MASK_TOP_LEFT, -1, 0, true, 0)
        );
        let p = causal(DiagonalAlignment::BottomRight);
        let plan = check_applicability(&p, &GpuArch::new("gfx950"), "gfx950").expect("taken");
        let args = shim_args(&p, &plan, &DeviceBuffers::default(), 0, 0);
        assert_eq!((args.mask_type, args.use_asm_v3), (MASK_BOTTOM_RIGHT, 1));
    }

    #[test]
    fn the_engine_declines_at_applicability_what_the_preflight_refuses() {
        let f = fake_rocm();
        let engine = crate::detection::probe(&crate::ProbeConfig {
            hip_candidates: vec![f.hip.clone()],
            hiprtc_candidates: vec![f.hiprtc.clone()],
            shim: ShimSearch {
                env_override: Some(f.shim.clone()),
                plugin_dir: None,
            },
        })
        .engine()
        .expect("fakes are complete");
        assert!(engine.plan(&base_ragged(), 0).is_ok());
        // The fake shim's preflight refuses batch 7.
        let refused = engine
            .plan(
                &ragged_core::problem::test_support::packed(7, (8, 4), (16, 2), 128),
                0,
            )
            .expect_err("the preflight refuses batch 7");
        assert!(refused.field.contains("AITER kernel"), "{refused}");
    }
}
