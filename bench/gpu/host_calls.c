/* Host cost of the individual CUDA driver calls the CUDA engine makes per ExecuteOpGraph (issue 14
 * item 5: where the time above the kernel launches goes), each timed alone from C.
 *
 * Build and run on the GPU machine (the driver is dlopen'ed, no CUDA header needed):
 *   gcc -O2 -std=c11 bench/gpu/host_calls.c -o /tmp/host_calls -ldl && /tmp/host_calls
 *
 * Per call, median over ROUNDS rounds of BATCH calls: cuTensorMapEncodeTiled with the forward's map
 * parameters (3-D {128, 16, 2^31 - 1} u16, a {64, 1, 128} box, 128-byte swizzle; three per
 * execute), cuStreamGetCtx + cuCtxGetId (the stream's context and its id), cuCtxPushCurrent +
 * cuCtxPopCurrent (a pair), cuCtxGetDevice. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 51
#define BATCH 1000

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream;
typedef struct {
    uint64_t opaque[16];
} CUtensorMap;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
static CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
static CUresult (*cuCtxPushCurrent)(CUcontext);
static CUresult (*cuCtxPopCurrent)(CUcontext *);
static CUresult (*cuCtxGetDevice)(int *);
static CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, int, unsigned, void *, const uint64_t *, const uint64_t *,
                                          const unsigned *, const unsigned *, int, int, int, int);

static void check(CUresult r, const char *what) {
    if (r != 0) {
        fprintf(stderr, "host_calls: %s failed: CUresult %d\n", what, r);
        exit(1);
    }
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "host_calls: %s not in libcuda\n", name);
        exit(1);
    }
    return p;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { ENCODE, STREAM_CTX, PUSH_POP, GET_DEVICE, KINDS };
static const char *NAMES[KINDS] = {"cuTensorMapEncodeTiled", "cuStreamGetCtx + cuCtxGetId",
                                   "cuCtxPushCurrent + cuCtxPopCurrent", "cuCtxGetDevice"};

int main(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "host_calls: no libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    *(void **)&cuInit = sym(lib, "cuInit");
    *(void **)&cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&cuStreamCreate = sym(lib, "cuStreamCreate");
    *(void **)&cuStreamGetCtx = sym(lib, "cuStreamGetCtx");
    *(void **)&cuCtxGetId = sym(lib, "cuCtxGetId");
    *(void **)&cuCtxPushCurrent = sym(lib, "cuCtxPushCurrent_v2");
    *(void **)&cuCtxPopCurrent = sym(lib, "cuCtxPopCurrent_v2");
    *(void **)&cuCtxGetDevice = sym(lib, "cuCtxGetDevice");
    *(void **)&cuTensorMapEncodeTiled = sym(lib, "cuTensorMapEncodeTiled");
    int dev;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr buf;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&buf, 1 << 20), "cuMemAlloc");
    check(cuStreamCreate(&stream, 1), "cuStreamCreate");
    const uint64_t dims[3] = {128, 16, (1ull << 31) - 1}, strides[2] = {256, 4096};
    const unsigned box[3] = {64, 1, 128}, elem[3] = {1, 1, 1};
    double per_call[KINDS][ROUNDS];
    for (int r = 0; r < ROUNDS; ++r) {
        for (int k = 0; k < KINDS; ++k) {
            double t0 = now_us();
            for (int i = 0; i < BATCH; ++i) {
                CUtensorMap map;
                CUcontext c;
                unsigned long long id;
                int d;
                switch (k) {
                case ENCODE:
                    /* u16, no interleave, 128-byte swizzle, L2 promotion 256 B, no OOB fill */
                    check(cuTensorMapEncodeTiled(&map, 1, 3, (void *)(uintptr_t)buf, dims, strides, box, elem, 0, 3, 3, 0),
                          "cuTensorMapEncodeTiled");
                    break;
                case STREAM_CTX:
                    check(cuStreamGetCtx(stream, &c), "cuStreamGetCtx");
                    check(cuCtxGetId(c, &id), "cuCtxGetId");
                    break;
                case PUSH_POP:
                    check(cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
                    check(cuCtxPopCurrent(&c), "cuCtxPopCurrent");
                    break;
                default:
                    check(cuCtxGetDevice(&d), "cuCtxGetDevice");
                }
            }
            per_call[k][r] = (now_us() - t0) / BATCH;
        }
    }
    for (int k = 0; k < KINDS; ++k) {
        qsort(per_call[k], ROUNDS, sizeof(double), cmp);
        printf("%-36s median %.3f us per call (p10 %.3f, p90 %.3f)\n", NAMES[k], per_call[k][ROUNDS / 2],
               per_call[k][ROUNDS / 10], per_call[k][ROUNDS * 9 / 10]);
    }
    return 0;
}
