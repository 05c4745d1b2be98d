// What the fake HIP runtime (fake_hip_runtime.cpp) records, for the case driver.
#pragma once
#include <cstddef>

extern "C" {

struct fake_hip_launch
{
    char kernel[256];          // the name AITER registered (its table's knl_name)
    char code_object_arch[32]; // processor of the code object the kernel came from
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_bytes;
    void* stream;
    std::size_t args_size;
    unsigned char args[1024]; // the kernarg block, byte for byte
};

// One call of hipMemsetAsync ('Z') or hipHostMalloc ('H').
struct fake_hip_memory_event
{
    char kind;
    void* ptr;
    std::size_t bytes;
    void* stream;
};

int fake_hip_memory_event_count(void);
const fake_hip_memory_event* fake_hip_memory_event_at(int i);

int fake_hip_launch_count(void);
const fake_hip_launch* fake_hip_launch_at(int i);
}
