// A stand-in for AITER's libmha_bwd.so, for CI only. AITER's mha_bwd.cu cannot be built from the
// vendored subset (it needs CK's types even for its asm path), so the shim's backward entry is
// exercised against this library instead: it defines aiter::mha_bwd from the real mha_bwd.h
// (ENABLE_CK=0), so it exports exactly the mangled symbol the header declares, and the shim finds
// it only if RAGGED_AITER_MHA_BWD_SYMBOL spells that symbol. It records the mha_bwd_args it is
// handed for the case driver and calls the two allocators the way AITER's group mode does: device
// scratch through workspace_alloc (CK's deterministic path asks once for its whole workspace,
// uninitialised; its asm path asks once, zero-initialised), one pinned host block kept past the
// call. What it cannot show: which kernels AITER would pick and the kernel arguments it would
// derive.
//
// Environment: FAKE_MHA_BWD_RETURN (a float, default 1.5: "ran, this many ms"; negative is
// AITER's "no kernel"), FAKE_MHA_BWD_THROW (set: throw std::runtime_error), FAKE_MHA_BWD_ALLOCS
// (the workspace_alloc requests in order, "BYTES:ZERO,...", default "4096:1,100:0"; at most 4).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "mha_bwd.h"

namespace {
constexpr int kMaxAllocs = 4;
aiter::mha_bwd_args g_last{};
int g_calls = 0;
int g_allocs = 0;
void* g_scratch[kMaxAllocs] = {};
std::shared_ptr<void> g_pinned; // held after the call, as AITER's stream keepalive would
int g_stream_is_callers = 0;
} // namespace

namespace aiter {
float mha_bwd(mha_bwd_args args, const ck_tile::stream_config& config)
{
    ++g_calls;
    g_last              = args;
    g_stream_is_callers = config.stream_id_ != nullptr ? 1 : 0;
    g_allocs            = 0;
    if(std::getenv("FAKE_MHA_BWD_THROW") != nullptr)
        throw std::runtime_error("fake mha_bwd: thrown as asked");
    if(!args.workspace_alloc || !args.pinned_host_alloc)
        return -2.0f; // AITER's group mode refuses to run without both
    const char* plan = std::getenv("FAKE_MHA_BWD_ALLOCS");
    const char* at   = plan != nullptr ? plan : "4096:1,100:0";
    while(*at != '\0' && g_allocs < kMaxAllocs)
    {
        char* end          = nullptr;
        const auto bytes   = static_cast<std::size_t>(std::strtoull(at, &end, 10));
        const bool zero    = *end == ':' && end[1] == '1';
        g_scratch[g_allocs++] = args.workspace_alloc(bytes, zero);
        at = std::strchr(end, ',');
        at = at != nullptr ? at + 1 : "";
    }
    g_pinned        = args.pinned_host_alloc(256);
    const char* ret = std::getenv("FAKE_MHA_BWD_RETURN");
    return ret != nullptr ? std::strtof(ret, nullptr) : 1.5f;
}
} // namespace aiter

extern "C" {
const aiter::mha_bwd_args* fake_mha_bwd_last(void) { return &g_last; }
int fake_mha_bwd_calls(void) { return g_calls; }
int fake_mha_bwd_allocs(void) { return g_allocs; }
void* fake_mha_bwd_scratch(int i) { return i >= 0 && i < g_allocs ? g_scratch[i] : nullptr; }
const void* fake_mha_bwd_pinned(void) { return g_pinned.get(); }
void fake_mha_bwd_release_pinned(void) { g_pinned.reset(); }
int fake_mha_bwd_saw_stream(void) { return g_stream_is_callers; }
}
