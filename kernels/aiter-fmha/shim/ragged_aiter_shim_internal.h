// Internal to the shim library (ragged_aiter_shim.cpp, ragged_aiter_shim_bwd.cpp): the parts the
// forward and backward entry points share. Not installed, not part of either C contract.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "ragged_aiter_shim.h"

namespace ragged_aiter_shim_detail {

// One last-error slot per thread for every entry point of the library (defined in
// ragged_aiter_shim.cpp).
extern thread_local std::string g_last_error;

inline int32_t fail(int32_t status, std::string message)
{
    g_last_error = std::move(message);
    return status;
}

// AITER's name for the C contract's data_type (checked to be a known one before use).
inline const char* dtype_name(int32_t data_type)
{
    if(data_type == RAGGED_AITER_DTYPE_FP8BF16)
        return "fp8bf16";
    return data_type == RAGGED_AITER_DTYPE_BF16 ? "bf16" : "fp16";
}

// Copies `text` into the caller's buffer of `size` bytes, truncated and NUL-terminated; nothing
// when the buffer is NULL or empty.
inline void copy_out(const std::string& text, char* buffer, uint32_t size)
{
    if(buffer == nullptr || size == 0)
        return;
    const std::size_t n = std::min<std::size_t>(text.size(), size - 1);
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
}

// The checks both argument structs share: present, built from the same header (`header` names
// it in the message), a known data type (FP8BF16 only where `fp8_allowed`: the forward).
template <class Args>
int32_t check_common_args(const Args* args, const char* header, bool fp8_allowed = false)
{
    if(args == nullptr)
        return fail(RAGGED_AITER_BAD_ARGS, "args is NULL");
    if(args->struct_size != sizeof(Args))
        return fail(RAGGED_AITER_BAD_ARGS,
                    "struct_size " + std::to_string(args->struct_size) + " != " +
                        std::to_string(sizeof(Args)) + " (plugin and shim built from different " +
                        header + ")");
    const bool fp8 = fp8_allowed && args->data_type == RAGGED_AITER_DTYPE_FP8BF16;
    if(args->data_type != RAGGED_AITER_DTYPE_FP16 && args->data_type != RAGGED_AITER_DTYPE_BF16 &&
       !fp8)
        return fail(RAGGED_AITER_BAD_ARGS, "data_type " + std::to_string(args->data_type));
    return RAGGED_AITER_OK;
}

// Group mode's sequence addressing, the same fields in mha_fwd_args and mha_bwd_args: physical
// starts always; logical lengths only as cumulative arrays, because AITER's asm paths read
// cu_seqlen_* and ignore the per-batch seqlen_* pointers (the headers make the two exclusive).
template <class AiterArgs, class Args>
void set_group_mode_starts(AiterArgs& m, const Args& a)
{
    m.seqstart_q_ptr  = a.seqstart_q_ptr;
    m.seqstart_k_ptr  = a.seqstart_k_ptr;
    m.seqlen_q_ptr    = nullptr;
    m.seqlen_k_ptr    = nullptr;
    m.cu_seqlen_q_ptr = a.cu_seqlen_q_ptr;
    m.cu_seqlen_k_ptr = a.cu_seqlen_k_ptr;
}

} // namespace ragged_aiter_shim_detail
