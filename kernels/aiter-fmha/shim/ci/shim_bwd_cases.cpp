// Runs the real shim's backward entry (ragged_aiter_shim_bwd.cpp, inside libragged_aiter_shim.so)
// over the fake HIP runtime and the recording stand-in for libmha_bwd.so (fake_mha_bwd.cpp), one
// case per process (the shim opens libmha_bwd.so once per process), and checks:
//   - which library the shim finds, and its reasons when it finds none or finds no aiter::mha_bwd;
//   - every field of the aiter::mha_bwd_args it builds (group mode; the pointers; seqstarts and
//     cumulative lengths; each tensor's row and head strides, dQ/dK/dV included; the LSE/D head
//     stride; mask type and window; scale; the deterministic and asm flags; everything the plugin
//     never uses at 0);
//   - the allocators it hands AITER: device scratch carved out of the engine's reserved region
//     (aiter_workspace_ptr) at 256-byte-aligned offsets written out per case, zeroed on the
//     caller's stream when asked, no device allocation of the shim's own, a request beyond the
//     region refused before AITER goes on; pinned host memory handed out and reused.
// Expected values are written out per case, not taken from the shim. The fake stands in for AITER,
// so which kernels AITER's mha_bwd.cu would launch, and with which kernel arguments, is not checked
// here (it cannot be built from the vendored subset; kernels/aiter-fmha/shim/README.md).
//
// Usage: shim_bwd_cases --list | shim_bwd_cases SHIM.so FAKE_MHA_BWD.so CASE
#include <dlfcn.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_hip_runtime.h"
#include "mha_bwd.h"
#include "ragged_aiter_shim_bwd.h"
#include "case_driver.h"

namespace {

using case_driver::device_pages;
using case_driver::expect;
using case_driver::expect_eq;
using case_driver::expect_ptr;
using case_driver::finish;
using case_driver::symbol;

enum class Library { Fake, Missing, WithoutSymbol };
enum class Behaviour { Runs, NoKernel, Throws };

struct Case
{
    const char* name;
    Library library;
    Behaviour behaviour;
    int dtype;
    int batch, s_q, s_kv, h_q, h_kv, d_qk, d_v;
    int mask, left, right;
    bool padded;
    int use_asm, atomic32, deterministic;
    int row_pad; // extra elements per token row of dO and dQ/dK/dV (distinguishes their strides)
    unsigned ws_bytes;   // aiter_workspace_bytes the engine reserved
    const char* allocs;  // AITER's workspace_alloc requests, FAKE_MHA_BWD_ALLOCS syntax
    int offsets[4];      // where each granted block starts in the region (-1: no more blocks)
    int expect_status;
};

constexpr int BF16 = RAGGED_AITER_DTYPE_BF16, FP16 = RAGGED_AITER_DTYPE_FP16;
constexpr int OK = RAGGED_AITER_OK, UNSUP = RAGGED_AITER_UNSUPPORTED, EXC = RAGGED_AITER_EXCEPTION,
              MISSING = RAGGED_AITER_LIBRARY_MISSING, SMALL = RAGGED_AITER_WORKSPACE_TOO_SMALL;
constexpr Library FAKE = Library::Fake;
constexpr Behaviour RUNS = Behaviour::Runs;
// CK's deterministic path asks once, uninitialised; the asm path asks once, zeroed.
constexpr const char* CK_ONE = "8192:0";
constexpr const char* TWO    = "100:1,4096:0"; // the second block starts at the next 256 bytes

// What the engine sends (deterministic, asm off, no fp32 atomics, H_q = H_kv) unless the name
// says otherwise.
// clang-format off
const Case kCases[] = {
  // name                          library  behaviour            dtype B  Sq   Skv  Hq  Hk  Dqk  Dv  mask l   r   pad    asm at32 det pad  ws      allocs    offsets         status
  {"bwd_unmasked_d128",             FAKE,    RUNS,                BF16, 3, 64,  96,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_causal_br_padded_d64",      FAKE,    RUNS,                BF16, 2, 200, 200, 16, 16, 64,  64,  2, -1,  0, true,  0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_top_left_window_fp16_d96",  FAKE,    RUNS,                FP16, 3, 5,   7,   8,  8,  96,  96,  1,  4,  0, true,  0, 0, 1, 0,  65536,  CK_ONE,   {0, -1},        OK},
  {"bwd_br_window_d192_128",        FAKE,    RUNS,                BF16, 2, 33,  65,  4,  4,  192, 128, 2, 32,  8, false, 0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_d256",                      FAKE,    RUNS,                BF16, 2, 48,  80,  2,  2,  256, 256, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_zero_length_batches",       FAKE,    RUNS,                BF16, 5, 16,  16,  2,  2,  128, 128, 2, -1,  0, true,  0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_distinct_gradient_strides", FAKE,    RUNS,                BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 8,  8192,   CK_ONE,   {0, -1},        OK},
  {"bwd_two_blocks_zeroed_first",   FAKE,    RUNS,                BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  4352,   TWO,      {0, 256, -1},   OK},
  {"bwd_nondeterministic_asm_flags",FAKE,    RUNS,                BF16, 2, 64,  64,  8,  8,  128, 128, 2, -1,  0, false, 1, 1, 0, 0,  131072, "65536:1",{0, -1},        OK},
  {"bwd_workspace_too_small",       FAKE,    RUNS,                BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  8191,   CK_ONE,   {-1},           SMALL},
  {"bwd_second_block_too_small",    FAKE,    RUNS,                BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  4351,   TWO,      {0, -1},        SMALL},
  {"bwd_no_kernel",                 FAKE,    Behaviour::NoKernel, BF16, 2, 64,  64,  8,  8,  264, 264, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {0, -1},        UNSUP},
  {"bwd_aiter_throws",              FAKE,    Behaviour::Throws,   BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {-1},           EXC},
  {"bwd_library_missing",           Library::Missing, RUNS,       BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {-1},           MISSING},
  {"bwd_symbol_absent",             Library::WithoutSymbol, RUNS, BF16, 2, 64,  64,  8,  8,  128, 128, 0, -1, -1, false, 0, 0, 1, 0,  8192,   CK_ONE,   {-1},           MISSING},
};
// clang-format on

// What the engine's mapping sends for a packed ragged backward
// (kernels/aiter-fmha/src/backward_mapping.rs); the region is the 15th page and beyond.
ragged_aiter_bwd_args map(const Case& c, char* dev)
{
    ragged_aiter_bwd_args a{};
    a.struct_size     = sizeof a;
    a.data_type       = c.dtype;
    a.q_ptr           = dev + 0 * 4096;
    a.k_ptr           = dev + 1 * 4096;
    a.v_ptr           = dev + 2 * 4096;
    a.o_ptr           = dev + 3 * 4096;
    a.do_ptr          = dev + 4 * 4096;
    a.lse_ptr         = dev + 5 * 4096;
    a.d_ptr           = dev + 6 * 4096;
    a.dq_ptr          = dev + 7 * 4096;
    a.dk_ptr          = dev + 8 * 4096;
    a.dv_ptr          = dev + 9 * 4096;
    a.seqstart_q_ptr  = reinterpret_cast<const int32_t*>(dev + 10 * 4096);
    a.seqstart_k_ptr  = reinterpret_cast<const int32_t*>(dev + 11 * 4096);
    a.cu_seqlen_q_ptr = c.padded ? reinterpret_cast<const int32_t*>(dev + 12 * 4096) : nullptr;
    a.cu_seqlen_k_ptr = c.padded ? reinterpret_cast<const int32_t*>(dev + 13 * 4096) : nullptr;
    a.stream          = reinterpret_cast<void*>(0xb4c7);
    a.batch           = c.batch;
    a.max_seqlen_q    = c.s_q;
    a.max_seqlen_k    = c.s_kv;
    a.seqlen_q        = c.batch * c.s_q;
    a.seqlen_k        = c.batch * c.s_kv;
    a.hdim_q          = c.d_qk;
    a.hdim_v          = c.d_v;
    a.nhead_q         = c.h_q;
    a.nhead_k         = c.h_kv;
    a.stride_q        = c.h_q * c.d_qk;
    a.stride_k        = c.h_kv * c.d_qk;
    a.stride_v        = c.h_kv * c.d_v;
    a.stride_o        = c.h_q * c.d_v;
    a.stride_do       = c.h_q * c.d_v + c.row_pad;
    a.stride_dq       = c.h_q * c.d_qk + 2 * c.row_pad;
    a.stride_dk       = c.h_kv * c.d_qk + 3 * c.row_pad;
    a.stride_dv       = c.h_kv * c.d_v + 4 * c.row_pad;
    a.nhead_stride_q  = c.d_qk;
    a.nhead_stride_k  = c.d_qk;
    a.nhead_stride_v  = c.d_v;
    a.nhead_stride_o  = c.d_v;
    a.nhead_stride_do = c.d_v;
    a.nhead_stride_dq = c.d_qk;
    a.nhead_stride_dk = c.d_qk;
    a.nhead_stride_dv = c.d_v;
    a.nhead_stride_lsed  = c.batch * c.s_q;
    a.mask_type          = c.mask;
    a.window_size_left   = c.left;
    a.window_size_right  = c.right;
    a.scale              = 1.0f / std::sqrt(static_cast<float>(c.d_qk));
    a.use_asm_v3         = c.use_asm;
    a.v3_atomic_fp32     = c.atomic32;
    a.v3_bf16_cvt        = 0;
    a.is_deterministic   = c.deterministic;
    a.aiter_workspace_ptr   = dev + 14 * 4096;
    a.aiter_workspace_bytes = c.ws_bytes;
    return a;
}

void check_mapping(const Case& c, const ragged_aiter_bwd_args& a, const aiter::mha_bwd_args& m)
{
    expect(m.is_group_mode, "is_group_mode");
    expect(m.data_type == (c.dtype == BF16 ? "bf16" : "fp16"), "data_type is " + m.data_type);
    expect_eq("use_asm_v3", m.use_asm_v3, c.use_asm);
    expect_eq("v3_atomic_fp32", m.v3_atomic_fp32, c.atomic32);
    expect_eq("v3_bf16_cvt", m.v3_bf16_cvt, 0);
    expect_eq("v3_api_check", m.v3_api_check, 0);
    expect_eq("is_deterministic", m.is_deterministic, c.deterministic);
    expect_eq("hdim_q", m.hdim_q, c.d_qk);
    expect_eq("hdim_v", m.hdim_v, c.d_v);
    expect_eq("mask_type", m.mask_type, c.mask);
    expect_eq("window_size_left", m.window_size_left, c.left);
    expect_eq("window_size_right", m.window_size_right, c.right);
    expect(m.scale == 1.0f / std::sqrt(static_cast<float>(c.d_qk)), "scale is 1/sqrt(D_qk)");
    expect_eq("bias_type", m.bias_type, 0);
    expect(!m.has_dbias && !m.has_dropout && !m.is_store_randval, "no dbias, dropout, randval");
    expect(m.p_drop == 0.0f && m.p_undrop == 1.0f, "p_drop 0, p_undrop 1");
    const char* names[] = {"q", "k", "v", "o", "do", "lse", "d", "dq", "dk", "dv"};
    const void* got[]   = {m.q_ptr, m.k_ptr, m.v_ptr, m.o_ptr, m.do_ptr, m.lse_ptr,
                           m.d_ptr, m.dq_ptr, m.dk_ptr, m.dv_ptr};
    const void* want[]  = {a.q_ptr, a.k_ptr, a.v_ptr, a.o_ptr, a.do_ptr, a.lse_ptr,
                           a.d_ptr, a.dq_ptr, a.dk_ptr, a.dv_ptr};
    for(int i = 0; i < 10; ++i)
        expect_ptr(names[i], got[i], want[i]);
    expect(m.bias_ptr == nullptr && m.rand_val_ptr == nullptr && m.dbias_ptr == nullptr &&
               m.sink_ptr == nullptr && m.d_sink_ptr == nullptr,
           "bias, randval, dbias, sink pointers are null");
    expect_ptr("seqstart_q_ptr", m.seqstart_q_ptr, a.seqstart_q_ptr);
    expect_ptr("seqstart_k_ptr", m.seqstart_k_ptr, a.seqstart_k_ptr);
    expect_ptr("cu_seqlen_q_ptr", m.cu_seqlen_q_ptr, c.padded ? a.cu_seqlen_q_ptr : nullptr);
    expect_ptr("cu_seqlen_k_ptr", m.cu_seqlen_k_ptr, c.padded ? a.cu_seqlen_k_ptr : nullptr);
    expect(m.seqlen_q_ptr == nullptr && m.seqlen_k_ptr == nullptr,
           "per-batch seqlen pointers are null (exclusive with cu_seqlen)");
    expect_eq("batch", m.batch, c.batch);
    expect_eq("seqlen_q", m.seqlen_q, c.batch * c.s_q);
    expect_eq("seqlen_k", m.seqlen_k, c.batch * c.s_kv);
    expect_eq("max_seqlen_q", m.max_seqlen_q, c.s_q);
    expect_eq("max_seqlen_k", m.max_seqlen_k, c.s_kv);
    expect_eq("nhead_q", m.nhead_q, c.h_q);
    expect_eq("nhead_k", m.nhead_k, c.h_kv);
    expect_eq("stride_q", m.stride_q, c.h_q * c.d_qk);
    expect_eq("stride_k", m.stride_k, c.h_kv * c.d_qk);
    expect_eq("stride_v", m.stride_v, c.h_kv * c.d_v);
    expect_eq("stride_o", m.stride_o, c.h_q * c.d_v);
    expect_eq("stride_do", m.stride_do, c.h_q * c.d_v + c.row_pad);
    expect_eq("stride_dq", m.stride_dq, c.h_q * c.d_qk + 2 * c.row_pad);
    expect_eq("stride_dk", m.stride_dk, c.h_kv * c.d_qk + 3 * c.row_pad);
    expect_eq("stride_dv", m.stride_dv, c.h_kv * c.d_v + 4 * c.row_pad);
    expect_eq("nhead_stride_q", m.nhead_stride_q, c.d_qk);
    expect_eq("nhead_stride_k", m.nhead_stride_k, c.d_qk);
    expect_eq("nhead_stride_v", m.nhead_stride_v, c.d_v);
    expect_eq("nhead_stride_o", m.nhead_stride_o, c.d_v);
    expect_eq("nhead_stride_do", m.nhead_stride_do, c.d_v);
    expect_eq("nhead_stride_dq", m.nhead_stride_dq, c.d_qk);
    expect_eq("nhead_stride_dk", m.nhead_stride_dk, c.d_qk);
    expect_eq("nhead_stride_dv", m.nhead_stride_dv, c.d_v);
    expect_eq("nhead_stride_lsed", m.nhead_stride_lsed, c.batch * c.s_q);
    const int zeros[] = {m.batch_stride_q,     m.batch_stride_k,      m.batch_stride_v,
                         m.batch_stride_bias,  m.batch_stride_o,      m.batch_stride_randval,
                         m.batch_stride_do,    m.batch_stride_lsed,   m.batch_stride_dq,
                         m.batch_stride_dk,    m.batch_stride_dv,     m.batch_stride_dbias,
                         m.stride_bias,        m.stride_randval,      m.stride_dbias,
                         m.nhead_stride_bias,  m.nhead_stride_randval, m.nhead_stride_dbias};
    int nonzero = 0;
    for(int z : zeros)
        nonzero += z != 0 ? 1 : 0;
    expect_eq("batch/bias/randval/dbias strides that are not 0", nonzero, 0);
    std::printf("  mha_bwd_args: %s group=%d det=%d asm=%d a32=%d hdim=%d/%d mask=%d (%d,%d) "
                "scale=%g seqlen=%d/%d max=%d/%d nhead=%d/%d strides q/do/dq/dk/dv=%d/%d/%d/%d/%d "
                "lsed=%d cu_seqlen=%s\n",
                m.data_type.c_str(), m.is_group_mode ? 1 : 0, m.is_deterministic ? 1 : 0,
                m.use_asm_v3 ? 1 : 0, m.v3_atomic_fp32 ? 1 : 0, m.hdim_q, m.hdim_v, m.mask_type,
                m.window_size_left,
                m.window_size_right, static_cast<double>(m.scale), m.seqlen_q, m.seqlen_k,
                m.max_seqlen_q, m.max_seqlen_k, m.nhead_q, m.nhead_k, m.stride_q, m.stride_do,
                m.stride_dq, m.stride_dk, m.stride_dv, m.nhead_stride_lsed,
                m.cu_seqlen_q_ptr != nullptr ? "set" : "null");
}

struct Request
{
    unsigned long bytes;
    bool zero;
};

// The case's own reading of its FAKE_MHA_BWD_ALLOCS string.
int parse_requests(const char* allocs, Request (&out)[4])
{
    int n = 0;
    for(const char* at = allocs; *at != '\0' && n < 4;)
    {
        char* end = nullptr;
        out[n].bytes = std::strtoul(at, &end, 10);
        out[n].zero  = *end == ':' && end[1] == '1';
        ++n;
        at = std::strchr(end, ',');
        at = at != nullptr ? at + 1 : "";
    }
    return n;
}

// The scratch the fake asked for: every granted block where the case says, inside the region;
// the zeroed ones zeroed on the caller's stream, exactly over the bytes asked (the fake runtime
// has no device allocator for the shim to call); one pinned block from hipHostMalloc when AITER got that far.
void check_allocations(const Case& c, const ragged_aiter_bwd_args& a, void* (*scratch)(int),
                       int granted, bool pinned_expected)
{
    Request req[4];
    const int asked = parse_requests(c.allocs, req);
    int want_granted = 0;
    while(want_granted < 4 && c.offsets[want_granted] >= 0)
        ++want_granted;
    expect_eq("blocks granted", granted, want_granted);
    const char* region = static_cast<const char*>(a.aiter_workspace_ptr);
    int want_zeros = 0;
    for(int i = 0; i < want_granted && i < asked; ++i)
    {
        expect_ptr("granted block", scratch(i), region + c.offsets[i]);
        want_zeros += req[i].zero ? 1 : 0;
    }
    int zeros = 0, host = 0;
    for(int i = 0; i < fake_hip_memory_event_count(); ++i)
    {
        const fake_hip_memory_event& e = *fake_hip_memory_event_at(i);
        if(e.kind == 'H')
        {
            ++host;
            continue;
        }
        expect_ptr("memset stream", e.stream, a.stream);
        // The zeroed blocks, in request order.
        int k = -1;
        for(int i = 0, seen = 0; i < want_granted; ++i)
            if(req[i].zero && seen++ == zeros)
            {
                k = i;
                break;
            }
        expect(k >= 0, "a memset the case did not ask for");
        if(k >= 0)
        {
            expect_ptr("zeroed block", e.ptr, region + c.offsets[k]);
            expect_eq("zeroed bytes", static_cast<unsigned long>(e.bytes), req[k].bytes);
        }
        ++zeros;
    }
    expect_eq("blocks zeroed", zeros, want_zeros);
    expect_eq("pinned blocks", host, pinned_expected ? 1 : 0);
    std::printf("  workspace: %d block(s) of %u reserved bytes at offsets", granted, c.ws_bytes);
    for(int i = 0; i < granted; ++i)
        std::printf(" %td", static_cast<const char*>(scratch(i)) - region);
    std::printf(", %d zeroed on the stream, %d pinned\n", zeros, host);
}

int run(const char* shim_path, const char* fake_path, const Case& c)
{
    std::string lib_path = fake_path;
    if(c.library == Library::Missing)
        lib_path = "/nonexistent/libmha_bwd.so";
    if(c.library == Library::WithoutSymbol)
    {
        // A real shared library that is not AITER: the fake HIP runtime next to the fake.
        const std::string f = fake_path;
        lib_path = f.substr(0, f.rfind('/') + 1) + "libamdhip64.so";
    }
    setenv("RAGGED_SDPA_AITER_MHA_BWD", lib_path.c_str(), 1);
    if(c.behaviour == Behaviour::NoKernel)
        setenv("FAKE_MHA_BWD_RETURN", "-1", 1);
    if(c.behaviour == Behaviour::Throws)
        setenv("FAKE_MHA_BWD_THROW", "1", 1);
    setenv("FAKE_MHA_BWD_ALLOCS", c.allocs, 1);

    void* shim = dlopen(shim_path, RTLD_NOW | RTLD_LOCAL);
    if(shim == nullptr)
    {
        std::printf("FAIL: dlopen %s: %s\n", shim_path, dlerror());
        return 1;
    }
    auto abi        = symbol<uint32_t (*)()>(shim, "ragged_aiter_shim_bwd_abi_version");
    auto available  = symbol<int32_t (*)(char*, uint32_t)>(shim, "ragged_aiter_mha_bwd_available");
    auto bwd        = symbol<int32_t (*)(const ragged_aiter_bwd_args*)>(shim, "ragged_aiter_mha_bwd");
    auto last_error = symbol<const char* (*)()>(shim, "ragged_aiter_shim_last_error");
    std::printf("case %s (bwd abi %u)\n", c.name, abi());
    expect_eq("bwd abi version", abi(), RAGGED_AITER_SHIM_BWD_ABI_VERSION);

    char where[512];
    const int32_t avail = available(where, sizeof where);
    const std::string avail_error = last_error();
    std::printf("  available: %d %s\n", avail, avail == OK ? where : avail_error.c_str());
    expect_eq("available", avail, c.library == FAKE ? OK : MISSING);
    if(c.library == FAKE)
        expect(std::string(where) == fake_path, std::string("found at ") + fake_path);
    if(c.library == Library::Missing)
        expect(avail_error.find("libmha_bwd.so not found at /nonexistent/libmha_bwd.so") == 0,
               "the reason says libmha_bwd.so was not found, and where");
    if(c.library == Library::WithoutSymbol)
        expect(avail_error == "symbol aiter::mha_bwd (" RAGGED_AITER_MHA_BWD_SYMBOL ") absent from " +
                                  lib_path,
               "the reason names the absent symbol and the library");

    char* dev = device_pages(16);
    expect_eq("NULL args", bwd(nullptr), RAGGED_AITER_BAD_ARGS);
    ragged_aiter_bwd_args bad = map(c, dev);
    bad.struct_size           = 16;
    expect_eq("short struct_size", bwd(&bad), RAGGED_AITER_BAD_ARGS);
    bad        = map(c, dev);
    bad.d_ptr  = nullptr;
    expect_eq("NULL d_ptr", bwd(&bad), RAGGED_AITER_BAD_ARGS);
    expect(std::string(last_error()).find("d_ptr") != std::string::npos, "the reason names d_ptr");
    bad                     = map(c, dev);
    bad.aiter_workspace_ptr = nullptr;
    expect_eq("NULL aiter_workspace_ptr with bytes", bwd(&bad), RAGGED_AITER_BAD_ARGS);
    expect(std::string(last_error()).find("aiter_workspace_ptr") != std::string::npos,
           "the reason names aiter_workspace_ptr");

    const ragged_aiter_bwd_args a = map(c, dev);
    const int32_t status          = bwd(&a);
    std::printf("  mha_bwd: %d %s\n", status, last_error());
    expect_eq("mha_bwd status", status, c.expect_status);
    if(c.behaviour == Behaviour::NoKernel)
        expect(std::string(last_error()).find("aiter::mha_bwd found no kernel") == 0,
               "the reason says no kernel");
    if(c.behaviour == Behaviour::Throws)
        expect(std::string(last_error()) == "fake mha_bwd: thrown as asked", "the exception's text");
    if(c.expect_status == SMALL)
    {
        const std::string why = last_error();
        expect(why.find("the engine reserved " + std::to_string(c.ws_bytes) + " bytes") !=
                   std::string::npos,
               "the reason names the reserved bytes");
        expect(why.find("AITER asked for ") == 0, "the reason names AITER's request");
    }

    if(c.library == FAKE)
    {
        void* fake = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
        expect(fake != nullptr, "the shim loaded the fake libmha_bwd.so");
        if(fake == nullptr)
            return 1;
        auto calls   = symbol<int (*)()>(fake, "fake_mha_bwd_calls");
        auto last    = symbol<const aiter::mha_bwd_args* (*)()>(fake, "fake_mha_bwd_last");
        auto allocs  = symbol<int (*)()>(fake, "fake_mha_bwd_allocs");
        auto scratch = symbol<void* (*)(int)>(fake, "fake_mha_bwd_scratch");
        auto pinned  = symbol<const void* (*)()>(fake, "fake_mha_bwd_pinned");
        auto release = symbol<void (*)()>(fake, "fake_mha_bwd_release_pinned");
        auto stream  = symbol<int (*)()>(fake, "fake_mha_bwd_saw_stream");
        expect_eq("aiter::mha_bwd calls (bad args never reach it)", calls(), 1);
        expect_eq("stream_config carries the caller's stream", stream(), 1);
        check_mapping(c, a, *last());
        // AITER got past its scratch requests (and took its pinned block) unless it threw or
        // the region was too small.
        const bool ran = c.behaviour != Behaviour::Throws && c.expect_status != SMALL;
        check_allocations(c, a, scratch, allocs(), ran);
        if(ran)
        {
            // Released (as AITER's keepalive would, later), the pinned block is reused by the
            // next call instead of a second hipHostMalloc; the region is carved from its start
            // again.
            const void* first = pinned();
            release();
            const int32_t again = bwd(&a);
            expect_eq("second mha_bwd status", again, c.expect_status);
            expect_ptr("pinned block reused", pinned(), first);
            expect_ptr("first block again at the region's start", scratch(0),
                       a.aiter_workspace_ptr);
            int host = 0;
            for(int i = 0; i < fake_hip_memory_event_count(); ++i)
                host += fake_hip_memory_event_at(i)->kind == 'H' ? 1 : 0;
            expect_eq("pinned blocks after two calls", host, 1);
        }
    }
    else
        expect_eq("memory events without a library", fake_hip_memory_event_count(), 0);
    return finish();
}

} // namespace

int main(int argc, char** argv)
{
    return case_driver::case_main(argc, argv, kCases, "SHIM.so FAKE_MHA_BWD.so", run);
}
