// Runs the real shim and the real asm-only libmha_fwd.so over the fake HIP runtime, one case per
// process (AITER caches its device queries and loaded kernels in statics), and checks what AITER
// hands to hipModuleLaunchKernel against ragged-sdpa.md §7: which asm kernel and .co file it
// picks, and every field of the kernarg block the engine's arguments determine.
//
// The expected values are written out per case from §7.2/§7.4 and AITER's kernel tables
// (hsa/<arch>/fmha_v3_fwd/fmha_fwd.csv), not computed by the code under test. Every device
// pointer handed over is an inaccessible page, so a host read of device memory by the shim or
// AITER (e.g. of the sequence starts) crashes the case instead of passing unnoticed.
//
// Usage: shim_cases --list | shim_cases SHIM.so AITER_HSA_DIR CASE
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fake_hip_runtime.h"
#include "mha_fwd.h" // aiter::fmha_fwd_v3_args (the kernarg layout) and aiter::mha_fwd
#include "ragged_aiter_shim.h"
#include "case_driver.h"

namespace {

using case_driver::device_pages;
using case_driver::expect;
using case_driver::expect_eq;
using case_driver::expect_ptr;
using case_driver::finish;
using case_driver::symbol;

enum class AsmDir { Real, Unset, Empty };

struct Case
{
    const char* name;
    const char* arch; // gcnArchName
    int chip_id;
    AsmDir asm_dir;
    int dtype;
    int batch, s_q, s_kv, h_q, h_kv, d_qk, d_v;
    int mask, left, right;
    bool padded, lse, use_asm;
    int expect_status;      // of ragged_aiter_mha_fwd
    const char* kernel;     // expected asm kernel, "" when nothing may launch
    const char* co_file;    // expected file under <hsa>/<processor>/
    unsigned block_x;
};

constexpr int BF16 = RAGGED_AITER_DTYPE_BF16, FP16 = RAGGED_AITER_DTYPE_FP16,
              FP8 = RAGGED_AITER_DTYPE_FP8BF16;
constexpr int OK = RAGGED_AITER_OK, UNSUP = RAGGED_AITER_UNSUPPORTED,
              MISSING = RAGGED_AITER_KERNEL_FILE_MISSING;
constexpr const char* G942 = "gfx942:sramecc+:xnack-";
constexpr const char* G950 = "gfx950:sramecc+:xnack-";

// clang-format off
const Case kCases[] = {
  // name                         arch  chip    dir           dtype B  Sq  Skv Hq Hk  Dqk Dv  mask l   r  pad    lse    asm    status  kernel / file / block
  {"gfx942_unmasked",             G942, 0x74a1, AsmDir::Real, BF16, 3, 64, 96, 8, 8, 128, 128, 0, -1, -1, false, false, true, OK,
   "_ZN5aiter30fmha_fwd_hd128_bf16_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_rtne_group.co", 512},
  {"gfx942_causal_gqa_padded_lse", G942, 0x74a1, AsmDir::Real, BF16, 2, 200, 200, 16, 4, 128, 128, 2, -1, 0, true, true, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne_group.co", 512},
  {"gfx942_mi308_causal",         G942, 0x74a2, AsmDir::Real, BF16, 2, 128, 256, 8, 1, 128, 128, 2, -1, 0, false, false, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI308/fwd_hd128_bf16_causal_rtne_group.co", 512},
  {"gfx950_causal_gqa_padded_lse", G950, 0x75a0, AsmDir::Real, BF16, 4, 100, 300, 8, 2, 128, 128, 2, -1, 0, true, true, true, OK,
   "_ZN5aiter32fmha_fwd_hd128_bf16_causal_groupE", "fmha_v3_fwd/fwd_hd128_bf16_causal_group.co", 512},
  {"gfx950_d192_unmasked",        G950, 0x75a0, AsmDir::Real, BF16, 2, 64, 64, 4, 4, 192, 128, 0, -1, -1, false, false, true, OK,
   "_ZN5aiter31fmha_fwd_hd192_hd128_bf16_groupE", "fmha_v3_fwd/fwd_hd192_hd128_bf16_group.co", 256},
  // A batch of length 0 changes only device data: AITER reads no length on the host (the pages
  // are inaccessible), so the launch is the upper-bound one and the fix-up handles the batch.
  {"zero_length_batch",           G942, 0x74a1, AsmDir::Real, BF16, 5, 16, 16, 2, 2, 128, 128, 2, -1, 0, true, true, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne_group.co", 512},
  // What the engine sends for a top-left causal mask: use_asm_v3 off, so no asm; no CK in this build.
  {"top_left_as_mapped",          G942, 0x74a1, AsmDir::Real, BF16, 2, 64, 64, 8, 8, 128, 128, 1, -1, 0, false, false, false, UNSUP, "", "", 0},
  // Why it must be off: with seqlen_q == seqlen_k AITER takes the bottom-right causal kernel.
  {"top_left_if_asm_were_on",     G942, 0x74a1, AsmDir::Real, BF16, 2, 64, 64, 8, 8, 128, 128, 1, -1, 0, false, false, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne_group.co", 512},
  {"bottom_right_window",         G942, 0x74a1, AsmDir::Real, BF16, 2, 64, 64, 8, 8, 128, 128, 2, 32, 0, false, false, true, UNSUP, "", "", 0},
  {"fp16",                        G942, 0x74a1, AsmDir::Real, FP16, 2, 64, 64, 8, 8, 128, 128, 0, -1, -1, false, false, true, UNSUP, "", "", 0},
  {"head_dim_64",                 G950, 0x75a0, AsmDir::Real, BF16, 2, 64, 64, 8, 8, 64, 64, 0, -1, -1, false, false, true, UNSUP, "", "", 0},
  {"asm_dir_unset",               G942, 0x74a1, AsmDir::Unset, BF16, 2, 64, 64, 8, 8, 128, 128, 0, -1, -1, false, false, true, MISSING, "", "", 0},
  {"asm_dir_without_the_file",    G950, 0x75a0, AsmDir::Empty, BF16, 2, 64, 64, 8, 8, 128, 128, 2, -1, 0, false, false, true, MISSING, "", "", 0},
  // Paged K/V on the gathered route: what the engine sends for a paged prefill (packed Q/O of
  // T_q rows as B sequences, K/V gathered into [B * max_seq_len_kv, H_kv, D] in the workspace;
  // serving_tests.rs holds these values against the engine's mapping), with AITER choosing its
  // kernel as for any ragged batch. With sinks and no stats the forward writes an LSE.
  {"paged_gathered_gfx942_causal", G942, 0x74a1, AsmDir::Real, BF16, 3, 256, 512, 8, 2, 128, 128, 2, -1, 0, false, false, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne_group.co", 512},
  {"paged_gathered_sinks_gfx950_lse", G950, 0x75a0, AsmDir::Real, BF16, 3, 256, 512, 8, 2, 128, 128, 0, -1, -1, false, true, true, OK,
   "_ZN5aiter25fmha_fwd_hd128_bf16_groupE", "fmha_v3_fwd/fwd_hd128_bf16_group.co", 512},
  // Paged decode (one row per sequence, T_q = B = 4) takes the same route.
  {"paged_gathered_decode_gfx942", G942, 0x74a1, AsmDir::Real, BF16, 4, 4, 256, 8, 2, 128, 128, 2, -1, 0, false, false, true, OK,
   "_ZN5aiter37fmha_fwd_hd128_bf16_causal_rtne_groupE", "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne_group.co", 512},
  // FP8 (fp8bf16): FP8 Q/K/V, bf16 O, per-tensor descales; gfx942 rows are listed under bf16_cvt 1.
  {"gfx942_fp8_causal_gqa_lse",   G942, 0x74a1, AsmDir::Real, FP8, 2, 200, 200, 16, 4, 128, 128, 2, -1, 0, false, true, true, OK,
   "_ZN5aiter31fmha_fwd_hd128_fp8_causal_groupE", "fmha_v3_fwd/MI300/fwd_hd128_fp8_causal_group.co", 512},
  {"gfx942_mi308_fp8_padded",     G942, 0x74a2, AsmDir::Real, FP8, 3, 64, 96, 8, 8, 128, 128, 0, -1, -1, true, false, true, OK,
   "_ZN5aiter24fmha_fwd_hd128_fp8_groupE", "fmha_v3_fwd/MI308/fwd_hd128_fp8_group.co", 512},
  {"gfx950_fp8_hd128_lse",        G950, 0x75a0, AsmDir::Real, FP8, 2, 64, 128, 8, 2, 128, 128, 0, -1, -1, false, true, true, OK,
   "_ZN5aiter30fmha_fwd_hd128_fp8_group_gfx950E", "fmha_v3_fwd/fwd_hd128_fp8_group.co", 512},
  {"gfx950_fp8_hd256_causal_padded", G950, 0x75a0, AsmDir::Real, FP8, 4, 100, 300, 8, 2, 256, 256, 2, -1, 0, true, false, true, OK,
   "_ZN5aiter38fmha_fwd_hd256_fp8_causal_group_gfx950E", "fmha_v3_fwd/fwd_hd256_fp8_causal_group.co", 512},
  // No gfx942 hd256 fp8 row, and no window kernel: nothing runs (the shim sends FP8 nowhere else).
  {"gfx942_fp8_hd256_declined",   G942, 0x74a1, AsmDir::Real, FP8, 2, 64, 64, 8, 8, 256, 256, 0, -1, -1, false, false, true, UNSUP, "", "", 0},
  {"gfx950_fp8_window_declined",  G950, 0x75a0, AsmDir::Real, FP8, 2, 64, 64, 8, 8, 128, 128, 2, 32, 0, false, false, true, UNSUP, "", "", 0},
};
// clang-format on

struct Shim
{
    void* lib;
    int32_t (*fwd)(const ragged_aiter_fwd_args*);
    int32_t (*preflight)(const ragged_aiter_fwd_args*, char*, uint32_t);
    const char* (*last_error)();
    uint32_t (*abi)();
    const char* (*targets)();
};

// Physical Q rows in all: B * S_q for a ragged batch; a paged graph's packed Q (the paged_*
// cases) holds all sequences in its S_q = T_q rows, which the engine sends as the total.
int q_total(const Case& c) { return std::strncmp(c.name, "paged_", 6) == 0 ? c.s_q : c.batch * c.s_q; }

// The engine's §7.4 mapping of a packed-BSHD ragged problem.
ragged_aiter_fwd_args map(const Case& c, char* dev)
{
    ragged_aiter_fwd_args a{};
    a.struct_size     = sizeof a;
    a.data_type       = c.dtype;
    a.q_ptr           = dev + 0 * 4096;
    a.k_ptr           = dev + 1 * 4096;
    a.v_ptr           = dev + 2 * 4096;
    a.o_ptr           = dev + 3 * 4096;
    a.lse_ptr         = c.lse ? dev + 4 * 4096 : nullptr;
    a.seqstart_q_ptr  = reinterpret_cast<const int32_t*>(dev + 5 * 4096);
    a.seqstart_k_ptr  = reinterpret_cast<const int32_t*>(dev + 6 * 4096);
    a.cu_seqlen_q_ptr = c.padded ? reinterpret_cast<const int32_t*>(dev + 7 * 4096) : nullptr;
    a.cu_seqlen_k_ptr = c.padded ? reinterpret_cast<const int32_t*>(dev + 8 * 4096) : nullptr;
    a.stream          = reinterpret_cast<void*>(0x5717ea);
    a.batch           = c.batch;
    a.max_seqlen_q    = c.s_q;
    a.seqlen_q        = q_total(c);
    a.seqlen_k        = c.batch * c.s_kv;
    a.hdim_q          = c.d_qk;
    a.hdim_v          = c.d_v;
    a.nhead_q         = c.h_q;
    a.nhead_k         = c.h_kv;
    a.stride_q        = c.h_q * c.d_qk;
    a.stride_k        = c.h_kv * c.d_qk;
    a.stride_v        = c.h_kv * c.d_v;
    a.stride_o        = c.h_q * c.d_v;
    a.nhead_stride_q  = c.d_qk;
    a.nhead_stride_k  = c.d_qk;
    a.nhead_stride_v  = c.d_v;
    a.nhead_stride_o  = c.d_v;
    a.nhead_stride_lse  = c.lse ? q_total(c) : 0;
    a.mask_type         = c.mask;
    a.window_size_left  = c.left;
    a.window_size_right = c.right;
    a.scale_s           = 1.0f / std::sqrt(static_cast<float>(c.d_qk));
    a.has_lse           = c.lse ? 1 : 0;
    a.use_asm_v3        = c.use_asm ? 1 : 0;
    // The engine's FP8 rule: per-tensor descales on pages of their own, and on gfx942 the
    // bf16_cvt under which AITER's table lists its fp8bf16 rows.
    const bool fp8    = c.dtype == FP8;
    a.how_v3_bf16_cvt = fp8 && std::strncmp(c.arch, "gfx942", 6) == 0 ? 1 : 0;
    a.qscale_type     = fp8 ? RAGGED_AITER_QSCALE_PERTENSOR : RAGGED_AITER_QSCALE_NONE;
    a.q_descale_ptr   = fp8 ? reinterpret_cast<const float*>(dev + 9 * 4096) : nullptr;
    a.k_descale_ptr   = fp8 ? reinterpret_cast<const float*>(dev + 10 * 4096) : nullptr;
    a.v_descale_ptr   = fp8 ? reinterpret_cast<const float*>(dev + 11 * 4096) : nullptr;
    return a;
}

void check_kernargs(const Case& c, const ragged_aiter_fwd_args& a, const fake_hip_launch& l)
{
    expect_eq("kernarg size", l.args_size, sizeof(aiter::fmha_fwd_v3_args));
    aiter::fmha_fwd_v3_args k{};
    std::memcpy(&k, l.args, std::min(l.args_size, sizeof k));
    const int bpe = c.dtype == FP8 ? 1 : 2; // Q, K, V bytes; O is bf16 (2 bytes) either way
    expect_ptr("ptr_q", k.ptr_q, a.q_ptr);
    expect_ptr("ptr_k", k.ptr_k, a.k_ptr);
    expect_ptr("ptr_v", k.ptr_v, a.v_ptr);
    expect_ptr("ptr_o", k.ptr_o, a.o_ptr);
    expect_ptr("ptr_lse", k.ptr_lse, a.lse_ptr);
    // Group mode: logical cumulative lengths when padded, else the physical starts; the
    // physical starts always as the padding pointers (the engine's §7.4 decision).
    expect_ptr("ptr_qseq", k.ptr_qseq, c.padded ? a.cu_seqlen_q_ptr : a.seqstart_q_ptr);
    expect_ptr("ptr_kseq", k.ptr_kseq, c.padded ? a.cu_seqlen_k_ptr : a.seqstart_k_ptr);
    expect_ptr("ptr_qseq_padding", k.ptr_qseq_padding, a.seqstart_q_ptr);
    expect_ptr("ptr_kseq_padding", k.ptr_kseq_padding, a.seqstart_k_ptr);
    // The descale pointers reach the kernel exactly for FP8, each read at element 0 for every
    // batch and head (byte strides 0).
    expect_ptr("ptr_q_descale", k.ptr_q_descale, a.q_descale_ptr);
    expect_ptr("ptr_k_descale", k.ptr_k_descale, a.k_descale_ptr);
    expect_ptr("ptr_v_descale", k.ptr_v_descale, a.v_descale_ptr);
    for(const unsigned stride : {k.s_descale_q_Bs, k.s_descale_q_Hs, k.s_descale_k_Bs,
                                 k.s_descale_k_Hs, k.s_descale_v_Bs, k.s_descale_v_Hs})
        expect_eq("descale byte stride", stride, 0u);
    expect(k.scalar == a.scale_s, "scalar is the scale");
    expect_eq("s_seq_len", k.s_seq_len, q_total(c));
    expect_eq("s_kv_seq_len", k.s_kv_seq_len, c.batch * c.s_kv);
    expect_eq("s_Seqs", k.s_Seqs, c.h_q * c.d_qk * bpe);
    expect_eq("s_Hs", k.s_Hs, c.d_qk * bpe);
    expect_eq("s_Bs", k.s_Bs, 0);
    expect_eq("s_k_Seqs", k.s_k_Seqs, c.h_kv * c.d_qk * bpe);
    expect_eq("s_k_Hs", k.s_k_Hs, c.d_qk * bpe);
    expect_eq("s_k_Bs", k.s_k_Bs, 0);
    expect_eq("s_v_Seqs", k.s_v_Seqs, c.h_kv * c.d_v * bpe);
    expect_eq("s_v_Hs", k.s_v_Hs, c.d_v * bpe);
    expect_eq("s_v_Bs", k.s_v_Bs, 0);
    expect_eq("s_o_Seqs", k.s_o_Seqs, c.h_q * c.d_v * 2);
    expect_eq("s_o_Hs", k.s_o_Hs, c.d_v * 2);
    expect_eq("s_o_Bs", k.s_o_Bs, 0);
    expect_eq("s_gqa", k.s_gqa, c.h_q / c.h_kv);
    expect_eq("s_lse", k.s_lse, c.lse ? 1 : 0);
    expect_eq("s_lse_Hs", k.s_lse_Hs, c.lse ? q_total(c) * 4 : 0);
    expect_eq("s_qk_head_dim", k.s_qk_head_dim, c.d_qk);
    expect_eq("s_v_head_dim", k.s_v_head_dim, c.d_v);
    expect_eq("s_q_head_num", k.s_q_head_num, c.h_q);
    std::printf("  kernargs: %zu bytes, s_seq_len=%u s_kv_seq_len=%u s_gqa=%u s_lse=%u s_lse_Hs=%u "
                "ptr_qseq=%s\n",
                l.args_size, k.s_seq_len, k.s_kv_seq_len, k.s_gqa, k.s_lse, k.s_lse_Hs,
                k.ptr_qseq == a.cu_seqlen_q_ptr && a.cu_seqlen_q_ptr ? "cu_seqlen_q" : "seqstart_q");
}

// AITER itself, called without the shim's guard, on a case the guard refuses: it must end the
// process (AITER_CHECK -> std::abort), which is why the engine asks the preflight first.
void expect_aiter_aborts(const Case& c, char* dev)
{
    std::fflush(stdout);
    const pid_t child = fork();
    if(child == 0)
    {
        const ragged_aiter_fwd_args a = map(c, dev);
        aiter::mha_fwd_args m{};
        m.use_asm_v3     = true;
        m.data_type      = "bf16";
        m.is_group_mode  = true;
        m.q_ptr = a.q_ptr, m.k_ptr = a.k_ptr, m.v_ptr = a.v_ptr, m.o_ptr = a.o_ptr;
        m.seqstart_q_ptr = a.seqstart_q_ptr, m.seqstart_k_ptr = a.seqstart_k_ptr;
        m.seqlen_q = a.seqlen_q, m.seqlen_k = a.seqlen_k, m.batch = a.batch;
        m.max_seqlen_q = a.max_seqlen_q, m.hdim_q = a.hdim_q, m.hdim_v = a.hdim_v;
        m.nhead_q = a.nhead_q, m.nhead_k = a.nhead_k, m.scale_s = a.scale_s;
        m.mask_type = a.mask_type, m.window_size_left = a.window_size_left;
        m.window_size_right = a.window_size_right;
        ck_tile::stream_config s{};
        (void)aiter::mha_fwd(m, s);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
           "aiter::mha_fwd called directly ends the process with SIGABRT");
    if(WIFSIGNALED(status))
        std::printf("  aiter::mha_fwd called directly: killed by signal %d (SIGABRT is %d)\n",
                    WTERMSIG(status), SIGABRT);
}

int run(const char* shim_path, const std::string& hsa, const Case& c)
{
    setenv("FAKE_HIP_ARCH", c.arch, 1);
    setenv("FAKE_HIP_CHIP_ID", std::to_string(c.chip_id).c_str(), 1);
    std::string asm_dir = hsa;
    if(c.asm_dir == AsmDir::Unset)
        unsetenv("AITER_ASM_DIR");
    else
    {
        if(c.asm_dir == AsmDir::Empty)
        {
            char tmpl[] = "/tmp/ragged-empty-hsa-XXXXXX";
            asm_dir = mkdtemp(tmpl);
        }
        setenv("AITER_ASM_DIR", asm_dir.c_str(), 1);
    }
    void* lib = dlopen(shim_path, RTLD_NOW | RTLD_LOCAL);
    if(lib == nullptr)
    {
        std::printf("FAIL: dlopen %s: %s\n", shim_path, dlerror());
        return 1;
    }
    Shim shim{lib,
              symbol<decltype(Shim::fwd)>(lib, "ragged_aiter_mha_fwd"),
              symbol<decltype(Shim::preflight)>(lib, "ragged_aiter_mha_fwd_preflight"),
              symbol<decltype(Shim::last_error)>(lib, "ragged_aiter_shim_last_error"),
              symbol<decltype(Shim::abi)>(lib, "ragged_aiter_shim_abi_version"),
              symbol<decltype(Shim::targets)>(lib, "ragged_aiter_shim_gpu_targets")};
    std::printf("case %s (abi %u, built for %s, device %s, chip 0x%x)\n", c.name, shim.abi(),
                shim.targets(), c.arch, c.chip_id);
    expect_eq("abi version", shim.abi(), RAGGED_AITER_SHIM_ABI_VERSION);
    expect(std::string(shim.targets()) == "gfx942;gfx950", "targets are gfx942;gfx950");

    expect_eq("NULL args", shim.fwd(nullptr), RAGGED_AITER_BAD_ARGS);
    char* dev                 = device_pages(12);
    ragged_aiter_fwd_args bad = map(c, dev);
    bad.struct_size           = 8;
    expect_eq("short struct_size", shim.preflight(&bad, nullptr, 0), RAGGED_AITER_BAD_ARGS);

    // FP8 fields that disagree with data_type are refused before AITER.
    ragged_aiter_fwd_args odd = map(c, dev);
    if(c.dtype == FP8)
        odd.k_descale_ptr = nullptr;
    else
        odd.qscale_type = RAGGED_AITER_QSCALE_PERTENSOR;
    expect_eq("FP8 fields disagreeing with data_type", shim.preflight(&odd, nullptr, 0),
              RAGGED_AITER_BAD_ARGS);
    std::printf("  FP8 fields disagreeing with data_type: %s\n", shim.last_error());

    const ragged_aiter_fwd_args a = map(c, dev);
    if(c.dtype == FP8 && c.expect_status == OK && std::strncmp(c.arch, "gfx942", 6) == 0)
    {
        // Why the engine sends bf16_cvt 1 with FP8 on gfx942: under 0, AITER finds no row.
        ragged_aiter_fwd_args rtne = a;
        rtne.how_v3_bf16_cvt       = 0;
        expect_eq("gfx942 fp8 with bf16_cvt 0", shim.preflight(&rtne, nullptr, 0), UNSUP);
    }
    char choice[512];
    const int32_t pre = shim.preflight(&a, choice, sizeof choice);
    const std::string pre_error = shim.last_error();
    std::printf("  preflight: %d %s\n", pre, pre == OK ? choice : pre_error.c_str());
    expect_eq("preflight status", pre, c.expect_status);
    expect_eq("launches after the preflight", fake_hip_launch_count(), 0);
    const std::string processor = std::string(c.arch).substr(0, 6);
    const std::string path      = asm_dir + "/" + processor + "/" + c.co_file;
    if(c.expect_status == OK)
        expect(std::string(choice) == "asm " + std::string(c.kernel) + " from " + path,
               "preflight names " + std::string(c.kernel) + " from " + path);
    if(c.expect_status == MISSING)
        expect(pre_error.find(c.asm_dir == AsmDir::Unset ? "AITER_ASM_DIR is unset" : asm_dir) !=
                   std::string::npos,
               "the reason names AITER_ASM_DIR or the missing path");

    const int32_t status = shim.fwd(&a);
    std::printf("  mha_fwd: %d %s\n", status, shim.last_error());
    expect_eq("mha_fwd status", status, c.expect_status);
    const int launches = fake_hip_launch_count();
    expect_eq("launches", launches, c.kernel[0] != '\0' ? 1 : 0);
    if(launches == 1)
    {
        const fake_hip_launch& l = *fake_hip_launch_at(0);
        std::printf("  launch: %s (code object for %s) grid %u,%u,%u block %u\n", l.kernel,
                    l.code_object_arch, l.grid[0], l.grid[1], l.grid[2], l.block[0]);
        expect(std::string(l.kernel) == c.kernel, std::string("kernel is ") + c.kernel);
        expect(std::string(l.code_object_arch) == processor, "code object is for " + processor);
        expect_eq("grid.x (heads)", l.grid[0], c.h_q);
        expect_eq("grid.y (batches)", l.grid[1], c.batch);
        expect_eq("block.x", l.block[0], c.block_x);
        expect_ptr("stream", l.stream, a.stream);
        check_kernargs(c, a, l);
    }
    if(c.asm_dir != AsmDir::Real)
        expect_aiter_aborts(c, dev);
    if(c.asm_dir == AsmDir::Empty)
        rmdir(asm_dir.c_str());
    return finish();
}

} // namespace

int main(int argc, char** argv)
{
    return case_driver::case_main(argc, argv, kCases, "SHIM.so AITER_HSA_DIR", run);
}
