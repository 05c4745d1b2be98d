// extern "C" bridge from the ragged-SDPA plugin to AITER's C++ FMHA forward.
//
// AITER has no C ABI for attention: aiter::mha_fwd takes an mha_fwd_args holding std::string and
// std::variant, plus a ck_tile::stream_config. The plugin is Rust and loads this library at run
// time, so it talks to a plain C struct (ragged_aiter_shim.h) and this file does the C++ side:
// it fills mha_fwd_args field by field (by name, so a reordering of AITER's struct is harmless),
// calls aiter::mha_fwd on the caller's stream, and turns exceptions and "no kernel" answers into
// status codes. Build: kernels/aiter/build_shim.sh on a ROCm machine.
//
// Group mode only (ragged batches). Deliberately not copied from AITER's torch binding: its
// "drop the causal mask when max_seqlen_q == 1" shortcut, which is wrong for top-left masks
// (ragged-sdpa.md §9, pitfall 3).

#include "ragged_aiter_shim.h"

#include <exception>
#include <string>
#include <utility>

#include "mha_fwd.h"

#ifndef RAGGED_AITER_SHIM_GPU_TARGETS
#error "build with -DRAGGED_AITER_SHIM_GPU_TARGETS=\"\\\"gfx942;gfx950\\\"\" (see build_shim.sh)"
#endif

namespace {

thread_local std::string g_last_error;

int32_t fail(int32_t status, std::string message)
{
    g_last_error = std::move(message);
    return status;
}

aiter::mha_fwd_args to_aiter(const ragged_aiter_fwd_args& a)
{
    aiter::mha_fwd_args m{};
    m.use_asm_v3      = a.use_asm_v3 != 0;
    m.v3_api_check    = a.v3_api_check != 0;
    m.how_v3_bf16_cvt = a.how_v3_bf16_cvt;

    m.data_type     = a.data_type == RAGGED_AITER_DTYPE_BF16 ? "bf16" : "fp16";
    m.is_group_mode = true;
    m.bias_type     = 0;
    m.has_lse       = a.has_lse != 0;
    m.qscale_type   = 0;
    m.has_sink      = false;

    m.q_ptr         = a.q_ptr;
    m.k_ptr         = a.k_ptr;
    m.v_ptr         = a.v_ptr;
    m.bias_ptr      = nullptr;
    m.q_descale_ptr = nullptr;
    m.k_descale_ptr = nullptr;
    m.v_descale_ptr = nullptr;
    m.rand_val_ptr  = nullptr;
    m.lse_ptr       = a.has_lse != 0 ? a.lse_ptr : nullptr;
    m.o_ptr         = a.o_ptr;

    // Physical starts always; logical lengths only as cumulative arrays, because the asm path
    // (fmha_fwd_v3) reads cu_seqlen_* and ignores the per-batch seqlen_* pointers.
    m.seqstart_q_ptr             = a.seqstart_q_ptr;
    m.seqstart_k_ptr             = a.seqstart_k_ptr;
    m.seqlen_q_ptr               = nullptr;
    m.seqlen_k_ptr               = nullptr;
    m.cu_seqlen_q_ptr            = a.cu_seqlen_q_ptr;
    m.cu_seqlen_k_ptr            = a.cu_seqlen_k_ptr;
    m.block_scale_seqstart_q_ptr = nullptr;
    m.block_scale_seqstart_k_ptr = nullptr;
    m.sink_ptr                   = nullptr;

    m.seqlen_q     = a.seqlen_q;
    m.seqlen_k     = a.seqlen_k;
    m.batch        = a.batch;
    m.max_seqlen_q = a.max_seqlen_q;
    m.hdim_q       = a.hdim_q;
    m.hdim_v       = a.hdim_v;
    m.nhead_q      = a.nhead_q;
    m.nhead_k      = a.nhead_k;

    m.scale_s         = a.scale_s;
    m.logits_soft_cap = 0.0f;

    m.stride_q       = a.stride_q;
    m.stride_k       = a.stride_k;
    m.stride_v       = a.stride_v;
    m.stride_bias    = 0;
    m.stride_randval = 0;
    m.stride_o       = a.stride_o;

    m.nhead_stride_q         = a.nhead_stride_q;
    m.nhead_stride_k         = a.nhead_stride_k;
    m.nhead_stride_v         = a.nhead_stride_v;
    m.nhead_stride_bias      = 0;
    m.nhead_stride_randval   = 0;
    m.nhead_stride_lse       = a.has_lse != 0 ? a.nhead_stride_lse : 0;
    m.nhead_stride_o         = a.nhead_stride_o;
    m.nhead_stride_q_descale = 0;
    m.nhead_stride_k_descale = 0;
    m.nhead_stride_v_descale = 0;

    // Group mode: every batch starts at its seqstart, never at b * batch_stride (pitfall 8).
    m.batch_stride_q         = 0;
    m.batch_stride_k         = 0;
    m.batch_stride_v         = 0;
    m.batch_stride_bias      = 0;
    m.batch_stride_randval   = 0;
    m.batch_stride_lse       = 0;
    m.batch_stride_o         = 0;
    m.batch_stride_q_descale = 0;
    m.batch_stride_k_descale = 0;
    m.batch_stride_v_descale = 0;

    m.window_size_left  = a.window_size_left;
    m.window_size_right = a.window_size_right;
    m.sink_size         = 0;
    m.mask_type         = a.mask_type;
    m.min_seqlen_q      = 0;

    m.p_drop           = 0.0f;
    m.s_randval        = false;
    m.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};

    // Only read with block-scaled fp8; AITER's own bindings pass 128.
    m.block_scale_size_q  = 128;
    m.block_scale_size_kv = 128;
    return m;
}

} // namespace

extern "C" uint32_t ragged_aiter_shim_abi_version(void) { return RAGGED_AITER_SHIM_ABI_VERSION; }

extern "C" const char* ragged_aiter_shim_gpu_targets(void) { return RAGGED_AITER_SHIM_GPU_TARGETS; }

extern "C" const char* ragged_aiter_shim_last_error(void) { return g_last_error.c_str(); }

extern "C" int32_t ragged_aiter_mha_fwd(const ragged_aiter_fwd_args* args)
{
    g_last_error.clear();
    if(args == nullptr)
    {
        return fail(RAGGED_AITER_BAD_ARGS, "args is NULL");
    }
    if(args->struct_size != sizeof(ragged_aiter_fwd_args))
    {
        return fail(RAGGED_AITER_BAD_ARGS,
                    "struct_size " + std::to_string(args->struct_size) + " != " +
                        std::to_string(sizeof(ragged_aiter_fwd_args)) +
                        " (plugin and shim built from different ragged_aiter_shim.h)");
    }
    if(args->data_type != RAGGED_AITER_DTYPE_FP16 && args->data_type != RAGGED_AITER_DTYPE_BF16)
    {
        return fail(RAGGED_AITER_BAD_ARGS, "data_type " + std::to_string(args->data_type));
    }
    try
    {
        ck_tile::stream_config stream{};
        stream.stream_id_   = static_cast<hipStream_t>(args->stream);
        stream.time_kernel_ = false;
        const float ret     = aiter::mha_fwd(to_aiter(*args), stream);
        if(ret < 0.0f)
        {
            return fail(RAGGED_AITER_UNSUPPORTED,
                        std::string(args->v3_api_check != 0 ? "asm fmha_v3 would not run"
                                                            : "aiter::mha_fwd found no kernel") +
                            " (dtype " + (args->data_type == RAGGED_AITER_DTYPE_BF16 ? "bf16" : "fp16") +
                            ", hdim " + std::to_string(args->hdim_q) + "/" +
                            std::to_string(args->hdim_v) + ", mask " +
                            std::to_string(args->mask_type) + ")");
        }
        return RAGGED_AITER_OK;
    }
    catch(const std::exception& e)
    {
        return fail(RAGGED_AITER_EXCEPTION, e.what());
    }
    catch(...)
    {
        return fail(RAGGED_AITER_EXCEPTION, "unknown C++ exception from aiter::mha_fwd");
    }
}
