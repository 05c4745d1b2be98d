/* Host time of hipdnnEnginePluginExecuteOpGraph on the CUDA engine, timed from C through the
 * plugin's .so as hipDNN calls it, beside the bare cost of the same number of kernel launches
 * (issue 14 item 5: target <= 3 us above the launches).
 *
 * Build and run on the GPU machine (no CUDA header needed: the driver is dlopen'ed):
 *   gcc -O2 -std=c11 -Iplugin/include -Iplugin/tests/c bench/gpu/host_time.c -o /tmp/host_time -ldl
 *   /tmp/host_time PLUGIN.so GRAPHS_DIR PROBLEM_NAME
 * GRAPHS_DIR is what plugin/examples/emit_bench_graphs wrote (PROBLEM.bin, PROBLEM.json,
 * engine_config_RAGGED_SDPA_CUDA_FMHA.bin); uids are that example's (Q 1, K 2, V 3, O 4, Q/O
 * offsets 10, K/V offsets 11).
 *
 * Method: ROUNDS rounds; each times BATCH back-to-back calls that only enqueue (the device keeps up
 * with a small problem, so no call waits for a full launch queue), then synchronises outside the
 * timed region. Reported: the median over rounds of the per-call mean, for ExecuteOpGraph and for
 * two cuLaunchKernel calls of empty kernels with the pre-pass's and the forward kernel's parameter
 * lists (what the engine launches per execute), interleaved round by round. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hipdnn_engine_plugin.h"
#include "host_io.h" /* resolve, read_file: plugin/tests/c */

#define ROUNDS 101
#define BATCH 200

/* The few CUDA driver entry points used, declared by hand (cuda.h is not needed). */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, CUstream, void **, void **);

static void die(const char *what) {
    fprintf(stderr, "host_time: %s\n", what);
    exit(1);
}

static void cu_check(CUresult r, const char *what) {
    if (r != 0) {
        fprintf(stderr, "host_time: %s failed: CUresult %d\n", what, r);
        exit(1);
    }
}

static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) die("cannot dlopen libcuda.so.1");
    *(void **)&cuInit = resolve(lib, "cuInit");
    *(void **)&cuDeviceGet = resolve(lib, "cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = resolve(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = resolve(lib, "cuCtxSetCurrent");
    *(void **)&cuMemAlloc = resolve(lib, "cuMemAlloc_v2");
    *(void **)&cuMemcpyHtoD = resolve(lib, "cuMemcpyHtoD_v2");
    *(void **)&cuMemsetD8 = resolve(lib, "cuMemsetD8_v2");
    *(void **)&cuStreamCreate = resolve(lib, "cuStreamCreate");
    *(void **)&cuStreamSynchronize = resolve(lib, "cuStreamSynchronize");
    *(void **)&cuModuleLoadData = resolve(lib, "cuModuleLoadData");
    *(void **)&cuModuleGetFunction = resolve(lib, "cuModuleGetFunction");
    *(void **)&cuLaunchKernel = resolve(lib, "cuLaunchKernel");
}

/* A whole file as a NUL-terminated string (the metadata JSON is searched with strstr). */
static char *read_text(const char *path) {
    size_t size;
    void *data = read_file(path, &size);
    char *text = realloc(data, size + 1);
    if (!text) die("out of memory");
    text[size] = 0;
    return text;
}

/* The integer after `"key":` in the example's metadata JSON (flat, numbers only where read). */
static long long json_int(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(json, pattern);
    if (!p) {
        fprintf(stderr, "host_time: metadata has no %s\n", key);
        exit(1);
    }
    return strtoll(p + strlen(pattern), NULL, 10);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Empty kernels with the parameter lists of ragged_fmha_prepass (28 parameters) and of the forward
 * entry points (RAGGED_FMHA_PARAMS, 24), so a launch marshals the same argument bytes. */
static const char *EMPTY_PTX =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry empty_prepass(.param .u64 a0, .param .u32 a1, .param .u64 a2, .param .u64 a3,"
    " .param .u32 a4, .param .u64 a5, .param .u32 a6, .param .u64 a7, .param .u64 a8, .param .u32 a9,"
    " .param .u64 a10, .param .u32 a11, .param .u64 a12, .param .u32 a13, .param .u64 a14, .param .u32 a15,"
    " .param .u64 a16, .param .u64 a17, .param .u32 a18, .param .u32 a19, .param .u32 a20, .param .u32 a21,"
    " .param .u32 a22, .param .u32 a23, .param .u64 a24, .param .u64 a25, .param .u64 a26, .param .u64 a27)"
    " { ret; }\n"
    ".visible .entry empty_forward(.param .u64 b0, .param .u64 b1, .param .u64 b2, .param .u64 b3,"
    " .param .u64 b4, .param .u64 b5, .param .u64 b6, .param .u64 b7, .param .u64 b8, .param .u64 b9,"
    " .param .u64 b10, .param .u64 b11, .param .u64 b12, .param .u64 b13, .param .u64 b14, .param .u64 b15,"
    " .param .u64 b16, .param .u64 b17, .param .u32 b18, .param .u32 b19, .param .f32 b20, .param .u32 b21,"
    " .param .u32 b22, .param .u32 b23)"
    " { ret; }\n";

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: host_time PLUGIN.so GRAPHS_DIR PROBLEM_NAME\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.json", argv[2], argv[3]);
    char *meta = read_text(path);
    size_t graph_size, config_size;
    snprintf(path, sizeof path, "%s/%s.bin", argv[2], argv[3]);
    void *graph = read_file(path, &graph_size);
    snprintf(path, sizeof path, "%s/engine_config_RAGGED_SDPA_CUDA_FMHA.bin", argv[2]);
    void *config = read_file(path, &config_size);
    long long tokens = json_int(meta, "tokens"), heads = json_int(meta, "heads");
    long long d = json_int(meta, "head_dim"), dv = json_int(meta, "value_dim");
    long long batch = json_int(meta, "batch");

    load_driver();
    cu_check(cuInit(0), "cuInit");
    int dev;
    CUcontext ctx;
    CUstream stream;
    cu_check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    cu_check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu_check(cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "host_time: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    hipdnnPluginStatus_t (*create)(hipdnnEnginePluginHandle_t *) = resolve(lib, "hipdnnEnginePluginCreate");
    hipdnnPluginStatus_t (*set_stream)(hipdnnEnginePluginHandle_t, hipStream_t) =
        resolve(lib, "hipdnnEnginePluginSetStream");
    hipdnnPluginStatus_t (*workspace_size)(hipdnnEnginePluginHandle_t, const hipdnnPluginConstData_t *,
                                           const hipdnnPluginConstData_t *, size_t *) =
        resolve(lib, "hipdnnEnginePluginGetWorkspaceSize");
    hipdnnPluginStatus_t (*create_context)(hipdnnEnginePluginHandle_t, const hipdnnPluginConstData_t *,
                                           const hipdnnPluginConstData_t *,
                                           hipdnnEnginePluginExecutionContext_t *) =
        resolve(lib, "hipdnnEnginePluginCreateExecutionContext");
    hipdnnPluginStatus_t (*execute)(hipdnnEnginePluginHandle_t, hipdnnEnginePluginExecutionContext_t, void *,
                                    const hipdnnPluginDeviceBuffer_t *, uint32_t) =
        resolve(lib, "hipdnnEnginePluginExecuteOpGraph");
    void (*last_error)(const char **) = resolve(lib, "hipdnnPluginGetLastErrorString");

    hipdnnEnginePluginHandle_t handle;
    const char *err;
    if (create(&handle) != HIPDNN_PLUGIN_STATUS_SUCCESS || set_stream(handle, (hipStream_t)stream) != 0) {
        last_error(&err);
        fprintf(stderr, "host_time: create/SetStream: %s\n", err);
        return 1;
    }
    hipdnnPluginConstData_t g = {graph, graph_size}, c = {config, config_size};
    size_t ws_bytes = 0;
    hipdnnEnginePluginExecutionContext_t context;
    if (workspace_size(handle, &c, &g, &ws_bytes) != 0 || create_context(handle, &c, &g, &context) != 0) {
        last_error(&err);
        fprintf(stderr, "host_time: the CUDA engine did not plan %s: %s\n", argv[3], err);
        return 1;
    }

    /* Device buffers of the problem's sizes; the offsets from the metadata's list. */
    CUdeviceptr q, k, v, o, offsets, workspace = 0;
    cu_check(cuMemAlloc(&q, (size_t)(tokens * heads * d * 2)), "cuMemAlloc q");
    cu_check(cuMemAlloc(&k, (size_t)(tokens * heads * d * 2)), "cuMemAlloc k");
    cu_check(cuMemAlloc(&v, (size_t)(tokens * heads * dv * 2)), "cuMemAlloc v");
    cu_check(cuMemAlloc(&o, (size_t)(tokens * heads * dv * 2)), "cuMemAlloc o");
    cu_check(cuMemsetD8(q, 0, (size_t)(tokens * heads * d * 2)), "cuMemsetD8");
    cu_check(cuMemsetD8(k, 0, (size_t)(tokens * heads * d * 2)), "cuMemsetD8");
    cu_check(cuMemsetD8(v, 0, (size_t)(tokens * heads * dv * 2)), "cuMemsetD8");
    int32_t *host_offsets = calloc((size_t)batch + 1, sizeof(int32_t));
    const char *list = strstr(meta, "\"offsets\": [");
    if (!list || !host_offsets) die("metadata has no offsets list");
    list += strlen("\"offsets\": [");
    for (long long b = 0; b <= batch; ++b) {
        char *end;
        host_offsets[b] = (int32_t)strtol(list, &end, 10);
        list = end + 1;
    }
    cu_check(cuMemAlloc(&offsets, (size_t)(batch + 1) * 4), "cuMemAlloc offsets");
    cu_check(cuMemcpyHtoD(offsets, host_offsets, (size_t)(batch + 1) * 4), "cuMemcpyHtoD");
    if (ws_bytes) cu_check(cuMemAlloc(&workspace, ws_bytes), "cuMemAlloc workspace");
    hipdnnPluginDeviceBuffer_t pack[6] = {{1, (void *)q}, {2, (void *)k},        {3, (void *)v},
                                          {4, (void *)o}, {10, (void *)offsets}, {11, (void *)offsets}};

    CUmodule module;
    CUfunction empty_prepass, empty_forward;
    cu_check(cuModuleLoadData(&module, EMPTY_PTX), "cuModuleLoadData");
    cu_check(cuModuleGetFunction(&empty_prepass, module, "empty_prepass"), "cuModuleGetFunction");
    cu_check(cuModuleGetFunction(&empty_forward, module, "empty_forward"), "cuModuleGetFunction");
    uint64_t p64[28] = {0};
    void *prepass_args[28], *forward_args[24];
    for (int i = 0; i < 28; ++i) prepass_args[i] = &p64[i];
    for (int i = 0; i < 24; ++i) forward_args[i] = &p64[i];

    double exec_us[ROUNDS], launch_us[ROUNDS], diff_us[ROUNDS];
    for (int round = -1; round < ROUNDS; ++round) { /* round -1 warms both paths up */
        double t0 = now_us();
        for (int i = 0; i < BATCH; ++i) {
            if (execute(handle, context, (void *)workspace, pack, 6) != HIPDNN_PLUGIN_STATUS_SUCCESS) {
                last_error(&err);
                fprintf(stderr, "host_time: ExecuteOpGraph: %s\n", err);
                return 1;
            }
        }
        double t1 = now_us();
        cu_check(cuStreamSynchronize(stream), "cuStreamSynchronize");
        double t2 = now_us();
        for (int i = 0; i < BATCH; ++i) {
            cu_check(cuLaunchKernel(empty_prepass, 1, 1, 1, 1024, 1, 1, 0, stream, prepass_args, NULL),
                     "cuLaunchKernel");
            cu_check(cuLaunchKernel(empty_forward, 64, 1, 1, 256, 1, 1, 0, stream, forward_args, NULL),
                     "cuLaunchKernel");
        }
        double t3 = now_us();
        cu_check(cuStreamSynchronize(stream), "cuStreamSynchronize");
        if (round >= 0) {
            exec_us[round] = (t1 - t0) / BATCH;
            launch_us[round] = (t3 - t2) / BATCH;
            diff_us[round] = exec_us[round] - launch_us[round];
        }
    }
    qsort(exec_us, ROUNDS, sizeof(double), cmp_double);
    qsort(launch_us, ROUNDS, sizeof(double), cmp_double);
    qsort(diff_us, ROUNDS, sizeof(double), cmp_double);
    printf("problem %s: B=%lld, %lld tokens, H=%lld, D=%lld/%lld\n", argv[3], batch, tokens, heads, d, dv);
    printf("ExecuteOpGraph (CUDA engine, enqueue)   median %.2f us per call (p10 %.2f, p90 %.2f)\n",
           exec_us[ROUNDS / 2], exec_us[ROUNDS / 10], exec_us[ROUNDS * 9 / 10]);
    printf("2 x cuLaunchKernel (empty kernels)      median %.2f us per pair (p10 %.2f, p90 %.2f)\n",
           launch_us[ROUNDS / 2], launch_us[ROUNDS / 10], launch_us[ROUNDS * 9 / 10]);
    printf("above the launches (median of per-round differences) %.2f us  (target <= 3)\n", diff_us[ROUNDS / 2]);
    return 0;
}
