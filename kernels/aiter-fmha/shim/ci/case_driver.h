// What the shim's case drivers (shim_cases.cpp, shim_bwd_cases.cpp) share: the failure count and
// its checks, symbol lookup, inaccessible pages standing in for device memory, the end of a case
// and main's case selection. Each driver is one translation unit.
#pragma once
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>

namespace case_driver {

inline int g_failures = 0;

inline void expect(bool ok, const std::string& what)
{
    if(!ok)
    {
        std::printf("  FAIL %s\n", what.c_str());
        ++g_failures;
    }
}

template <class T, class U>
void expect_eq(const char* field, T got, U want)
{
    if(static_cast<long long>(got) != static_cast<long long>(want))
    {
        std::printf("  FAIL %s = %lld, expected %lld\n", field, static_cast<long long>(got),
                    static_cast<long long>(want));
        ++g_failures;
    }
}

inline void expect_ptr(const char* field, const void* got, const void* want)
{
    if(got != want)
    {
        std::printf("  FAIL %s = %p, expected %p\n", field, got, want);
        ++g_failures;
    }
}

// `name` from `lib` (the shim or a stand-in), or the case fails at once.
template <class F>
F symbol(void* lib, const char* name)
{
    void* p = dlsym(lib, name);
    if(p == nullptr)
    {
        std::printf("FAIL: %s is not exported\n", name);
        std::exit(1);
    }
    return reinterpret_cast<F>(p);
}

// Inaccessible pages standing in for device memory, one per buffer: a host read of any of them
// crashes the case instead of passing unnoticed.
inline char* device_pages(int n)
{
    void* p = mmap(nullptr, static_cast<size_t>(n) * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if(p == MAP_FAILED)
    {
        std::perror("mmap");
        std::exit(1);
    }
    return static_cast<char*>(p);
}

// The case's verdict line and exit status.
inline int finish()
{
    std::printf("  %s\n", g_failures == 0 ? "ok" : "FAILED");
    return g_failures == 0 ? 0 : 1;
}

// `--list` prints the case names; `A B CASE` runs `run(A, B, case)`; `usage` names A and B.
template <class Case, std::size_t N, class Run>
int case_main(int argc, char** argv, const Case (&cases)[N], const char* usage, Run run)
{
    if(argc == 2 && std::strcmp(argv[1], "--list") == 0)
    {
        for(const Case& c : cases)
            std::printf("%s\n", c.name);
        return 0;
    }
    if(argc != 4)
    {
        std::fprintf(stderr, "usage: %s --list | %s %s CASE\n", argv[0], argv[0], usage);
        return 2;
    }
    for(const Case& c : cases)
        if(c.name == std::string(argv[3]))
            return run(argv[1], argv[2], c);
    std::fprintf(stderr, "unknown case %s\n", argv[3]);
    return 2;
}

} // namespace case_driver
