/*
 * Issue 38's regressions: what a host may do around a call rather than in it, run as a C host
 * would, through dlopen and the project header. Built plain by tests/lifecycle.rs and under
 * AddressSanitizer and ThreadSanitizer by .ci/hardening.sh.
 *
 *   reentrant PLUGIN GRAPH CONFIG DIR
 *       A logging callback that calls back into the plugin from every log line, for every entry
 *       point that logs (the first engine listing, a declined graph, and each failing entry point
 *       included), and one that destroys the handle and context of the call that is logging. Every
 *       call must return, with its own status and its own last-error text. DIR holds the golden
 *       variant pack and extent_2p60.bin (a graph the plugin declines).
 *   unload-live PLUGIN POOL_GRAPH CONFIG POOL_DIR LOOPS
 *       Each loop runs a graph on the worker pool, leaks its handle and context, and dlcloses the
 *       plugin while two threads spin beside it: no pool thread may outlive the library.
 *   serialized PLUGIN GRAPH CONFIG LOOPS
 *       Each loop serializes a context, destroys the context and the handle, then returns the
 *       serialized bytes through the destroyed handle value (and only through it).
 *   reload PLUGIN LOOPS
 *       Each loop loads the plugin afresh, creates a handle and checks that no handle of an
 *       earlier load is accepted, then unloads it.
 *
 * Every mode runs under a watchdog: a call that never returns fails the run (exit 3) naming
 * where it hung. Exit status 0 and a last line "ok" when every check held; 1 with each failed
 * check printed otherwise; 2 when the host itself could not run.
 */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hipdnn_engine_plugin.h"
#include "host_io.h"

#define ENTRY_POINT(symbol) __typeof__(&symbol)
#define SUCCESS HIPDNN_PLUGIN_STATUS_SUCCESS
#define BAD_PARAM HIPDNN_PLUGIN_STATUS_BAD_PARAM

/* The host engine's id: FNV-1a-64 of "RAGGED_SDPA_HOST_REFERENCE". */
static const int64_t HOST_ENGINE = 8202884889727546333LL;

typedef struct {
    void *lib;
    ENTRY_POINT(hipdnnPluginGetName) get_name;
    ENTRY_POINT(hipdnnPluginGetVersion) get_version;
    ENTRY_POINT(hipdnnPluginGetApiVersion) get_api_version;
    ENTRY_POINT(hipdnnPluginGetType) get_type;
    ENTRY_POINT(hipdnnPluginGetLastErrorString) last_error;
    ENTRY_POINT(hipdnnPluginSetLoggingCallback) set_callback;
    ENTRY_POINT(hipdnnPluginSetLogLevel) set_level;
    ENTRY_POINT(hipdnnEnginePluginGetAllEngineIds) all_ids;
    ENTRY_POINT(hipdnnEnginePluginCreate) create;
    ENTRY_POINT(hipdnnEnginePluginDestroy) destroy;
    ENTRY_POINT(hipdnnEnginePluginSetStream) set_stream;
    ENTRY_POINT(hipdnnEnginePluginGetApplicableEngineIds) applicable;
    ENTRY_POINT(hipdnnEnginePluginGetEngineDetails) details;
    ENTRY_POINT(hipdnnEnginePluginDestroyEngineDetails) destroy_details;
    ENTRY_POINT(hipdnnEnginePluginGetWorkspaceSize) workspace;
    ENTRY_POINT(hipdnnEnginePluginCreateExecutionContext) create_ctx;
    ENTRY_POINT(hipdnnEnginePluginDestroyExecutionContext) destroy_ctx;
    ENTRY_POINT(hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext) ctx_workspace;
    ENTRY_POINT(hipdnnEnginePluginExecuteOpGraph) execute;
    ENTRY_POINT(hipdnnEnginePluginSerializeExecutionContext) serialize;
    ENTRY_POINT(hipdnnEnginePluginDestroySerializedExecutionContext) destroy_serialized;
    ENTRY_POINT(hipdnnEnginePluginCreateExecutionContextFromSerialized) from_serialized;
    ENTRY_POINT(hipdnnEnginePluginExecuteOpGraphWithOverrides) execute_overrides;
    ENTRY_POINT(hipdnnEnginePluginGetEngineName) engine_name;
} plugin_t;

typedef hipdnnEnginePluginHandle_t handle_t;
typedef hipdnnEnginePluginExecutionContext_t context_t;
typedef hipdnnPluginConstData_t const_data_t;

static int failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            ++failures;                                                                           \
            fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__);                                \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
        }                                                                                         \
    } while (0)

/* Function pointers from dlsym: POSIX guarantees the object-to-function conversion. */
#define RESOLVE(p, field, symbol) (*(void **)&(p).field = resolve((p).lib, #symbol))

static plugin_t load(const char *path) {
    plugin_t p;
    p.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p.lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(2);
    }
    RESOLVE(p, get_name, hipdnnPluginGetName);
    RESOLVE(p, get_version, hipdnnPluginGetVersion);
    RESOLVE(p, get_api_version, hipdnnPluginGetApiVersion);
    RESOLVE(p, get_type, hipdnnPluginGetType);
    RESOLVE(p, last_error, hipdnnPluginGetLastErrorString);
    RESOLVE(p, set_callback, hipdnnPluginSetLoggingCallback);
    RESOLVE(p, set_level, hipdnnPluginSetLogLevel);
    RESOLVE(p, all_ids, hipdnnEnginePluginGetAllEngineIds);
    RESOLVE(p, create, hipdnnEnginePluginCreate);
    RESOLVE(p, destroy, hipdnnEnginePluginDestroy);
    RESOLVE(p, set_stream, hipdnnEnginePluginSetStream);
    RESOLVE(p, applicable, hipdnnEnginePluginGetApplicableEngineIds);
    RESOLVE(p, details, hipdnnEnginePluginGetEngineDetails);
    RESOLVE(p, destroy_details, hipdnnEnginePluginDestroyEngineDetails);
    RESOLVE(p, workspace, hipdnnEnginePluginGetWorkspaceSize);
    RESOLVE(p, create_ctx, hipdnnEnginePluginCreateExecutionContext);
    RESOLVE(p, destroy_ctx, hipdnnEnginePluginDestroyExecutionContext);
    RESOLVE(p, ctx_workspace, hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext);
    RESOLVE(p, execute, hipdnnEnginePluginExecuteOpGraph);
    RESOLVE(p, serialize, hipdnnEnginePluginSerializeExecutionContext);
    RESOLVE(p, destroy_serialized, hipdnnEnginePluginDestroySerializedExecutionContext);
    RESOLVE(p, from_serialized, hipdnnEnginePluginCreateExecutionContextFromSerialized);
    RESOLVE(p, execute_overrides, hipdnnEnginePluginExecuteOpGraphWithOverrides);
    RESOLVE(p, engine_name, hipdnnEnginePluginGetEngineName);
    return p;
}

static const char *last_error(const plugin_t *p) {
    const char *text = NULL;
    p->last_error(&text);
    return text ? text : "(NULL)";
}

static const_data_t file_data(const char *path) {
    size_t size;
    void *bytes = read_file(path, &size);
    const_data_t data = {bytes, size};
    return data;
}

/* True while the library at `path` is mapped in this process. */
static int still_mapped(const char *path) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (handle) dlclose(handle);
    return handle != NULL;
}

/* ---- watchdog ---- */

static _Atomic(const char *) stage = "starting";
static atomic_int finished;

static void *watchdog(void *arg) {
    long seconds = (long)(intptr_t)arg;
    for (long waited = 0; waited < seconds * 10; ++waited) {
        if (atomic_load(&finished)) return NULL;
        usleep(100 * 1000);
    }
    fprintf(stderr, "FAILED: no progress for %ld s; hung in: %s\n", seconds, atomic_load(&stage));
    fflush(stderr);
    _exit(3);
}

/* ---- reentrant ---- */

static plugin_t plugin;
static const_data_t graph, config;
static atomic_long lines;
static _Thread_local int in_callback;

/* Set by the mode: the callback destroys these (context first) on its next line. */
static atomic_int destroy_victims;
static _Atomic(handle_t) victim_handle;
static _Atomic(context_t) victim_context;
static atomic_int victim_statuses = -1;

/* Calls into the plugin from inside its log callback: the listing, applicability, details,
 * a handle's whole life, a failing call (which replaces this thread's last error), a name. */
static void calls_from_the_callback(void) {
    uint32_t n = 0;
    int64_t ids[8];
    CHECK(plugin.all_ids(NULL, 0, &n) == SUCCESS, "nested GetAllEngineIds: %s", last_error(&plugin));
    handle_t h = NULL;
    CHECK(plugin.create(&h) == SUCCESS, "nested Create: %s", last_error(&plugin));
    CHECK(plugin.applicable(h, &graph, ids, 8, &n) == SUCCESS, "nested GetApplicableEngineIds: %s",
          last_error(&plugin));
    const_data_t details = {NULL, 0};
    if (plugin.details(h, HOST_ENGINE, &graph, &details) == SUCCESS)
        CHECK(plugin.destroy_details(h, &details) == SUCCESS, "nested DestroyEngineDetails");
    CHECK(plugin.destroy(NULL) == BAD_PARAM, "nested Destroy(NULL)");
    CHECK(plugin.destroy(h) == SUCCESS, "nested Destroy: %s", last_error(&plugin));
    const char *name = NULL;
    CHECK(plugin.engine_name(HOST_ENGINE, &name) == SUCCESS, "nested GetEngineName");
}

static void reentering_callback(hipdnnSeverity_t severity, const char *message) {
    (void)severity;
    CHECK(message != NULL, "NULL log line");
    atomic_fetch_add(&lines, 1);
    /* One level deep: the nested calls' own lines are only counted. */
    if (in_callback) return;
    in_callback = 1;
    calls_from_the_callback();
    if (atomic_exchange(&destroy_victims, 0)) {
        context_t ctx = atomic_exchange(&victim_context, NULL);
        int s = ctx ? (int)plugin.destroy_ctx(atomic_load(&victim_handle), ctx) : 0;
        s |= (int)plugin.destroy(atomic_load(&victim_handle));
        atomic_store(&victim_statuses, s);
    }
    in_callback = 0;
}

/* One entry point called so that it fails and logs; afterwards the host must read the error of
 * this call, not one of the callback's nested calls. A macro, so that the stage is named and the
 * lines are counted before the call runs. */
static long lines_before;

static void check_logged(const char *function, int returned, int expected) {
    CHECK(returned == expected, "%s: status %d, expected %d: %s", function, returned, expected,
          last_error(&plugin));
    CHECK(atomic_load(&lines) > lines_before, "%s wrote no log line", function);
    CHECK(strstr(last_error(&plugin), function) != NULL,
          "%s: the last error is another call's: %s", function, last_error(&plugin));
}

#define logs_and_returns(function, call, expected)                                                \
    do {                                                                                          \
        atomic_store(&stage, function);                                                           \
        lines_before = atomic_load(&lines);                                                       \
        check_logged(function, (int)(call), (int)(expected));                                     \
    } while (0)

static void mode_reentrant(const char *path, const char *graph_path, const char *config_path,
                           const char *dir) {
    plugin = load(path);
    graph = file_data(graph_path);
    config = file_data(config_path);
    CHECK(plugin.set_callback(reentering_callback) == SUCCESS, "SetLoggingCallback");
    CHECK(plugin.set_level(HIPDNN_SEV_INFO) == SUCCESS, "SetLogLevel");

    /* The first listing logs from inside its one-time initialisation. */
    atomic_store(&stage, "the first GetAllEngineIds");
    uint32_t n = 0;
    CHECK(plugin.all_ids(NULL, 0, &n) == SUCCESS && n > 0, "GetAllEngineIds: %s",
          last_error(&plugin));
    CHECK(atomic_load(&lines) > 0, "the first listing wrote no log line");

    handle_t h = NULL;
    CHECK(plugin.create(&h) == SUCCESS, "Create");
    context_t ctx = NULL;
    CHECK(plugin.create_ctx(h, &config, &graph, &ctx) == SUCCESS, "CreateExecutionContext: %s",
          last_error(&plugin));

    /* The golden variant pack, O and LSE included: a successful execute (the host engine's
     * staging decision logs on the first one). */
    enum { PACK = 7 };
    const int64_t uids[PACK] = {1, 2, 3, 4, 5, 6, 9};
    hipdnnPluginDeviceBuffer_t pack[PACK];
    char file[4096];
    for (int i = 0; i < PACK; ++i) {
        size_t size;
        snprintf(file, sizeof file, "%s/%lld.bin", dir, (long long)uids[i]);
        pack[i].uid = uids[i];
        pack[i].ptr = read_file(file, &size);
    }
    atomic_store(&stage, "a successful ExecuteOpGraph");
    CHECK(plugin.execute(h, ctx, NULL, pack, PACK) == SUCCESS, "ExecuteOpGraph: %s",
          last_error(&plugin));

    /* A declined graph is logged at INFO with the reason, and the call still succeeds. */
    snprintf(file, sizeof file, "%s/extent_2p60.bin", dir);
    const_data_t declined = file_data(file);
    atomic_store(&stage, "GetApplicableEngineIds declining a graph");
    long before_decline = atomic_load(&lines);
    int64_t none[4];
    n = 99;
    CHECK(plugin.applicable(h, &declined, none, 4, &n) == SUCCESS && n == 0,
          "GetApplicableEngineIds on a declined graph: %u engines: %s", n, last_error(&plugin));
    CHECK(atomic_load(&lines) > before_decline, "the decline wrote no log line");
    free((void *)declined.ptr);

    /* Every entry point that logs, made to fail (each failure is logged at ERROR). */
    const_data_t empty = {NULL, 0};
    context_t made = NULL;
    logs_and_returns("hipdnnPluginGetName", plugin.get_name(NULL), BAD_PARAM);
    logs_and_returns("hipdnnPluginGetVersion", plugin.get_version(NULL), BAD_PARAM);
    logs_and_returns("hipdnnPluginGetApiVersion", plugin.get_api_version(NULL), BAD_PARAM);
    logs_and_returns("hipdnnPluginGetType", plugin.get_type(NULL), BAD_PARAM);
    logs_and_returns("hipdnnPluginSetLoggingCallback", plugin.set_callback(NULL), BAD_PARAM);
    logs_and_returns("hipdnnPluginSetLogLevel", plugin.set_level((hipdnnSeverity_t)99),
                     HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    logs_and_returns("hipdnnEnginePluginGetAllEngineIds", plugin.all_ids(NULL, 0, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginCreate", plugin.create(NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginDestroy", plugin.destroy(NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginSetStream", plugin.set_stream(NULL, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginGetApplicableEngineIds",
                     plugin.applicable(h, NULL, NULL, 0, &n), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginGetEngineDetails",
                     plugin.details(h, HOST_ENGINE, &graph, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginDestroyEngineDetails", plugin.destroy_details(h, NULL),
                     BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginGetWorkspaceSize",
                     plugin.workspace(h, &config, &graph, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginCreateExecutionContext",
                     plugin.create_ctx(h, &config, &graph, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginDestroyExecutionContext", plugin.destroy_ctx(h, NULL),
                     BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
                     plugin.ctx_workspace(h, ctx, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginExecuteOpGraph", plugin.execute(h, ctx, NULL, NULL, 0),
                     BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginExecuteOpGraphWithOverrides",
                     plugin.execute_overrides(h, ctx, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL),
                     BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginSerializeExecutionContext",
                     plugin.serialize(h, ctx, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginDestroySerializedExecutionContext",
                     plugin.destroy_serialized(h, NULL), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginCreateExecutionContextFromSerialized",
                     plugin.from_serialized(h, &empty, &made), BAD_PARAM);
    logs_and_returns("hipdnnEnginePluginGetEngineName", plugin.engine_name(12345, NULL),
                     BAD_PARAM);

    /* The callback destroys the context and the handle of the very call that is logging. */
    const char *victim_calls[2] = {"ExecuteOpGraph on the victim", "GetEngineDetails on the victim"};
    for (int round = 0; round < 2; ++round) {
        handle_t vh = NULL;
        context_t vc = NULL;
        CHECK(plugin.create(&vh) == SUCCESS, "Create victim");
        CHECK(plugin.create_ctx(vh, &config, &graph, &vc) == SUCCESS, "victim context: %s",
              last_error(&plugin));
        atomic_store(&victim_handle, vh);
        atomic_store(&victim_context, vc);
        atomic_store(&victim_statuses, -1);
        atomic_store(&destroy_victims, 1);
        atomic_store(&stage, victim_calls[round]);
        int s = round == 0 ? (int)plugin.execute(vh, vc, NULL, NULL, 0)
                           : (int)plugin.details(vh, HOST_ENGINE, &graph, NULL);
        CHECK(s == BAD_PARAM, "%s: status %d: %s", victim_calls[round], s, last_error(&plugin));
        CHECK(atomic_load(&victim_statuses) == 0,
              "%s: destroying its context and handle from the callback: %d", victim_calls[round],
              atomic_load(&victim_statuses));
        CHECK(plugin.set_stream(vh, NULL) == BAD_PARAM, "%s: the victim handle is still live",
              victim_calls[round]);
    }

    atomic_store(&stage, "teardown");
    CHECK(plugin.destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
    CHECK(plugin.destroy(h) == SUCCESS, "Destroy");
    for (int i = 0; i < PACK; ++i) free(pack[i].ptr);
    printf("reentrant: 23 entry points and 2 victim calls returned; %ld log lines delivered, "
           "each calling back into the plugin\n",
           atomic_load(&lines));
    dlclose(plugin.lib);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* ---- unload-live ---- */

static atomic_int spinning;

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (atomic_load_explicit(&spinning, memory_order_relaxed)) ++x;
    return NULL;
}

static long threads_now(void) {
    char line[256];
    long threads = -1;
    FILE *status = fopen("/proc/self/status", "r");
    while (status && fgets(line, sizeof line, status))
        if (strncmp(line, "Threads:", 8) == 0) threads = strtol(line + 8, NULL, 10);
    if (status) fclose(status);
    return threads;
}

static void mode_unload_live(const char *path, const char *graph_path, const char *config_path,
                             const char *dir, long loops) {
    const_data_t g = file_data(graph_path), c = file_data(config_path);
    atomic_store(&spinning, 1);
    pthread_t spinners[2];
    for (int i = 0; i < 2; ++i) pthread_create(&spinners[i], NULL, spin, NULL);
    enum { PACK = 7 };
    const int64_t uids[PACK] = {1, 2, 3, 4, 5, 6, 9};
    char file[4096];
    long baseline = -1;
    /* Loop -1 destroys its handle: it starts whatever a GPU runtime keeps running for the process
     * (the CUDA driver starts threads of its own at cuInit), so the count after it is the one no
     * later loop may exceed once the plugin is unloaded. */
    for (long loop = -1; loop < loops; ++loop) {
        atomic_store(&stage, "load, execute on the pool, leak the handle");
        plugin_t p = load(path);
        handle_t h = NULL;
        context_t ctx = NULL;
        CHECK(p.create(&h) == SUCCESS, "Create");
        CHECK(p.create_ctx(h, &c, &g, &ctx) == SUCCESS, "CreateExecutionContext: %s",
              last_error(&p));
        hipdnnPluginDeviceBuffer_t pack[PACK];
        for (int i = 0; i < PACK; ++i) {
            size_t size;
            snprintf(file, sizeof file, "%s/%lld.bin", dir, (long long)uids[i]);
            pack[i].uid = uids[i];
            pack[i].ptr = read_file(file, &size);
        }
        CHECK(p.execute(h, ctx, NULL, pack, PACK) == SUCCESS, "loop %ld: execute: %s", loop,
              last_error(&p));
        for (int i = 0; i < PACK; ++i) free(pack[i].ptr);
        if (loop < 0) {
            CHECK(p.destroy_ctx(h, ctx) == SUCCESS && p.destroy(h) == SUCCESS, "warm-up destroy");
            dlclose(p.lib);
            baseline = threads_now();
            continue;
        }
        CHECK(threads_now() > baseline, "loop %ld: the execute started no pool thread", loop);
        atomic_store(&stage, "dlclose with a live handle");
        dlclose(p.lib);
        /* Time for a thread left behind to wake in unmapped code. */
        usleep(20 * 1000);
        CHECK(threads_now() == baseline, "loop %ld: %ld threads after dlclose, %ld before load",
              loop, threads_now(), baseline);
        CHECK(!still_mapped(path), "loop %ld: the plugin is still mapped after dlclose", loop);
    }
    atomic_store(&spinning, 0);
    for (int i = 0; i < 2; ++i) pthread_join(spinners[i], NULL);
    printf("unload-live: %ld loops unloaded the plugin with a live handle after a pool execute\n",
           loops);
    free((void *)g.ptr);
    free((void *)c.ptr);
}

/* ---- serialized ---- */

static void mode_serialized(const char *path, const char *graph_path, const char *config_path,
                            long loops) {
    const_data_t g = file_data(graph_path), c = file_data(config_path);
    for (long loop = 0; loop < loops; ++loop) {
        atomic_store(&stage, "serialize, destroy, return");
        plugin_t p = load(path);
        handle_t h = NULL, other = NULL;
        context_t ctx = NULL;
        CHECK(p.create(&h) == SUCCESS, "Create");
        CHECK(p.create_ctx(h, &c, &g, &ctx) == SUCCESS, "CreateExecutionContext: %s",
              last_error(&p));
        const_data_t blob = {NULL, 0};
        CHECK(p.serialize(h, ctx, &blob) == SUCCESS && blob.ptr && blob.size,
              "SerializeExecutionContext: %s", last_error(&p));
        CHECK(p.destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
        CHECK(p.destroy(h) == SUCCESS, "Destroy");
        /* The bytes are still the caller's: readable, and only the lending handle value returns
         * them, once. */
        const unsigned char *bytes = blob.ptr;
        unsigned sum = 0;
        for (size_t i = 0; i < blob.size; ++i) sum += bytes[i];
        CHECK(sum > 0, "the serialized bytes are all zero");
        CHECK(p.create(&other) == SUCCESS, "Create another");
        const_data_t copy = blob;
        CHECK(p.destroy_serialized(other, &copy) == BAD_PARAM && copy.ptr == blob.ptr,
              "another handle returned the bytes");
        CHECK(p.destroy_details(h, &copy) == BAD_PARAM, "DestroyEngineDetails took them");
        CHECK(p.destroy(other) == SUCCESS, "Destroy another");
        copy = blob;
        hipdnnPluginStatus_t s = p.destroy_serialized(h, &copy);
        CHECK(s == SUCCESS && copy.ptr == NULL && copy.size == 0,
              "loop %ld: returning serialized bytes through their destroyed handle: %d: %s", loop,
              (int)s, last_error(&p));
        copy = blob;
        s = p.destroy_serialized(h, &copy);
        CHECK(s == BAD_PARAM && strstr(last_error(&p), "already returned"),
              "a second return: %d: %s", (int)s, last_error(&p));
        dlclose(p.lib);
    }
    printf("serialized: %ld loops returned the bytes after their handle was destroyed\n", loops);
    free((void *)g.ptr);
    free((void *)c.ptr);
}

/* ---- reload ---- */

static void mode_reload(const char *path, long loops) {
    handle_t *earlier = calloc((size_t)loops, sizeof *earlier);
    if (!earlier) exit(2);
    long accepted = 0;
    for (long loop = 0; loop < loops; ++loop) {
        atomic_store(&stage, "reload and probe earlier handles");
        plugin_t p = load(path);
        handle_t h = NULL;
        CHECK(p.create(&h) == SUCCESS, "Create");
        CHECK(p.set_stream(h, NULL) == SUCCESS, "the live handle is refused: %s", last_error(&p));
        for (long j = 0; j < loop; ++j) {
            if (p.set_stream(earlier[j], NULL) == SUCCESS) {
                ++accepted;
                CHECK(0, "load %ld accepted the handle %p of load %ld", loop, (void *)earlier[j], j);
            }
        }
        earlier[loop] = h;
        CHECK(p.destroy(h) == SUCCESS, "Destroy");
        dlclose(p.lib);
        CHECK(!still_mapped(path), "loop %ld: the plugin is still mapped after dlclose", loop);
    }
    printf("reload: %ld loads, %ld stale handles accepted\n", loops, accepted);
    free(earlier);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s reentrant PLUGIN GRAPH CONFIG DIR\n"
                "       %s unload-live PLUGIN POOL_GRAPH CONFIG POOL_DIR LOOPS\n"
                "       %s serialized PLUGIN GRAPH CONFIG LOOPS\n"
                "       %s reload PLUGIN LOOPS\n",
                argv[0], argv[0], argv[0], argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    const char *limit = getenv("LIFECYCLE_WATCHDOG_S");
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, (void *)(intptr_t)(limit ? atol(limit) : 300));
    if (strcmp(mode, "reentrant") == 0 && argc == 6) {
        mode_reentrant(argv[2], argv[3], argv[4], argv[5]);
    } else if (strcmp(mode, "unload-live") == 0 && argc == 7) {
        mode_unload_live(argv[2], argv[3], argv[4], argv[5], strtol(argv[6], NULL, 10));
    } else if (strcmp(mode, "serialized") == 0 && argc == 6) {
        mode_serialized(argv[2], argv[3], argv[4], strtol(argv[5], NULL, 10));
    } else if (strcmp(mode, "reload") == 0 && argc == 4) {
        mode_reload(argv[2], strtol(argv[3], NULL, 10));
    } else {
        fprintf(stderr, "unknown mode or wrong argument count: %s\n", mode);
        return 2;
    }
    atomic_store(&finished, 1);
    pthread_join(dog, NULL);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
