//! The FP8 forward's launches (`cuda/fmha/fp8_sm90.cuh`, `fp8_vt.cuh`): the pre-pass, V
//! transposed into the workspace, the e4m3 forward, and the amax reduction when an amax is asked
//! for, in that order on the call's stream, with no host synchronisation unless validating.
//!
//! The e4m3 forward reads Q and K as rows of two-byte units (a row of D codes is D / 2 units), so
//! its strides and tensor maps are those of the plan halved; the pre-pass, which turns element
//! offsets into token starts, keeps the plan's element (byte) strides. V reaches the forward only
//! through the transposed copy's tensor map.

use cudarc::driver::sys::CUstream;

use super::device_abi::{self, FP8_AMAX_KERNEL, FP8_VT_KERNEL, FP8_VT_THREADS, Fp8OutputKind};
use super::fp8::Fp8Plan;
use super::geometry::LaunchGeometry;
use super::launcher::{
    ExecuteMode, FmhaBuffers, RequiredPointer, forward_args, prepass_args, run_prepass,
};
use super::loading::LoadedKernels;
use super::plan::{FmhaPlan, RowStrides};
use super::tensor_maps::{RowSwizzle, encode, encode_swizzled};
use ragged_core::problem::ScalePlan;
use ragged_gpu_runtime::cuda::error::{GpuError, TensorRole};
use ragged_gpu_runtime::cuda::module::{
    KernelArg, LaunchConfig, launch, launch_parts, launch_parts_programmatic,
};

/// The device pointers an FP8 execute needs besides the forward's: every scalar bound as a device
/// tensor and the amax outputs, each read or written as one f32.
pub(crate) fn fp8_required_pointers(fp8: &Fp8Plan, b: &FmhaBuffers) -> Vec<RequiredPointer> {
    let mut required: Vec<RequiredPointer> = fp8
        .scalars
        .iter()
        .zip(b.fp8_scalars)
        .filter_map(|(scalar, address)| match scalar {
            Some(ScalePlan::DeviceTensor { uid, .. }) => {
                Some((address, *uid, TensorRole::Fp8Scalar, 4))
            }
            _ => None,
        })
        .collect();
    for (uid, address) in [(fp8.amax_o, b.amax_o), (fp8.amax_s, b.amax_s)] {
        if let Some(uid) = uid {
            required.push((address, uid, TensorRole::Amax, 4));
        }
    }
    required
}

/// The plan as the e4m3 forward indexes its tensors: Q's and K's strides (and an e4m3 O's) in
/// two-byte units. Packed rows of 128 codes make every such stride even.
pub(crate) fn two_byte_view(plan: &FmhaPlan, fp8: &Fp8Plan) -> FmhaPlan {
    let half = |r: RowStrides| RowStrides {
        seq: r.seq / 2,
        head: r.head / 2,
    };
    let o_fp8 = fp8.output == Fp8OutputKind::E4m3;
    FmhaPlan {
        q: half(plan.q),
        k: half(plan.k),
        o: if o_fp8 { half(plan.o) } else { plan.o },
        ..plan.clone()
    }
}

/// The swizzle of the transposed V's tiles, whose rows are `vt_keys` bytes (the plan's), checked
/// against the entry point's published BN (`block_n`): the forward reads one tile per key block, so
/// a module whose BN differs from the plan's blocks would read the wrong keys. A block of 128 keys
/// is one box of 128-byte swizzle rows; blocks of 64 or 192 keys are boxes of 64 keys with the
/// 64-byte swizzle (one or three per block, `fp8_fill_vt`), since a swizzled box row is at most
/// 128 bytes.
pub(crate) fn vt_swizzle(kernel: &str, vt_keys: i64, block_n: i32) -> Result<RowSwizzle, GpuError> {
    let swizzle = match vt_keys {
        64 | 192 => RowSwizzle::Bytes64,
        128 => RowSwizzle::Bytes128,
        _ => {
            return Err(GpuError::KernelContract {
                kernel: kernel.to_owned(),
                detail: format!("transposed V blocks of {vt_keys} keys (64, 128 or 192)"),
            });
        }
    };
    if i64::from(block_n) != vt_keys {
        return Err(GpuError::KernelContract {
            kernel: kernel.to_owned(),
            detail: format!(
                "block_n {block_n}, but the plan's transposed V blocks hold {vt_keys} keys"
            ),
        });
    }
    Ok(swizzle)
}

/// `RAGGED_FP8_PARAMS`, in signature order.
fn fp8_args(plan: &FmhaPlan, fp8: &Fp8Plan, b: &FmhaBuffers, workspace: u64) -> Vec<KernelArg> {
    use KernelArg::{F32, I32, Ptr};
    let mut args = Vec::with_capacity(17);
    for (address, value) in b.fp8_scalars.iter().zip(fp8.values) {
        args.push(Ptr(*address));
        args.push(F32(value));
    }
    args.extend([
        I32(fp8.output as i32),
        I32(i32::from(fp8.p_scaled)),
        I32(fp8.vt_blocks),
        I32(plan.batch),
        Ptr(fp8.workspace.amax.map_or(0, |offset| workspace + offset)),
    ]);
    args
}

/// Enqueues the FP8 forward of `plan` (whose FP8 side is `fp8`) on `stream`; `workspace` is the
/// aligned-up workspace base.
///
/// # Safety
/// As [`super::FmhaEngine::execute`]: every address in `b` is device memory of the stream's
/// context holding what the plan describes (the FP8 scalars and amax_o included, checked non-null
/// and aligned by `check_buffers`), the workspace holds `plan.workspace_bytes()` bytes, the
/// module's context is current and `stream` live or null.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn execute_fp8(
    plan: &FmhaPlan,
    fp8: &Fp8Plan,
    loaded: &LoadedKernels,
    geometry: &LaunchGeometry,
    stream: CUstream,
    b: &FmhaBuffers,
    mode: ExecuteMode,
    workspace: u64,
) -> Result<(), GpuError> {
    let name = plan.kernel.name();
    let prepass = prepass_args(plan, geometry, b, workspace);
    // SAFETY: the pre-pass's arguments mirror its signature over the checked workspace (this
    // function's contract); programmatic only where the module allows it.
    unsafe {
        run_prepass(
            loaded,
            stream,
            &prepass,
            mode,
            workspace + geometry.workspace.error_flag,
            plan,
        )
    }?;

    // V transposed: grid (key blocks, B, H_kv); blocks past a batch's keys leave at once.
    let vt = workspace + fp8.workspace.vt;
    let d = plan.kernel.d_v();
    let transpose = loaded.module.function(FP8_VT_KERNEL, 0)?;
    let unsigned = |v: i32| u32::try_from(v).unwrap_or(0);
    let vt_grid = (
        unsigned(fp8.vt_blocks),
        unsigned(plan.batch),
        unsigned(plan.heads_kv),
    );
    {
        use KernelArg::{I32, I64, Ptr};
        let args = [
            Ptr(b.v),
            I64(plan.v.seq),
            I64(plan.v.head),
            Ptr(workspace + geometry.workspace.batches),
            Ptr(vt),
            I32(plan.batch),
            I32(plan.heads_kv),
            I32(fp8.vt_blocks),
            I32(d as i32),
            I32(fp8.vt_keys as i32),
        ];
        let config = LaunchConfig {
            grid: vt_grid,
            block: (FP8_VT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments mirror `ragged_fmha_fp8_vt`; V is the caller's (contract), the
        // batch records are the pre-pass's, enqueued before on this stream (a plain launch waits
        // for it; a programmatic one, where the module allows it, is scheduled during the
        // pre-pass, whose `griddepcontrol.launch_dependents` comes first, and the transposition
        // reads and writes nothing before its `griddepcontrol.wait`, which returns once the
        // pre-pass, and so everything enqueued before it, has completed), and the transposed
        // region lies inside the checked workspace (the plan sized it for these blocks).
        unsafe {
            if loaded.grid_dependency() {
                launch_parts_programmatic(transpose, config, stream, &[&args])
            } else {
                launch(transpose, config, stream, &args)
            }
        }?;
    }

    // The forward over the two-byte view, with the transposed V's map in V's place.
    let view = two_byte_view(plan, fp8);
    let tiles = geometry.tiles;
    let rows = |v: i32| u32::try_from(v).unwrap_or(0);
    let swizzle = vt_swizzle(name, fp8.vt_keys, tiles.block_n)?;
    let blocks = plan.heads_kv * plan.batch * fp8.vt_blocks;
    let plane = i64::from(blocks) * fp8.vt_keys;
    let maps = [
        KernelArg::TensorMap(encode(
            name,
            b.q,
            plan.kernel.d_qk() / 2,
            plan.heads_q,
            view.q,
            rows(tiles.block_m),
        )?),
        KernelArg::TensorMap(encode(
            name,
            b.k,
            plan.kernel.d_qk() / 2,
            plan.heads_kv,
            view.k,
            rows(tiles.block_n),
        )?),
        KernelArg::TensorMap(encode_swizzled(
            name,
            vt,
            fp8.vt_keys / 2,
            blocks,
            RowStrides {
                seq: plane / 2,
                head: fp8.vt_keys / 2,
            },
            u32::try_from(d).unwrap_or(0),
            swizzle,
        )?),
    ];
    let args = forward_args(&view, geometry, b, workspace);
    let nonce = [KernelArg::I64(0)];
    let extra = fp8_args(plan, fp8, b, workspace);
    let parts: [&[KernelArg]; 5] = [&args, &maps, &prepass, &nonce, &extra];
    let forward = loaded.module.function(name, tiles.shared_mem_bytes)?;
    let config = LaunchConfig {
        grid: (geometry.grid_blocks, 1, 1),
        block: (tiles.threads, 1, 1),
        shared_mem_bytes: tiles.shared_mem_bytes,
    };
    // SAFETY: the argument list mirrors RAGGED_FMHA_SM90_FP8_ENTRY (the common parameters over the
    // two-byte view, the maps of Q, K and the transposed V, the pre-pass's parameters, nonce 0,
    // RAGGED_FP8_PARAMS); the pre-pass and the transposition enqueued before on this stream fill
    // the workspace (a programmatic launch waits for the previous grid, the transposition, before
    // its first read, and the transposition read and wrote nothing before the pre-pass
    // completed); block size and shared memory are the entry point's published values.
    unsafe {
        if loaded.grid_dependency() {
            launch_parts_programmatic(forward, config, stream, &parts)
        } else {
            launch_parts(forward, config, stream, &parts)
        }
    }?;

    if let Some(offset) = fp8.workspace.amax {
        let reduce = loaded.module.function(FP8_AMAX_KERNEL, 0)?;
        let config = LaunchConfig {
            grid: (1, 1, 1),
            block: (device_abi::FP8_AMAX_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let grid = i32::try_from(geometry.grid_blocks).unwrap_or(i32::MAX);
        let args = [
            KernelArg::Ptr(workspace + offset),
            KernelArg::I32(grid),
            KernelArg::Ptr(fp8.amax_o.map_or(0, |_| b.amax_o)),
            KernelArg::Ptr(fp8.amax_s.map_or(0, |_| b.amax_s)),
        ];
        // SAFETY: the arguments mirror `ragged_fmha_fp8_amax`; the partials lie in the checked
        // workspace and were written by the forward just enqueued (a plain launch waits for it);
        // each amax output is the caller's one-float output (checked non-null and aligned) or
        // null where the plan has none.
        unsafe { launch(reduce, config, stream, &args) }?;
    }
    Ok(())
}
