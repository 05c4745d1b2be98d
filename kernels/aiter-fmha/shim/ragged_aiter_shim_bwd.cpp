// extern "C" bridge from the ragged-SDPA plugin to AITER's C++ FMHA backward (aiter::mha_bwd),
// group mode. Contract: ragged_aiter_shim_bwd.h.
//
// Unlike the forward, the shim does not link AITER's backward library: libmha_bwd.so is a
// separate build (compile.py --api=bwd) that many AITER installs lack, and a hard link would stop
// the shim, and with it the forward, from loading there. The library is opened once with dlopen
// and aiter::mha_bwd resolved by its mangled name; this file is compiled against mha_bwd.h, so
// the function pointer's type is the header's own declaration.
//
// mha_bwd_args carries two allocator callbacks AITER calls during the call. Device scratch
// (workspace_alloc) is carved out of the region the engine reserved in the caller's workspace
// (aiter_workspace_ptr), zeroed with hipMemsetAsync on the caller's stream when asked: the
// engine sizes that region from graph dims, so an execution allocates no device memory, and a
// request beyond it throws before AITER has enqueued anything (CK asks once, right after
// choosing its kernels; the asm path asks before its launches). Pinned host memory
// (pinned_host_alloc: required in group mode; AITER keeps the returned shared_ptr alive with a
// stream host callback, so the deleter may run inside a HIP callback, where HIP calls are not
// allowed) comes from a shim-owned pool whose deleter only returns the block to the pool.

#include "ragged_aiter_shim_bwd.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mha_bwd.h"
#include "ragged_aiter_shim_internal.h"

namespace {

using ragged_aiter_shim_detail::check_common_args;
using ragged_aiter_shim_detail::copy_out;
using ragged_aiter_shim_detail::dtype_name;
using ragged_aiter_shim_detail::fail;
using ragged_aiter_shim_detail::g_last_error;
using ragged_aiter_shim_detail::set_group_mode_starts;
using MhaBwd = decltype(&aiter::mha_bwd);

// --- libmha_bwd.so, opened once -----------------------------------------------------------------

struct BwdLibrary
{
    MhaBwd fn = nullptr;
    std::string path;
    std::string error; // why fn is null
};

// The directory holding this shim, from the address of one of its functions.
std::string shim_directory()
{
    Dl_info info{};
    if(dladdr(reinterpret_cast<void*>(&ragged_aiter_shim_bwd_abi_version), &info) == 0 ||
       info.dli_fname == nullptr)
        return ".";
    const std::string file = info.dli_fname;
    const std::size_t slash = file.rfind('/');
    return slash == std::string::npos ? "." : file.substr(0, slash);
}

BwdLibrary open_library()
{
    BwdLibrary lib;
    const char* env = std::getenv("RAGGED_SDPA_AITER_MHA_BWD");
    lib.path        = env != nullptr && env[0] != '\0' ? env : shim_directory() + "/libmha_bwd.so";
    // RTLD_LOCAL: AITER's symbols stay out of the global namespace; never closed (AITER keeps
    // loaded code objects and statics for the process lifetime).
    void* handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if(handle == nullptr)
    {
        const char* why = dlerror();
        lib.error       = "libmha_bwd.so not found at " + lib.path + " (" +
                    (why != nullptr ? why : "dlopen failed") +
                    "; build it with AITER's compile.py --api=bwd, or set RAGGED_SDPA_AITER_MHA_BWD)";
        return lib;
    }
    void* sym = dlsym(handle, RAGGED_AITER_MHA_BWD_SYMBOL);
    if(sym == nullptr)
    {
        lib.error = "symbol aiter::mha_bwd (" RAGGED_AITER_MHA_BWD_SYMBOL ") absent from " + lib.path;
        return lib;
    }
    lib.fn = reinterpret_cast<MhaBwd>(sym);
    return lib;
}

const BwdLibrary& library()
{
    static const BwdLibrary lib = open_library();
    return lib;
}

// --- allocators handed to AITER ------------------------------------------------------------------

// AITER asked for more device scratch than the engine reserved.
class WorkspaceTooSmall : public std::runtime_error
{
public:
    using std::runtime_error::runtime_error;
};

constexpr std::size_t kBlockAlign = 256;

// Device scratch of one call: consecutive 256-byte-aligned blocks of the engine's region.
class RegionScratch
{
public:
    RegionScratch(void* base, std::uint64_t bytes, hipStream_t stream)
        : base_(static_cast<char*>(base)), bytes_(bytes), stream_(stream)
    {
    }

    void* allocate(std::size_t bytes, bool zero_init)
    {
        const std::uint64_t offset = (used_ + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
        if(base_ == nullptr || offset > bytes_ || bytes > bytes_ - offset)
            throw WorkspaceTooSmall(
                "AITER asked for " + std::to_string(bytes) + " bytes of device scratch (" +
                (zero_init ? "zeroed" : "uninitialised") + ") at offset " +
                std::to_string(offset) + "; the engine reserved " + std::to_string(bytes_) +
                " bytes (aiter_workspace_bytes)");
        void* p = base_ + offset;
        used_   = offset + bytes;
        if(zero_init && bytes > 0)
        {
            const hipError_t z = hipMemsetAsync(p, 0, bytes, stream_);
            if(z != hipSuccess)
                throw std::runtime_error("hipMemsetAsync of AITER's scratch failed (hipError " +
                                         std::to_string(static_cast<int>(z)) + ")");
        }
        return p;
    }

private:
    char* base_;
    std::uint64_t bytes_;
    hipStream_t stream_;
    std::uint64_t used_ = 0;
};

// Pinned host blocks, reused once AITER releases them; never returned to the system.
class PinnedPool
{
public:
    std::shared_ptr<void> take(std::size_t bytes)
    {
        void* block = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = std::find_if(free_.begin(), free_.end(),
                                   [bytes](const Block& b) { return b.bytes >= bytes; });
            if(it != free_.end())
            {
                block = it->ptr;
                bytes = it->bytes;
                free_.erase(it);
            }
        }
        if(block == nullptr)
        {
            const hipError_t e = hipHostMalloc(&block, std::max<std::size_t>(bytes, 1), 0);
            if(e != hipSuccess || block == nullptr)
                throw std::runtime_error("hipHostMalloc of " + std::to_string(bytes) +
                                         " pinned bytes for AITER failed (hipError " +
                                         std::to_string(static_cast<int>(e)) + ")");
        }
        // The deleter may run in a HIP host callback: no HIP call there, only the pool's lock.
        return std::shared_ptr<void>(block, [this, bytes](void* p) {
            std::lock_guard<std::mutex> lock(mutex_);
            free_.push_back(Block{p, bytes});
        });
    }

private:
    struct Block
    {
        void* ptr;
        std::size_t bytes;
    };
    std::mutex mutex_;
    std::vector<Block> free_;
};

PinnedPool& pinned_pool()
{
    static PinnedPool* pool = new PinnedPool(); // outlives every callback (never destroyed)
    return *pool;
}

// --- the mapping ------------------------------------------------------------------------------

aiter::mha_bwd_args to_aiter(const ragged_aiter_bwd_args& a)
{
    aiter::mha_bwd_args m{};
    m.use_asm_v3     = a.use_asm_v3 != 0;
    m.v3_atomic_fp32 = a.v3_atomic_fp32 != 0;
    m.v3_bf16_cvt    = a.v3_bf16_cvt;
    m.v3_api_check   = false;

    m.hdim_q           = a.hdim_q;
    m.hdim_v           = a.hdim_v;
    m.data_type        = dtype_name(a.data_type);
    m.is_group_mode    = true;
    m.mask_type        = a.mask_type;
    m.bias_type        = 0;
    m.has_dbias        = false;
    m.has_dropout      = false;
    m.is_store_randval = false;
    m.is_deterministic = a.is_deterministic != 0;

    m.q_ptr        = a.q_ptr;
    m.k_ptr        = a.k_ptr;
    m.v_ptr        = a.v_ptr;
    m.bias_ptr     = nullptr;
    m.o_ptr        = a.o_ptr;
    m.lse_ptr      = a.lse_ptr;
    m.do_ptr       = a.do_ptr;
    m.d_ptr        = a.d_ptr;
    m.rand_val_ptr = nullptr;
    m.dq_ptr       = a.dq_ptr;
    m.dk_ptr       = a.dk_ptr;
    m.dv_ptr       = a.dv_ptr;
    m.dbias_ptr    = nullptr;
    m.sink_ptr     = nullptr;
    m.d_sink_ptr   = nullptr;

    set_group_mode_starts(m, a);

    m.seqlen_q     = a.seqlen_q;
    m.seqlen_k     = a.seqlen_k;
    m.batch        = a.batch;
    m.max_seqlen_q = a.max_seqlen_q;
    m.max_seqlen_k = a.max_seqlen_k;
    m.nhead_q      = a.nhead_q;
    m.nhead_k      = a.nhead_k;
    m.scale        = a.scale;

    m.stride_q       = a.stride_q;
    m.stride_k       = a.stride_k;
    m.stride_v       = a.stride_v;
    m.stride_bias    = 0;
    m.stride_o       = a.stride_o;
    m.stride_randval = 0;
    m.stride_do      = a.stride_do;
    m.stride_dq      = a.stride_dq;
    m.stride_dk      = a.stride_dk;
    m.stride_dv      = a.stride_dv;
    m.stride_dbias   = 0;

    m.nhead_stride_q       = a.nhead_stride_q;
    m.nhead_stride_k       = a.nhead_stride_k;
    m.nhead_stride_v       = a.nhead_stride_v;
    m.nhead_stride_bias    = 0;
    m.nhead_stride_o       = a.nhead_stride_o;
    m.nhead_stride_randval = 0;
    m.nhead_stride_do      = a.nhead_stride_do;
    m.nhead_stride_lsed    = a.nhead_stride_lsed;
    m.nhead_stride_dq      = a.nhead_stride_dq;
    m.nhead_stride_dk      = a.nhead_stride_dk;
    m.nhead_stride_dv      = a.nhead_stride_dv;
    m.nhead_stride_dbias   = 0;

    // Group mode: every batch starts at its seqstart, never at b * batch_stride (pitfall 8).
    m.batch_stride_q       = 0;
    m.batch_stride_k       = 0;
    m.batch_stride_v       = 0;
    m.batch_stride_bias    = 0;
    m.batch_stride_o       = 0;
    m.batch_stride_randval = 0;
    m.batch_stride_do      = 0;
    m.batch_stride_lsed    = 0;
    m.batch_stride_dq      = 0;
    m.batch_stride_dk      = 0;
    m.batch_stride_dv      = 0;
    m.batch_stride_dbias   = 0;

    m.window_size_left  = a.window_size_left;
    m.window_size_right = a.window_size_right;
    m.p_drop            = 0.0f;
    m.p_undrop          = 1.0f;
    m.drop_seed_offset  = std::pair<uint64_t, uint64_t>{0, 0};
    return m;
}

int32_t check_args(const ragged_aiter_bwd_args* args)
{
    const int32_t common = check_common_args(args, "ragged_aiter_shim_bwd.h");
    if(common != RAGGED_AITER_OK)
        return common;
    if(args->lse_ptr == nullptr || args->d_ptr == nullptr)
        return fail(RAGGED_AITER_BAD_ARGS, std::string(args->lse_ptr == nullptr ? "lse_ptr" : "d_ptr") +
                                               " is NULL (the backward needs both)");
    if(args->aiter_workspace_ptr == nullptr && args->aiter_workspace_bytes != 0)
        return fail(RAGGED_AITER_BAD_ARGS,
                    "aiter_workspace_ptr is NULL with aiter_workspace_bytes " +
                        std::to_string(args->aiter_workspace_bytes));
    return RAGGED_AITER_OK;
}

} // namespace

extern "C" uint32_t ragged_aiter_shim_bwd_abi_version(void)
{
    return RAGGED_AITER_SHIM_BWD_ABI_VERSION;
}

extern "C" int32_t ragged_aiter_mha_bwd_available(char* where, uint32_t where_size)
{
    g_last_error.clear();
    copy_out("", where, where_size);
    try
    {
        const BwdLibrary& lib = library();
        if(lib.fn == nullptr)
            return fail(RAGGED_AITER_LIBRARY_MISSING, lib.error);
        copy_out(lib.path, where, where_size);
        return RAGGED_AITER_OK;
    }
    catch(const std::exception& e)
    {
        return fail(RAGGED_AITER_EXCEPTION, e.what());
    }
    catch(...)
    {
        return fail(RAGGED_AITER_EXCEPTION, "unknown C++ exception opening libmha_bwd.so");
    }
}

extern "C" int32_t ragged_aiter_mha_bwd(const ragged_aiter_bwd_args* args)
{
    g_last_error.clear();
    if(const int32_t bad = check_args(args); bad != RAGGED_AITER_OK)
        return bad;
    try
    {
        const BwdLibrary& lib = library();
        if(lib.fn == nullptr)
            return fail(RAGGED_AITER_LIBRARY_MISSING, lib.error);
        const hipStream_t stream = static_cast<hipStream_t>(args->stream);
        RegionScratch scratch(args->aiter_workspace_ptr, args->aiter_workspace_bytes, stream);
        aiter::mha_bwd_args m = to_aiter(*args);
        m.workspace_alloc     = [&scratch](std::size_t bytes, bool zero_init) {
            return scratch.allocate(bytes, zero_init);
        };
        m.pinned_host_alloc = [](std::size_t bytes) { return pinned_pool().take(bytes); };
        ck_tile::stream_config config{};
        config.stream_id_   = stream;
        config.time_kernel_ = false;
        const float ret     = lib.fn(std::move(m), config);
        if(ret < 0.0f)
            return fail(RAGGED_AITER_UNSUPPORTED,
                        std::string("aiter::mha_bwd found no kernel (dtype ") +
                            dtype_name(args->data_type) +
                            ", hdim " + std::to_string(args->hdim_q) + "/" +
                            std::to_string(args->hdim_v) + ", mask " +
                            std::to_string(args->mask_type) + " (" +
                            std::to_string(args->window_size_left) + ", " +
                            std::to_string(args->window_size_right) + "), asm " +
                            std::to_string(args->use_asm_v3) + ")");
        return RAGGED_AITER_OK;
    }
    catch(const WorkspaceTooSmall& e)
    {
        return fail(RAGGED_AITER_WORKSPACE_TOO_SMALL, e.what());
    }
    catch(const std::exception& e)
    {
        return fail(RAGGED_AITER_EXCEPTION, e.what());
    }
    catch(...)
    {
        return fail(RAGGED_AITER_EXCEPTION, "unknown C++ exception from aiter::mha_bwd");
    }
}
