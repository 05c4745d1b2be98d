/*
 * hipdnn_engine_plugin.h: hipDNN's engine-plugin C ABI as this project implements it.
 *
 * Written from the project's reference, ../shared/spec/plugin-abi.md (sections 2-4), which
 * describes upstream's PluginApiDataTypes.h, PluginApi.h, EnginePluginApi.h and CallbackTypes.h
 * (ROCm/rocm-libraries, projects/hipdnn/). It is the one C statement of the ABI in this repository:
 * every Rust transcription (the plugin's abi/types.rs, the host's abi.rs in host-shim, the
 * conformance fixture plugin) is held to it by a test that compiles assertions against this file,
 * and the C hosts under plugin/tests/c/ include it instead of restating the types.
 *
 * Layout assumes LP64 (Linux x86-64 / aarch64), as hipDNN does.
 */
#ifndef RAGGED_SDPA_HIPDNN_ENGINE_PLUGIN_H
#define RAGGED_SDPA_HIPDNN_ENGINE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The engine-plugin API version the plugin implements in full (versioning.md). */
#define HIPDNN_ENGINE_API_VERSION_MAJOR 1
#define HIPDNN_ENGINE_API_VERSION_MINOR 4
#define HIPDNN_ENGINE_API_VERSION_PATCH 0

/* Default visibility: a plugin built with -fvisibility=hidden still exports these. */
#ifndef HIPDNN_PLUGIN_EXPORT
#define HIPDNN_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Upstream marks every status-returning function [[nodiscard]] in C++. */
#ifndef HIPDNN_PLUGIN_NODISCARD
#if defined(__cplusplus) && __cplusplus >= 201703L
#define HIPDNN_PLUGIN_NODISCARD [[nodiscard]]
#else
#define HIPDNN_PLUGIN_NODISCARD
#endif
#endif

/* Per-thread last-error buffer size, terminating NUL included. */
#define HIPDNN_PLUGIN_ERROR_STRING_MAX_LENGTH 2048

/* ---- Enums: int-sized C enums. A host or plugin must accept values it does not know. ---- */

typedef enum {
    HIPDNN_PLUGIN_STATUS_SUCCESS = 0,
    HIPDNN_PLUGIN_STATUS_BAD_PARAM = 1,       /* NULL or malformed argument */
    HIPDNN_PLUGIN_STATUS_INVALID_VALUE = 2,   /* well-formed but invalid, e.g. an unknown engine id */
    HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR = 3,  /* internal failure, caught panic, failed launch */
    HIPDNN_PLUGIN_STATUS_ALLOC_FAILED = 4,
    HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE = 5,  /* nothing to supply; only GetEngineName declines so */
    HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED = 6
} hipdnnPluginStatus_t;

typedef enum {
    HIPDNN_PLUGIN_TYPE_UNSPECIFIED = 0,
    HIPDNN_PLUGIN_TYPE_ENGINE = 1,
    HIPDNN_PLUGIN_TYPE_HEURISTIC = 2
} hipdnnPluginType_t;

/* Heuristic plugins only; listed so the enum has one home. */
typedef enum {
    HIPDNN_ENGINE_PREDICTION_ENGINE = 0,
    HIPDNN_ENGINE_PREDICTION_CONFIGURATION = 1
} hipdnnEnginePredictionKind_t;

/* The backend's callback types header declares the same two types behind this guard. */
#ifndef HIPDNN_CALLBACK_TYPES_DEFINED
#define HIPDNN_CALLBACK_TYPES_DEFINED
typedef enum {
    HIPDNN_SEV_INFO = 0,
    HIPDNN_SEV_WARN = 1,
    HIPDNN_SEV_ERROR = 2,
    HIPDNN_SEV_FATAL = 3,
    HIPDNN_SEV_OFF = 4 /* as a log level: nothing is sent */
} hipdnnSeverity_t;

typedef void (*hipdnnCallback_t)(hipdnnSeverity_t severity, const char *message);
#endif

/* ---- Structs ---- */

/* A byte buffer: a serialized Graph, EngineConfig or EngineDetails, or a serialized context. */
typedef struct {
    const void *ptr;
    size_t size;
} hipdnnPluginConstData_t;

/* One variant-pack entry: tensor uid -> pointer (a host pointer for pass-by-value scalars). */
typedef struct {
    int64_t uid;
    void *ptr;
} hipdnnPluginDeviceBuffer_t;

/* ---- Handles: opaque, defined by the plugin ---- */

typedef struct HipdnnEnginePluginHandle *hipdnnEnginePluginHandle_t;
typedef struct HipdnnEnginePluginExecutionContext *hipdnnEnginePluginExecutionContext_t;

/* An opaque stream; NULL is the default stream. With HIP's headers included, theirs is used. */
#if !defined(HIP_INCLUDE_HIP_HIP_RUNTIME_API_H) && !defined(RAGGED_SDPA_HIP_STREAM_DEFINED)
#define RAGGED_SDPA_HIP_STREAM_DEFINED
typedef struct ihipStream_t *hipStream_t;
#endif

/* ---- Base functions (every plugin) ---- */

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetName(const char **name);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetVersion(const char **version);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t *type);
/* Never writes NULL: an empty string before any failure on the calling thread. */
HIPDNN_PLUGIN_EXPORT void hipdnnPluginGetLastErrorString(const char **error_str);
/* Optional for the loader (absent: "1.0.0"); "MAJOR.MINOR.PATCH". */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char **version);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLoggingCallback(hipdnnCallback_t callback);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLogLevel(hipdnnSeverity_t level);

/* ---- Engine functions required by the loader (API 1.0.0) ---- */

/* Two-call protocol: (NULL, 0, &n) counts, then (buffer, n, &m) fills. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetAllEngineIds(
    int64_t *engine_ids, uint32_t max_engines, uint32_t *num_engines);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginCreate(
    hipdnnEnginePluginHandle_t *handle);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroy(
    hipdnnEnginePluginHandle_t handle);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginSetStream(
    hipdnnEnginePluginHandle_t handle, hipStream_t stream);
/* SUCCESS with *num_engines == 0 is the way to decline a graph. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(
    hipdnnEnginePluginHandle_t handle, const hipdnnPluginConstData_t *op_graph, int64_t *engine_ids,
    uint32_t max_engines, uint32_t *num_engines);
/* The details buffer stays plugin-owned until DestroyEngineDetails. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(
    hipdnnEnginePluginHandle_t handle, int64_t engine_id, const hipdnnPluginConstData_t *op_graph,
    hipdnnPluginConstData_t *engine_details);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(
    hipdnnEnginePluginHandle_t handle, hipdnnPluginConstData_t *engine_details);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(
    hipdnnEnginePluginHandle_t handle, const hipdnnPluginConstData_t *engine_config,
    const hipdnnPluginConstData_t *op_graph, size_t *workspace_size);
/* Copies what it needs: the caller may free engine_config and op_graph on return. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(
    hipdnnEnginePluginHandle_t handle, const hipdnnPluginConstData_t *engine_config,
    const hipdnnPluginConstData_t *op_graph, hipdnnEnginePluginExecutionContext_t *execution_context);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t
hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                       hipdnnEnginePluginExecutionContext_t execution_context,
                                                       size_t *workspace_size);
/* device_buffers is valid only during the call; work is enqueued on the handle's stream. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, void *workspace,
    const hipdnnPluginDeviceBuffer_t *device_buffers, uint32_t num_device_buffers);

/* ---- Optional engine functions ---- */

/* Compiled-plan serialization (RFC 0009): the loader uses the three only together. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginSerializeExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context,
    hipdnnPluginConstData_t *serialized_context);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t
hipdnnEnginePluginDestroySerializedExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                    hipdnnPluginConstData_t *serialized_context);
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t
hipdnnEnginePluginCreateExecutionContextFromSerialized(hipdnnEnginePluginHandle_t handle,
                                                       const hipdnnPluginConstData_t *serialized_context,
                                                       hipdnnEnginePluginExecutionContext_t *execution_context);

/* Shape overrides (RFC 0008, API 1.1.0): per call, new dims and strides for listed uids. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, void *workspace,
    const hipdnnPluginDeviceBuffer_t *device_buffers, uint32_t num_device_buffers, uint32_t num_overrides,
    const int64_t *override_unique_ids, const uint32_t *override_lengths, const int64_t *const *override_shapes,
    const int64_t *const *override_strides);

/* API 1.4.0, no handle: the name whose FNV-1a-64 hash is engine_id; NOT_APPLICABLE for other ids. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetEngineName(
    int64_t engine_id, const char **name);

#ifdef __cplusplus
}
#endif

#endif /* RAGGED_SDPA_HIPDNN_ENGINE_PLUGIN_H */
