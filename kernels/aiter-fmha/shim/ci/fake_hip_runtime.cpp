// A stand-in for libamdhip64 with exactly the entry points AITER's asm-only libmha_fwd.so and
// the shim (forward and backward) import, so that both run unmodified on a machine without a GPU (CI). It pretends to be
// one device whose gcnArchName and PCI chip id come from the environment, checks what it is handed
// the way a real runtime would fail on it, and records every kernel launch for the case driver
// (shim_cases.cpp) instead of running it.
//
// Environment:
//   FAKE_HIP_ARCH     gcnArchName, default "gfx942:sramecc+:xnack-"
//   FAKE_HIP_CHIP_ID  hipDeviceAttributePciChipId, default 0x74a1 (MI300X); 0x74a2 is an MI308X
//
// Checks that make a call fail as ROCm would: __hipRegisterFatBinary refuses an image that is
// neither a clang offload bundle nor an AMDGPU ELF; hipGetFuncBySymbol knows only functions whose
// name is in their code object's string table; hipModuleLaunchKernel refuses an unknown function
// or a launch without a kernarg buffer.
#include <hip/hip_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "fake_hip_runtime.h"

namespace {

struct Image
{
    const unsigned char* data = nullptr;
    std::size_t size          = 0;
    bool bundle               = false; // clang offload bundle (the libraries' own device code)
    std::string arch;                  // from e_flags for a plain AMDGPU ELF
};

struct Function
{
    const void* host_symbol = nullptr;
    const Image* image      = nullptr;
    std::string name;
    bool found = false; // the name is in the image
};

std::mutex g_mutex;
std::vector<Image*> g_images;
std::vector<Function*> g_functions;
std::vector<fake_hip_launch> g_launches;
std::vector<fake_hip_memory_event> g_memory;

const char* env_or(const char* name, const char* fallback)
{
    const char* v = std::getenv(name);
    return v != nullptr && v[0] != '\0' ? v : fallback;
}

std::string device_arch() { return env_or("FAKE_HIP_ARCH", "gfx942:sramecc+:xnack-"); }

std::string processor() { return device_arch().substr(0, device_arch().find(':')); }

// EF_AMDGPU_MACH_* of the processors whose code objects AITER ships (llvm BinaryFormat/ELF.h).
std::string mach_name(uint32_t e_flags)
{
    switch(e_flags & 0xffu)
    {
    case 0x4c: return "gfx942";
    case 0x4f: return "gfx950";
    default: return "unknown-mach-" + std::to_string(e_flags & 0xffu);
    }
}

// A plain ELF's extent is its section header table's end (it comes last in AMDGPU code objects).
bool read_elf(const unsigned char* p, Image& image)
{
    if(std::memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 /* ELFCLASS64 */)
        return false;
    uint16_t machine = 0, shentsize = 0, shnum = 0;
    uint32_t flags   = 0;
    uint64_t shoff   = 0;
    std::memcpy(&machine, p + 18, 2);
    std::memcpy(&shoff, p + 40, 8);
    std::memcpy(&flags, p + 48, 4);
    std::memcpy(&shentsize, p + 58, 2);
    std::memcpy(&shnum, p + 60, 2);
    if(machine != 224 /* EM_AMDGPU */)
        return false;
    image.size = static_cast<std::size_t>(shoff) + std::size_t{shentsize} * shnum;
    image.arch = mach_name(flags);
    return true;
}

bool image_has_name(const Image& image, const std::string& name)
{
    if(image.bundle)
        return true; // the libraries' own (empty) device code: nothing recorded, nothing launched
    const std::string needle = name + '\0';
    for(std::size_t i = 0; i + needle.size() <= image.size; ++i)
        if(std::memcmp(image.data + i, needle.data(), needle.size()) == 0)
            return true;
    return false;
}

void set_string(char* dst, std::size_t cap, const std::string& s)
{
    std::snprintf(dst, cap, "%s", s.c_str());
}

} // namespace

extern "C" {

// The fat-binary wrapper clang and AITER both pass: magic, version, image pointer.
struct fake_fatbin_wrapper
{
    uint32_t magic;
    uint32_t version;
    const void* binary;
    void* unused;
};

void** __hipRegisterFatBinary(const void* wrapper_ptr) noexcept
{
    const auto* w = static_cast<const fake_fatbin_wrapper*>(wrapper_ptr);
    if(w == nullptr || w->magic != 0x48495046u /* "HIPF" */ || w->binary == nullptr)
        return nullptr;
    auto* image = new Image;
    image->data = static_cast<const unsigned char*>(w->binary);
    if(std::memcmp(image->data, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0)
        image->bundle = true;
    else if(!read_elf(image->data, *image))
    {
        delete image;
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    g_images.push_back(image);
    return reinterpret_cast<void**>(image);
}

void __hipUnregisterFatBinary(void** module) noexcept { (void)module; }

void __hipRegisterFunction(void** module,
                           const void* host_function,
                           char* device_function,
                           const char* device_name,
                           unsigned int thread_limit,
                           void* tid,
                           void* bid,
                           dim3* block_dim,
                           dim3* grid_dim,
                           int* w_size) noexcept
{
    (void)device_name, (void)thread_limit, (void)tid, (void)bid, (void)block_dim, (void)grid_dim,
        (void)w_size;
    auto* f        = new Function;
    f->host_symbol = host_function;
    f->image       = reinterpret_cast<const Image*>(module);
    f->name        = device_function != nullptr ? device_function : "";
    f->found       = f->image != nullptr && image_has_name(*f->image, f->name);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_functions.push_back(f);
}

hipError_t hipGetFuncBySymbol(hipFunction_t* function, const void* symbol)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    *function = nullptr;
    for(auto it = g_functions.rbegin(); it != g_functions.rend(); ++it)
        if((*it)->host_symbol == symbol && (*it)->found)
        {
            *function = reinterpret_cast<hipFunction_t>(*it);
            return hipSuccess;
        }
    return hipErrorInvalidDeviceFunction;
}

hipError_t hipGetDeviceCount(int* count)
{
    *count = 1;
    return hipSuccess;
}

hipError_t hipGetDevice(int* device)
{
    *device = 0;
    return hipSuccess;
}

hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600* prop, int device)
{
    if(device != 0)
        return hipErrorInvalidDevice;
    std::memset(prop, 0, sizeof *prop);
    set_string(prop->name, sizeof prop->name, "fake HIP device");
    set_string(prop->gcnArchName, sizeof prop->gcnArchName, device_arch());
    prop->multiProcessorCount = 304;
    prop->warpSize            = 64;
    prop->sharedMemPerBlock   = processor() == "gfx950" ? 163840 : 65536;
    return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int device)
{
    if(device != 0)
        return hipErrorInvalidDevice;
    switch(attribute)
    {
    case hipDeviceAttributePciChipId:
        *value = static_cast<int>(std::strtol(env_or("FAKE_HIP_CHIP_ID", "0x74a1"), nullptr, 0));
        return hipSuccess;
    case hipDeviceAttributeMaxSharedMemoryPerBlock:
        *value = processor() == "gfx950" ? 163840 : 65536;
        return hipSuccess;
    case hipDeviceAttributeWarpSize: *value = 64; return hipSuccess;
    default: return hipErrorInvalidValue;
    }
}

const char* hipGetErrorString(hipError_t error)
{
    return error == hipSuccess ? "hipSuccess" : "fake HIP runtime error";
}
hipError_t hipGetLastError(void) { return hipSuccess; }
hipError_t hipPeekAtLastError(void) { return hipSuccess; }
hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
// Only used when timing is requested; the shim never asks (stream_config::time_kernel_ = false).
hipError_t hipEventCreate(hipEvent_t* event)
{
    *event = nullptr;
    return hipSuccess;
}
hipError_t hipEventDestroy(hipEvent_t) { return hipSuccess; }
hipError_t hipEventRecord(hipEvent_t, hipStream_t) { return hipSuccess; }
hipError_t hipEventSynchronize(hipEvent_t) { return hipSuccess; }
hipError_t hipEventElapsedTime(float* ms, hipEvent_t, hipEvent_t)
{
    *ms = 0.0f;
    return hipSuccess;
}

hipError_t hipModuleLaunchKernel(hipFunction_t function,
                                 unsigned int gx,
                                 unsigned int gy,
                                 unsigned int gz,
                                 unsigned int bx,
                                 unsigned int by,
                                 unsigned int bz,
                                 unsigned int shared_bytes,
                                 hipStream_t stream,
                                 void** kernel_params,
                                 void** extra)
{
    const auto* f = reinterpret_cast<const Function*>(function);
    if(f == nullptr || extra == nullptr || kernel_params != nullptr)
        return hipErrorInvalidValue;
    const void* buffer = nullptr;
    std::size_t size   = 0;
    for(int i = 0; extra[i] != HIP_LAUNCH_PARAM_END; i += 2)
    {
        if(extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER)
            buffer = extra[i + 1];
        else if(extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE)
            size = *static_cast<const std::size_t*>(extra[i + 1]);
        else
            return hipErrorInvalidValue;
    }
    if(buffer == nullptr || size == 0 || size > sizeof(fake_hip_launch::args))
        return hipErrorInvalidValue;
    fake_hip_launch l{};
    set_string(l.kernel, sizeof l.kernel, f->name);
    set_string(l.code_object_arch, sizeof l.code_object_arch, f->image->arch);
    l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
    l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
    l.shared_bytes = shared_bytes;
    l.stream       = stream;
    l.args_size    = size;
    std::memcpy(l.args, buffer, size);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_launches.push_back(l);
    return hipSuccess;
}

// Memory entry points the shim's backward imports (its allocators for AITER). The shim
// allocates no device memory (no hipMallocAsync here, so `--no-undefined` would catch one):
// device scratch is carved from the engine's workspace and only zeroed on the stream, recorded
// without touching the bytes (the cases pass inaccessible pages as device memory). Pinned host
// memory is real host memory.
hipError_t hipMemsetAsync(void* dst, int value, size_t size, hipStream_t stream)
{
    if(dst == nullptr || value != 0)
        return hipErrorInvalidValue;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_memory.push_back(fake_hip_memory_event{'Z', dst, size, stream});
    return hipSuccess;
}

hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags)
{
    if(ptr == nullptr || size == 0 || flags != 0)
        return hipErrorInvalidValue;
    *ptr = std::malloc(size);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_memory.push_back(fake_hip_memory_event{'H', *ptr, size, nullptr});
    return *ptr != nullptr ? hipSuccess : hipErrorOutOfMemory;
}

int fake_hip_memory_event_count(void)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    return static_cast<int>(g_memory.size());
}

const fake_hip_memory_event* fake_hip_memory_event_at(int i)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    return i >= 0 && static_cast<std::size_t>(i) < g_memory.size() ? &g_memory[static_cast<std::size_t>(i)]
                                                                     : nullptr;
}

int fake_hip_launch_count(void)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    return static_cast<int>(g_launches.size());
}

const fake_hip_launch* fake_hip_launch_at(int i)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    return i >= 0 && static_cast<std::size_t>(i) < g_launches.size() ? &g_launches[static_cast<std::size_t>(i)]
                                                                       : nullptr;
}

} // extern "C"
