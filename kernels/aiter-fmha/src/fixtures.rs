//! Test fixtures: a reference problem, and fake ROCm libraries compiled with the system C
//! compiler so that loading, detection and the execute sequence run through real `dlopen` and
//! FFI calls on machines without ROCm.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::mapping::DeviceBuffers;
use super::problem::{AiterProblem, IndexWidth, LseLayout, RaggedAux, RaggedOperand};
use super::shim_abi::{HEADER, SHIM_ABI_VERSION};
use ragged_core::problem::RaggedSdpaProblem;
use ragged_core::problem::test_support::packed;
use ragged_core::problem::{Fp8Forward, Fp8OutputPlan, Fp8Scalar, ScalarType, ScalePlan};
use ragged_core::{DataType, Fp8Format, MaskBand};
use ragged_gpu_runtime::hip::compile_fake_library;

/// Distinct, recognisable fake device addresses for every buffer; tests clear the optional ones
/// their problem does not bind with struct-update syntax.
pub(crate) fn buffers() -> DeviceBuffers {
    DeviceBuffers {
        q: 0x1000,
        k: 0x2000,
        v: 0x3000,
        o: 0x4000,
        q_offsets: 0x5000,
        k_offsets: 0x6000,
        seq_len_q: 0x7000,
        seq_len_kv: 0x8000,
        lse: 0x9000,
        lse_offsets: 0xa000,
        workspace: 0x10000,
        q_descale: 0xf100,
        k_descale: 0xf200,
        v_descale: 0xf300,
    }
}

/// A packed ragged operand `[B, S, heads, head_dim]` on offset tensor `aux_uid` (int32, ×1).
pub(crate) fn operand(uid: i64, heads: i64, head_dim: i64, aux_uid: i64) -> RaggedOperand {
    RaggedOperand {
        uid,
        heads,
        head_dim,
        seq_stride: heads * head_dim,
        head_stride: head_dim,
        dim_stride: 1,
        aux: RaggedAux {
            uid: aux_uid,
            width: IndexWidth::I32,
            multiplier: 1,
        },
        alignment: 16,
    }
}

/// bf16, B = 2, H_q = 4, H_kv = 2, D = 128, S_q_max = 8, S_kv_max = 16, no mask, no stats.
pub(crate) fn base_problem() -> AiterProblem {
    AiterProblem {
        dtype: DataType::BF16,
        o_dtype: DataType::BF16,
        batch: 2,
        s_q_max: 8,
        s_kv_max: 16,
        packed_q_rows: None,
        q: operand(1, 4, 128, 10),
        k: operand(2, 2, 128, 11),
        v: operand(3, 2, 128, 11),
        o: operand(4, 4, 128, 10),
        seq_len_q: None,
        seq_len_kv: None,
        mask: MaskBand::none(),
        scale: 0.125,
        lse: LseLayout::None,
        fp8: None,
    }
}

/// [`base_problem`] with e4m3fnuz Q, K, V (gfx942's FP8), a bf16 O and device descales uids
/// 40, 41, 42: what AITER's gfx942 `fp8bf16` kernel takes.
pub(crate) fn fp8_problem() -> AiterProblem {
    let device = |role, uid| Fp8Scalar {
        role,
        plan: ScalePlan::DeviceTensor {
            uid,
            data_type: ScalarType::Float,
        },
    };
    AiterProblem {
        dtype: DataType::Fp8(Fp8Format::E4M3Fnuz),
        fp8: Some(Fp8Forward {
            input: Fp8Format::E4M3Fnuz,
            descale_q: device("descale_q_tensor_uid", 40),
            descale_k: device("descale_k_tensor_uid", 41),
            descale_v: device("descale_v_tensor_uid", 42),
            softmax: None,
            output: Fp8OutputPlan::Wide,
            amax_s: None,
            amax_o: None,
        }),
        ..base_problem()
    }
}

/// [`base_problem`] as the plugin would describe the graph: packed ragged BSHD, int32 offsets ×1.
pub(crate) fn base_ragged() -> RaggedSdpaProblem {
    packed(2, (8, 4), (16, 2), 128)
}

const FAKE_HIP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
static char log_buf[16384];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static void say(const char* s) {
  pthread_mutex_lock(&log_lock);
  strncat(log_buf, s, sizeof(log_buf) - strlen(log_buf) - 1);
  pthread_mutex_unlock(&log_lock);
}
const char* fake_hip_log(void) { return log_buf; }
int hipInit(unsigned f) { (void)f; return 0; }
int hipGetDeviceCount(int* n) { *n = FAKE_DEVICES; return FAKE_DEVICES ? 0 : 100; }
int hipGetDevice(int* d) { *d = 0; return 0; }
int hipRuntimeGetVersion(int* v) { *v = FAKE_VERSION; return 0; }
int hipGetDevicePropertiesR0600(void* p, int d) {
  memset(p, 0, 1472);
  strcpy((char*)p, "AMD Instinct MI300X");
  strcpy((char*)p + 1160, d == 0 ? "gfx942:sramecc+:xnack-" : "gfx950");
  return 0;
}
const char* hipGetErrorString(int e) { return e ? "fake error" : "hipSuccess"; }
int hipModuleLoadData(void** m, const void* code) {
  if (memcmp(code, "FAKE", 4) != 0) return 200;
  *m = malloc(1); say("load;"); return 0;
}
int hipModuleUnload(void* m) { free(m); return 0; }
int hipModuleGetFunction(void** f, void* m, const char* name) { (void)m; *f = strdup(name); return 0; }
int hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shm, void* stream, void** params, void** extra) {
  char line[256];
  snprintf(line, sizeof line, "launch %s grid=%u,%u,%u block=%u,%u,%u shm=%u stream=%p arg0=%#llx extra=%p;",
           (const char*)f, gx, gy, gz, bx, by, bz, shm, stream,
           *(unsigned long long*)params[0], (void*)extra);
  say(line); return 0;
}
int hipMemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  char line[128];
  snprintf(line, sizeof line, "memset %p value=%d bytes=%zu stream=%p;", dst, value, bytes, stream);
  say(line); return 0;
}
"#;

const FAKE_HIPRTC: &str = r#"
#include <string.h>
int hiprtcCreateProgram(void** p, const char* src, const char* name, int n, const char** h, const char** hn) {
  (void)src; (void)h; (void)hn; *p = (void*)name; return n == 0 ? 0 : 3;
}
static int ok_options;
int hiprtcCompileProgram(void* p, int n, const char** opts) {
  (void)p; ok_options = n == 2 && strcmp(opts[0], "--offload-arch=gfx942:sramecc+:xnack-") == 0;
  return ok_options ? 0 : 6;
}
int hiprtcGetProgramLogSize(void* p, size_t* n) { (void)p; *n = 12; return 0; }
int hiprtcGetProgramLog(void* p, char* log) { (void)p; memcpy(log, "bad options", 12); return 0; }
int hiprtcGetCodeSize(void* p, size_t* n) { (void)p; *n = 4; return 0; }
int hiprtcGetCode(void* p, char* code) { (void)p; memcpy(code, "FAKE", 4); return 0; }
int hiprtcDestroyProgram(void** p) { *p = 0; return 0; }
"#;

const FAKE_SHIM: &str = r#"
#include <stdio.h>
#include "ragged_aiter_shim.h"
static _Thread_local char last[1024];
static _Thread_local char args_text[1024];
uint32_t ragged_aiter_shim_abi_version(void) { return FAKE_ABI; }
const char* ragged_aiter_shim_gpu_targets(void) { return "gfx942;gfx950"; }
const char* ragged_aiter_shim_last_error(void) { return last; }
const char* fake_shim_last_args(void) { return args_text; }
int32_t ragged_aiter_mha_fwd(const ragged_aiter_fwd_args* a) {
  if (a->struct_size != sizeof(*a)) {
    snprintf(last, sizeof last, "struct_size %u != %zu", a->struct_size, sizeof(*a));
    return RAGGED_AITER_BAD_ARGS;
  }
  snprintf(args_text, sizeof args_text,
    "dtype=%d batch=%d max_seqlen_q=%d seqlen_q=%d seqlen_k=%d hdim=%d/%d nhead=%d/%d "
    "stride=%d/%d/%d/%d nhead_stride=%d/%d/%d/%d/%d mask=%d,%d,%d scale=%g lse=%d asm=%d check=%d "
    "q=%p o=%p lse_ptr=%p seqstart=%p/%p cu=%p/%p stream=%p cvt=%d qscale=%d descale=%p/%p/%p",
    a->data_type, a->batch, a->max_seqlen_q, a->seqlen_q, a->seqlen_k, a->hdim_q, a->hdim_v,
    a->nhead_q, a->nhead_k, a->stride_q, a->stride_k, a->stride_v, a->stride_o,
    a->nhead_stride_q, a->nhead_stride_k, a->nhead_stride_v, a->nhead_stride_o, a->nhead_stride_lse,
    a->mask_type, a->window_size_left, a->window_size_right, (double)a->scale_s, a->has_lse,
    a->use_asm_v3, a->v3_api_check, a->q_ptr, a->o_ptr, a->lse_ptr,
    (const void*)a->seqstart_q_ptr, (const void*)a->seqstart_k_ptr,
    (const void*)a->cu_seqlen_q_ptr, (const void*)a->cu_seqlen_k_ptr, a->stream,
    a->how_v3_bf16_cvt, a->qscale_type, (const void*)a->q_descale_ptr,
    (const void*)a->k_descale_ptr, (const void*)a->v_descale_ptr);
  if (a->v3_api_check) return a->hdim_q == 128 ? RAGGED_AITER_OK : RAGGED_AITER_UNSUPPORTED;
  if (a->batch == 13) { snprintf(last, sizeof last, "unlucky batch"); return RAGGED_AITER_EXCEPTION; }
  return RAGGED_AITER_OK;
}
int32_t ragged_aiter_mha_fwd_preflight(const ragged_aiter_fwd_args* a, char* choice, uint32_t n) {
  if (a->struct_size != sizeof(*a)) return RAGGED_AITER_BAD_ARGS;
  if (a->batch == 7) {
    snprintf(last, sizeof last, "AITER_ASM_DIR is unset; AITER would abort loading gfx942/fake.co");
    return RAGGED_AITER_KERNEL_FILE_MISSING;
  }
  if (!a->use_asm_v3) {
    snprintf(last, sizeof last, "use_asm_v3 is off and no CK in this build");
    return RAGGED_AITER_UNSUPPORTED;
  }
  snprintf(choice, n, "asm fake_kernel from /fake/hsa/gfx942/fake.co");
  return RAGGED_AITER_OK;
}
#ifdef FAKE_BWD
#include "ragged_aiter_shim_bwd.h"
uint32_t ragged_aiter_shim_bwd_abi_version(void) { return FAKE_BWD; }
int32_t ragged_aiter_mha_bwd_available(char* where, uint32_t n) {
#ifdef FAKE_BWD_MISSING
  (void)where; (void)n;
  snprintf(last, sizeof last, "libmha_bwd.so not found at /fake/libmha_bwd.so (no such file)");
  return RAGGED_AITER_LIBRARY_MISSING;
#else
  snprintf(where, n, "/fake/libmha_bwd.so");
  return RAGGED_AITER_OK;
#endif
}
int32_t ragged_aiter_mha_bwd(const ragged_aiter_bwd_args* a) {
  if (a->struct_size != sizeof(*a)) {
    snprintf(last, sizeof last, "struct_size %u != %zu", a->struct_size, sizeof(*a));
    return RAGGED_AITER_BAD_ARGS;
  }
  snprintf(args_text, sizeof args_text,
    "dtype=%d batch=%d max=%d/%d seqlen=%d/%d hdim=%d/%d nhead=%d/%d "
    "stride=%d/%d/%d/%d/%d/%d/%d/%d lsed=%d mask=%d,%d,%d scale=%g asm=%d a32=%d det=%d "
    "do=%p lse=%p d=%p dq=%p dk=%p dv=%p seqstart=%p/%p cu=%p/%p aiter_ws=%p/%llu stream=%p",
    a->data_type, a->batch, a->max_seqlen_q, a->max_seqlen_k, a->seqlen_q, a->seqlen_k,
    a->hdim_q, a->hdim_v, a->nhead_q, a->nhead_k, a->stride_q, a->stride_k, a->stride_v,
    a->stride_o, a->stride_do, a->stride_dq, a->stride_dk, a->stride_dv, a->nhead_stride_lsed,
    a->mask_type, a->window_size_left, a->window_size_right, (double)a->scale, a->use_asm_v3,
    a->v3_atomic_fp32, a->is_deterministic, a->do_ptr, a->lse_ptr, a->d_ptr, a->dq_ptr, a->dk_ptr, a->dv_ptr,
    (const void*)a->seqstart_q_ptr, (const void*)a->seqstart_k_ptr,
    (const void*)a->cu_seqlen_q_ptr, (const void*)a->cu_seqlen_k_ptr, a->aiter_workspace_ptr,
    (unsigned long long)a->aiter_workspace_bytes, a->stream);
  return RAGGED_AITER_OK;
}
#endif
"#;

/// Paths of the compiled fakes.
pub(crate) struct FakeRocm {
    /// HIP runtime with one gfx942 device and ROCm 6.2.
    pub hip: PathBuf,
    /// HIP runtime with no device.
    pub hip_no_device: PathBuf,
    /// HIP runtime reporting ROCm 5.7.
    pub hip_old: PathBuf,
    /// hipRTC returning the code object "FAKE".
    pub hiprtc: PathBuf,
    /// Shim of the current ABI.
    pub shim: PathBuf,
    /// Shim of the next ABI version.
    pub shim_next_abi: PathBuf,
    /// Shim with the backward entry, whose libmha_bwd.so is found.
    pub shim_bwd: PathBuf,
    /// Shim with the backward entry, whose libmha_bwd.so is missing.
    pub shim_bwd_missing: PathBuf,
    /// Shim with a backward entry of the next backward ABI version.
    pub shim_bwd_next_abi: PathBuf,
}

fn compile_so(dir: &Path, name: &str, source: &str, defines: &[&str]) -> PathBuf {
    compile_fake_library(dir, &format!("lib{name}.so"), source, defines)
}

/// Compiles the fakes once per test process.
pub(crate) fn fake_rocm() -> &'static FakeRocm {
    static FAKES: OnceLock<FakeRocm> = OnceLock::new();
    FAKES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ragged-aiter-fakes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create fake dir");
        std::fs::write(dir.join("ragged_aiter_shim.h"), HEADER).expect("write header");
        std::fs::write(
            dir.join("ragged_aiter_shim_bwd.h"),
            super::shim_abi_bwd::HEADER,
        )
        .expect("write header");
        let abi = format!("-DFAKE_ABI={SHIM_ABI_VERSION}");
        let next_abi = format!("-DFAKE_ABI={}", SHIM_ABI_VERSION + 1);
        FakeRocm {
            hip: compile_so(
                &dir,
                "fakehip",
                FAKE_HIP,
                &["-DFAKE_DEVICES=1", "-DFAKE_VERSION=60243482"],
            ),
            hip_no_device: compile_so(
                &dir,
                "fakehip0",
                FAKE_HIP,
                &["-DFAKE_DEVICES=0", "-DFAKE_VERSION=60243482"],
            ),
            hip_old: compile_so(
                &dir,
                "fakehipold",
                FAKE_HIP,
                &["-DFAKE_DEVICES=1", "-DFAKE_VERSION=50731921"],
            ),
            hiprtc: compile_so(&dir, "fakehiprtc", FAKE_HIPRTC, &[]),
            shim: compile_so(&dir, "fakeshim", FAKE_SHIM, &[&abi]),
            shim_next_abi: compile_so(&dir, "fakeshim2", FAKE_SHIM, &[&next_abi]),
            shim_bwd: compile_so(&dir, "fakeshimbwd", FAKE_SHIM, &[&abi, "-DFAKE_BWD=2"]),
            shim_bwd_missing: compile_so(
                &dir,
                "fakeshimbwdmissing",
                FAKE_SHIM,
                &[&abi, "-DFAKE_BWD=2", "-DFAKE_BWD_MISSING"],
            ),
            shim_bwd_next_abi: compile_so(&dir, "fakeshimbwd3", FAKE_SHIM, &[&abi, "-DFAKE_BWD=3"]),
        }
    })
}
