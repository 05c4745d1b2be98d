/*
 * Regression checks of issue 13, run as a hostile C host would: through dlopen, from several
 * threads, with oversized graphs, stale handles, non-finite scales, overlapping buffers and
 * load/unload loops. Built plain, and under AddressSanitizer by .ci/hardening.sh.
 *
 * usage: hardening MODE PLUGIN.so ARGS...   (modes and their arguments: see main)
 * Exit status 0 when every check of the mode held; otherwise each failed check is printed.
 *
 * The types restate PluginApiDataTypes.h / EnginePluginApi.h (plugin-abi.md §3-§4); they are
 * local to this file on purpose.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_io.h"

enum { SUCCESS = 0, BAD_PARAM = 1, INVALID_VALUE = 2, INTERNAL_ERROR = 3 };
static const int64_t HOST_ENGINE = 8202884889727546333LL;

typedef int status_t;
typedef struct { const void *ptr; size_t size; } const_data_t;
typedef struct { int64_t uid; void *ptr; } device_buffer_t;
typedef void *handle_t;
typedef void *context_t;
typedef void (*log_callback_t)(int severity, const char *message);

typedef struct {
    void *lib;
    void (*last_error)(const char **);
    status_t (*set_callback)(log_callback_t);
    status_t (*create)(handle_t *);
    status_t (*destroy)(handle_t);
    status_t (*applicable)(handle_t, const const_data_t *, int64_t *, uint32_t, uint32_t *);
    status_t (*details)(handle_t, int64_t, const const_data_t *, const_data_t *);
    status_t (*destroy_details)(handle_t, const_data_t *);
    status_t (*create_ctx)(handle_t, const const_data_t *, const const_data_t *, context_t *);
    status_t (*destroy_ctx)(handle_t, context_t);
    status_t (*ctx_ws)(handle_t, context_t, size_t *);
    status_t (*execute)(handle_t, context_t, void *, const device_buffer_t *, uint32_t);
} plugin_t;

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
static plugin_t load(const char *path) {
    plugin_t p;
    p.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p.lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(2);
    }
    *(void **)&p.last_error = resolve(p.lib, "hipdnnPluginGetLastErrorString");
    *(void **)&p.set_callback = resolve(p.lib, "hipdnnPluginSetLoggingCallback");
    *(void **)&p.create = resolve(p.lib, "hipdnnEnginePluginCreate");
    *(void **)&p.destroy = resolve(p.lib, "hipdnnEnginePluginDestroy");
    *(void **)&p.applicable = resolve(p.lib, "hipdnnEnginePluginGetApplicableEngineIds");
    *(void **)&p.details = resolve(p.lib, "hipdnnEnginePluginGetEngineDetails");
    *(void **)&p.destroy_details = resolve(p.lib, "hipdnnEnginePluginDestroyEngineDetails");
    *(void **)&p.create_ctx = resolve(p.lib, "hipdnnEnginePluginCreateExecutionContext");
    *(void **)&p.destroy_ctx = resolve(p.lib, "hipdnnEnginePluginDestroyExecutionContext");
    *(void **)&p.ctx_ws = resolve(p.lib, "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext");
    *(void **)&p.execute = resolve(p.lib, "hipdnnEnginePluginExecuteOpGraph");
    return p;
}

static const char *last_error(const plugin_t *p) {
    const char *text = NULL;
    p->last_error(&text);
    return text ? text : "(NULL)";
}

/* The golden variant pack: DIR/<uid>.bin for Q 1, K 2, V 3, O 4, offsets 5 and 6, LSE 9. */
enum { PACK = 7 };
static const int64_t PACK_UIDS[PACK] = {1, 2, 3, 4, 5, 6, 9};
typedef struct {
    device_buffer_t entries[PACK];
    size_t sizes[PACK];
} pack_t;

static pack_t read_pack(const char *dir) {
    pack_t pack;
    char path[4096];
    for (int i = 0; i < PACK; ++i) {
        snprintf(path, sizeof path, "%s/%lld.bin", dir, (long long)PACK_UIDS[i]);
        pack.entries[i].uid = PACK_UIDS[i];
        pack.entries[i].ptr = read_file(path, &pack.sizes[i]);
    }
    return pack;
}

static int slot(int64_t uid) {
    for (int i = 0; i < PACK; ++i)
        if (PACK_UIDS[i] == uid) return i;
    exit(2);
}

static void free_pack(pack_t *pack) {
    for (int i = 0; i < PACK; ++i) free(pack->entries[i].ptr);
}

static const_data_t file_data(const char *path) {
    size_t size;
    void *bytes = read_file(path, &size);
    const_data_t data = {bytes, size};
    return data;
}

/* Issue 13 items 1-2: oversized extents are declined at applicability and never INTERNAL_ERROR. */
static void mode_extent(const plugin_t *p, const char *graph_path, const char *config_path) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    handle_t h = NULL;
    CHECK(p->create(&h) == SUCCESS, "Create");
    int64_t ids[4];
    uint32_t n = 99;
    status_t s = p->applicable(h, &graph, ids, 4, &n);
    CHECK(s == SUCCESS && n == 0, "GetApplicableEngineIds: status %d, %u engines: %s", s, n,
          last_error(p));
    context_t ctx = NULL;
    s = p->create_ctx(h, &config, &graph, &ctx);
    const char *why = last_error(p);
    CHECK(s != SUCCESS && s != INTERNAL_ERROR, "CreateExecutionContext status %d: %s", s, why);
    CHECK(strstr(why, "tensor uid") && strstr(why, "bytes"), "message names no uid/bytes: %s", why);
    printf("CreateExecutionContext: status %d: %s\n", s, why);
    CHECK(p->destroy(h) == SUCCESS, "Destroy");
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* Issue 13 item 3: GetEngineDetails racing Destroy never returns a freed buffer, and what it
 * returned stays readable until DestroyEngineDetails, even after the handle is destroyed. */
typedef struct {
    const plugin_t *p;
    handle_t h;
    const_data_t graph;
    long successes;
    unsigned checksum;
} race_t;

static void *details_loop(void *arg) {
    race_t *r = arg;
    for (;;) {
        const_data_t d = {NULL, 0};
        if (r->p->details(r->h, HOST_ENGINE, &r->graph, &d) != SUCCESS) break;
        ++r->successes;
        /* Reading every byte is what AddressSanitizer checks: a freed buffer is reported. */
        const unsigned char *bytes = d.ptr;
        for (size_t i = 0; i < d.size; ++i) r->checksum += bytes[i];
        /* Returned through the handle value even if another thread destroyed it meanwhile. */
        status_t s = r->p->destroy_details(r->h, &d);
        CHECK(s == SUCCESS && d.ptr == NULL, "DestroyEngineDetails after a race: %d", s);
    }
    return NULL;
}

static void mode_details_race(const plugin_t *p, const char *graph_path, long rounds) {
    const_data_t graph = file_data(graph_path);
    long total = 0;
    for (long round = 0; round < rounds; ++round) {
        race_t r = {p, NULL, graph, 0, 0};
        CHECK(p->create(&r.h) == SUCCESS, "Create");
        pthread_t t;
        pthread_create(&t, NULL, details_loop, &r);
        /* Let the other thread get going for a varying while, then pull the handle. */
        for (volatile long spin = 0; spin < (round % 64) * 500; ++spin) {
        }
        status_t s = p->destroy(r.h);
        CHECK(s == SUCCESS, "Destroy during GetEngineDetails: %d: %s", s, last_error(p));
        pthread_join(t, NULL);
        total += r.successes;
    }
    printf("%ld rounds, %ld details calls raced a destroy\n", rounds, total);
    free((void *)graph.ptr);
}

/* Issue 13 item 4: handle and context values never repeat; stale ones are BAD_PARAM. */
static int seen_before(const uintptr_t *values, long n, uintptr_t v) {
    for (long i = 0; i < n; ++i)
        if (values[i] == v) return 1;
    return 0;
}

static void mode_stale(const plugin_t *p, const char *graph_path, const char *config_path,
                       long rounds) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    uintptr_t *values = calloc((size_t)rounds * 2, sizeof *values);
    long n = 0;
    handle_t old_h = NULL;
    context_t old_ctx = NULL;
    for (long round = 0; round < rounds; ++round) {
        handle_t h = NULL;
        context_t ctx = NULL;
        CHECK(p->create(&h) == SUCCESS, "Create");
        CHECK(p->create_ctx(h, &config, &graph, &ctx) == SUCCESS, "CreateExecutionContext: %s",
              last_error(p));
        CHECK(!seen_before(values, n, (uintptr_t)h), "handle %p repeats (round %ld)", h, round);
        values[n++] = (uintptr_t)h;
        CHECK(!seen_before(values, n, (uintptr_t)ctx), "context %p repeats (round %ld)", ctx, round);
        values[n++] = (uintptr_t)ctx;
        CHECK(p->destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
        CHECK(p->destroy(h) == SUCCESS, "Destroy");
        old_h = h;
        old_ctx = ctx;
    }
    /* A live handle and context exist while the stale ones are tried. */
    handle_t h = NULL;
    context_t ctx = NULL;
    CHECK(p->create(&h) == SUCCESS, "Create");
    CHECK(p->create_ctx(h, &config, &graph, &ctx) == SUCCESS, "CreateExecutionContext");
    size_t ws = 0;
    status_t s = p->ctx_ws(h, old_ctx, &ws);
    CHECK(s == BAD_PARAM, "stale context in GetWorkspaceSizeFromExecutionContext: %d", s);
    device_buffer_t none[1] = {{1, NULL}};
    s = p->execute(h, old_ctx, NULL, none, 0);
    CHECK(s == BAD_PARAM, "stale context in ExecuteOpGraph: %d", s);
    CHECK(strstr(last_error(p), "is not live"), "message: %s", last_error(p));
    uint32_t count = 0;
    s = p->applicable(old_h, &graph, NULL, 0, &count);
    CHECK(s == BAD_PARAM, "stale handle in GetApplicableEngineIds: %d", s);
    s = p->destroy(old_h);
    CHECK(s == BAD_PARAM, "stale handle in Destroy: %d", s);
    CHECK(p->destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
    CHECK(p->destroy(h) == SUCCESS, "Destroy");
    printf("%ld handles and %ld contexts, all distinct\n", rounds + 1, rounds + 1);
    free(values);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* Runs the golden graph once on `pack`; returns the status. */
static status_t run_once(const plugin_t *p, const_data_t *graph, const_data_t *config,
                         const device_buffer_t *entries, uint32_t n) {
    handle_t h = NULL;
    context_t ctx = NULL;
    status_t s = p->create(&h);
    if (s != SUCCESS) return s;
    s = p->create_ctx(h, config, graph, &ctx);
    if (s == SUCCESS) {
        s = p->execute(h, ctx, NULL, entries, n);
        p->destroy_ctx(h, ctx);
    }
    p->destroy(h);
    return s;
}

static int unchanged(const pack_t *now, const pack_t *before, int64_t uid) {
    int i = slot(uid);
    return memcmp(now->entries[i].ptr, before->entries[i].ptr, now->sizes[i]) == 0;
}

/* Issue 13 item 5: a NaN or infinite runtime scale is INVALID_VALUE and writes nothing. */
static void mode_scale(const plugin_t *p, const char *graph_path, const char *config_path,
                       const char *dir) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b <= 3; ++b) {
        pack_t pack = read_pack(dir), before = read_pack(dir);
        float scale = b < 3 ? bad[b] : 0.25f;
        device_buffer_t entries[PACK + 1];
        memcpy(entries, pack.entries, sizeof pack.entries);
        entries[PACK].uid = 30;
        entries[PACK].ptr = &scale;
        status_t s = run_once(p, &graph, &config, entries, PACK + 1);
        if (b < 3) {
            CHECK(s == INVALID_VALUE, "scale %f: status %d: %s", scale, s, last_error(p));
            CHECK(strstr(last_error(p), "uid 30"), "message: %s", last_error(p));
            CHECK(unchanged(&pack, &before, 4) && unchanged(&pack, &before, 9),
                  "scale %f: an output was written", scale);
        } else {
            CHECK(s == SUCCESS, "scale 0.25: status %d: %s", s, last_error(p));
            CHECK(!unchanged(&pack, &before, 4), "scale 0.25: O not written");
        }
        free_pack(&pack);
        free_pack(&before);
    }
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* Issue 13 item 6: an offsets buffer inside an output is INVALID_VALUE and left unchanged. */
static void overlap_case(const plugin_t *p, const_data_t *graph, const_data_t *config,
                         const char *dir, int64_t aux_uid, int64_t out_uid, size_t at,
                         status_t expected) {
    pack_t pack = read_pack(dir);
    int out = slot(out_uid), aux = slot(aux_uid);
    /* The output gets room for the offsets after it, so "at" may also place them adjacent. */
    size_t out_size = pack.sizes[out], aux_size = pack.sizes[aux];
    unsigned char *joint = malloc(out_size + aux_size + 64);
    memcpy(joint, pack.entries[out].ptr, out_size);
    memcpy(joint + at, pack.entries[aux].ptr, aux_size);
    unsigned char *offsets_copy = malloc(aux_size);
    memcpy(offsets_copy, joint + at, aux_size);
    device_buffer_t entries[PACK];
    memcpy(entries, pack.entries, sizeof entries);
    entries[out].ptr = joint;
    entries[aux].ptr = joint + at;
    status_t s = run_once(p, graph, config, entries, PACK);
    CHECK(s == expected, "uid %lld at byte %zu of uid %lld: status %d (expected %d): %s",
          (long long)aux_uid, at, (long long)out_uid, s, expected, last_error(p));
    if (expected != SUCCESS) {
        CHECK(memcmp(offsets_copy, joint + at, aux_size) == 0, "offsets uid %lld overwritten",
              (long long)aux_uid);
        CHECK(strstr(last_error(p), "overlaps"), "message: %s", last_error(p));
    }
    free(offsets_copy);
    free(joint);
    free_pack(&pack);
}

static void mode_overlap(const plugin_t *p, const char *graph_path, const char *config_path,
                         const char *dir) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    pack_t sizes = read_pack(dir);
    size_t o_size = sizes.sizes[slot(4)], lse_size = sizes.sizes[slot(9)];
    free_pack(&sizes);
    overlap_case(p, &graph, &config, dir, 5, 4, 0, INVALID_VALUE);
    overlap_case(p, &graph, &config, dir, 5, 4, o_size / 2 & ~(size_t)7, INVALID_VALUE);
    overlap_case(p, &graph, &config, dir, 6, 9, 4, INVALID_VALUE);
    overlap_case(p, &graph, &config, dir, 6, 4, o_size - 8, INVALID_VALUE);
    /* Adjacent, not overlapping: runs. */
    overlap_case(p, &graph, &config, dir, 5, 4, (o_size + 7) & ~(size_t)7, SUCCESS);
    overlap_case(p, &graph, &config, dir, 6, 9, (lse_size + 7) & ~(size_t)7, SUCCESS);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* Issue 13 item 7: after the last handle and dlclose the library is unmapped, and a callback
 * set by a library that is gone is never called. */
static void mode_unload(const char *plugin_path, const char *sink_path, const char *graph_path,
                        const char *config_path, const char *dir, long loops,
                        const char *pool_graph_path, const char *pool_dir) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    /* Optional: a second graph, large enough to run on the worker pool, executed in every loop
     * too, so that the pool's threads start and must be gone before dlclose. */
    const_data_t pool_graph = {NULL, 0};
    if (pool_graph_path) pool_graph = file_data(pool_graph_path);
    for (long loop = 0; loop < loops; ++loop) {
        void *sink = dlopen(sink_path, RTLD_NOW | RTLD_LOCAL);
        CHECK(sink != NULL, "dlopen sink: %s", dlerror());
        if (!sink) break;
        log_callback_t callback;
        long (*received)(void);
        *(void **)&callback = resolve(sink, "sink_log");
        *(void **)&received = resolve(sink, "sink_received");
        plugin_t p = load(plugin_path);
        CHECK(p.set_callback(callback) == SUCCESS, "SetLoggingCallback");
        pack_t pack = read_pack(dir);
        status_t s = run_once(&p, &graph, &config, pack.entries, PACK);
        CHECK(s == SUCCESS, "loop %ld: execute: %d: %s", loop, s, last_error(&p));
        free_pack(&pack);
        if (pool_graph_path) {
            pack_t large = read_pack(pool_dir);
            s = run_once(&p, &pool_graph, &config, large.entries, PACK);
            CHECK(s == SUCCESS, "loop %ld: execute on the pool: %d: %s", loop, s, last_error(&p));
            free_pack(&large);
        }
        /* A failing call logs through the callback. */
        CHECK(p.create(NULL) == BAD_PARAM, "Create(NULL)");
        CHECK(received() > 0, "loop %ld: the callback received nothing", loop);
        dlclose(p.lib);
        if (getenv("HARDENING_DEBUG")) {
            char line[256];
            FILE *st = fopen("/proc/self/status", "r");
            while (st && fgets(line, sizeof line, st))
                if (strncmp(line, "Threads:", 8) == 0) fprintf(stderr, "loop %ld: %s", loop, line);
            if (st) fclose(st);
        }
        void *still = dlopen(plugin_path, RTLD_NOW | RTLD_NOLOAD);
        CHECK(still == NULL, "loop %ld: the plugin is still mapped after dlclose", loop);
        if (still) dlclose(still);
        dlclose(sink);
    }
    /* The sink is unloaded: a fresh load must not call into it on the next failure. */
    plugin_t p = load(plugin_path);
    CHECK(p.create(NULL) == BAD_PARAM, "Create(NULL) after reload");
    dlclose(p.lib);
    printf("%ld load/execute/unload loops%s\n", loops,
           pool_graph_path ? ", each also on the worker pool" : "");
    free((void *)pool_graph.ptr);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* Concurrency, for ThreadSanitizer (.ci/hardening.sh): THREADS threads execute the golden graph
 * EXECUTES times each on one shared context, each into its own outputs, while one more thread
 * creates and destroys contexts and engine details on the same handle. Every output must be
 * bit-identical to a single-threaded run's. Then the handle is destroyed (the worker pool stops)
 * and a second handle runs once more, so the pool's restart runs under the sanitizer too. */
typedef struct {
    const plugin_t *p;
    handle_t h;
    context_t ctx;
    const pack_t *pack;
    const pack_t *want;
    long executes;
    long mismatches;
    status_t failed;
} worker_t;

static void *execute_loop(void *arg) {
    worker_t *w = arg;
    size_t o_size = w->pack->sizes[slot(4)], lse_size = w->pack->sizes[slot(9)];
    unsigned char *o = malloc(o_size), *lse = malloc(lse_size);
    device_buffer_t entries[PACK];
    memcpy(entries, w->pack->entries, sizeof entries);
    entries[slot(4)].ptr = o;
    entries[slot(9)].ptr = lse;
    for (long i = 0; i < w->executes; ++i) {
        /* As read from the files: padding rows are never written and must match too. */
        memcpy(o, w->pack->entries[slot(4)].ptr, o_size);
        memcpy(lse, w->pack->entries[slot(9)].ptr, lse_size);
        status_t s = w->p->execute(w->h, w->ctx, NULL, entries, PACK);
        if (s != SUCCESS) {
            w->failed = s;
            break;
        }
        if (memcmp(o, w->want->entries[slot(4)].ptr, o_size) != 0 ||
            memcmp(lse, w->want->entries[slot(9)].ptr, lse_size) != 0)
            ++w->mismatches;
    }
    free(o);
    free(lse);
    return NULL;
}

typedef struct {
    const plugin_t *p;
    handle_t h;
    const_data_t *graph, *config;
    atomic_int stop;
    long cycles;
    status_t failed;
} churn_t;

static void *churn_loop(void *arg) {
    churn_t *c = arg;
    while (!atomic_load(&c->stop) && !c->failed) {
        context_t ctx = NULL;
        const_data_t d = {NULL, 0};
        status_t s = c->p->create_ctx(c->h, c->config, c->graph, &ctx);
        if (s == SUCCESS) s = c->p->destroy_ctx(c->h, ctx);
        if (s == SUCCESS) s = c->p->details(c->h, HOST_ENGINE, c->graph, &d);
        if (s == SUCCESS) s = c->p->destroy_details(c->h, &d);
        if (s != SUCCESS) c->failed = s;
        ++c->cycles;
    }
    return NULL;
}

static void mode_threads(const plugin_t *p, const char *graph_path, const char *config_path,
                         const char *dir, long threads, long executes) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    pack_t pack = read_pack(dir), want = read_pack(dir);
    /* The single-threaded answer every concurrent execute must reproduce. */
    status_t s = run_once(p, &graph, &config, want.entries, PACK);
    CHECK(s == SUCCESS, "single-threaded execute: %d: %s", s, last_error(p));
    handle_t h = NULL;
    context_t ctx = NULL;
    CHECK(p->create(&h) == SUCCESS, "Create");
    CHECK(p->create_ctx(h, &config, &graph, &ctx) == SUCCESS, "CreateExecutionContext: %s",
          last_error(p));
    worker_t *workers = calloc((size_t)threads, sizeof *workers);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    churn_t churn = {p, h, &graph, &config, 0, 0, SUCCESS};
    pthread_t churn_id;
    pthread_create(&churn_id, NULL, churn_loop, &churn);
    for (long t = 0; t < threads; ++t) {
        worker_t w = {p, h, ctx, &pack, &want, executes, 0, SUCCESS};
        workers[t] = w;
        pthread_create(&ids[t], NULL, execute_loop, &workers[t]);
    }
    long mismatches = 0;
    for (long t = 0; t < threads; ++t) {
        pthread_join(ids[t], NULL);
        CHECK(workers[t].failed == SUCCESS, "thread %ld: execute status %d", t, workers[t].failed);
        mismatches += workers[t].mismatches;
    }
    atomic_store(&churn.stop, 1);
    pthread_join(churn_id, NULL);
    CHECK(churn.failed == SUCCESS, "context/details churn: status %d", churn.failed);
    CHECK(mismatches == 0, "%ld of %ld concurrent executes differ from the single-threaded one",
          mismatches, threads * executes);
    CHECK(p->destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
    CHECK(p->destroy(h) == SUCCESS, "Destroy");
    /* The pool stopped with the last handle; a new handle starts it again. */
    s = run_once(p, &graph, &config, pack.entries, PACK);
    CHECK(s == SUCCESS, "execute after the pool restarted: %d: %s", s, last_error(p));
    CHECK(unchanged(&pack, &want, 4) && unchanged(&pack, &want, 9), "restarted pool: outputs differ");
    printf("%ld threads x %ld executes on one context, all bit-identical; %ld context/details "
           "cycles alongside\n", threads, executes, churn.cycles);
    free(workers);
    free(ids);
    free_pack(&pack);
    free_pack(&want);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

/* The bad-input suite for the sanitizer builds: the Rust ABI suites (tests/abi.rs,
 * tests/execute.rs, tests/overrides_and_serialization.rs) run their checks from a Rust test binary,
 * which cannot dlopen an instrumented plugin (it does not export the sanitizer runtime), so the
 * same kinds of bad input are restated here and run from the ASan C host. Every case must be
 * refused with a status other than SUCCESS and INTERNAL_ERROR and a message, and leave the
 * outputs untouched; AddressSanitizer checks that no refusal reads or writes out of bounds. Each
 * truncated or damaged input sits in a heap block of exactly its size. */
typedef status_t (*serialize_t)(handle_t, context_t, const_data_t *);
typedef status_t (*destroy_serialized_t)(handle_t, const_data_t *);
typedef status_t (*from_serialized_t)(handle_t, const const_data_t *, context_t *);
typedef status_t (*with_overrides_t)(handle_t, context_t, void *, const device_buffer_t *, uint32_t,
                                     uint32_t, const int64_t *, const uint32_t *,
                                     const int64_t *const *, const int64_t *const *);

static long refused;

static void expect_refused(const plugin_t *p, status_t s, const char *what) {
    const char *why = last_error(p);
    CHECK(s != SUCCESS && s != INTERNAL_ERROR, "%s: status %d: %s", what, s, why);
    CHECK(why[0] != '\0' && strcmp(why, "(NULL)") != 0, "%s: no message", what);
    ++refused;
}

/* `len` bytes of `data` in a block of exactly that size (NULL-free even when len is 0). */
static const_data_t exact_copy(const void *data, size_t len) {
    void *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    const_data_t c = {copy, len};
    return c;
}

static void bad_graph_bytes(const plugin_t *p, handle_t h, const_data_t graph, const_data_t config,
                            from_serialized_t from_serialized) {
    char what[128];
    status_t (*workspace_size)(handle_t, const const_data_t *, const const_data_t *, size_t *);
    *(void **)&workspace_size = resolve(p->lib, "hipdnnEnginePluginGetWorkspaceSize");
    for (int cut = 0; cut < 16; ++cut) {
        const_data_t g = exact_copy(graph.ptr, graph.size * (size_t)cut / 16);
        int64_t ids[4];
        uint32_t n = 0;
        size_t ws = 0;
        context_t ctx = NULL;
        const_data_t d = {NULL, 0};
        status_t s = p->applicable(h, &g, ids, 4, &n);
        /* A cut graph is either refused or, at most, offers no engine. */
        CHECK(s != INTERNAL_ERROR && (s != SUCCESS || n == 0), "graph cut at %d/16: status %d, %u",
              cut, s, n);
        snprintf(what, sizeof what, "GetEngineDetails, graph cut at %d/16", cut);
        expect_refused(p, p->details(h, HOST_ENGINE, &g, &d), what);
        snprintf(what, sizeof what, "CreateExecutionContext, graph cut at %d/16", cut);
        expect_refused(p, p->create_ctx(h, &config, &g, &ctx), what);
        s = workspace_size(h, &config, &g, &ws);
        CHECK(s != INTERNAL_ERROR && s != SUCCESS, "GetWorkspaceSize, cut %d/16: %d", cut, s);
        snprintf(what, sizeof what, "CreateExecutionContextFromSerialized, graph bytes cut %d/16", cut);
        expect_refused(p, from_serialized(h, &g, &ctx), what);
        CHECK(ctx == NULL && d.ptr == NULL, "graph cut at %d/16: an output was written", cut);
        free((void *)g.ptr);
    }
    const_data_t dangling = {NULL, 16};
    context_t ctx = NULL;
    expect_refused(p, p->create_ctx(h, &config, &dangling, &ctx), "op_graph {NULL, 16}");
    const_data_t cut_config = exact_copy(config.ptr, config.size / 2);
    expect_refused(p, p->create_ctx(h, &cut_config, &graph, &ctx), "engine config cut in half");
    free((void *)cut_config.ptr);
}

static void bad_variant_packs(const plugin_t *p, handle_t h, context_t ctx, const char *dir,
                              with_overrides_t with_overrides) {
    char what[128];
    for (int c = 0; c < 4 * PACK + 1; ++c) {
        pack_t pack = read_pack(dir), before = read_pack(dir);
        device_buffer_t entries[PACK + 1];
        memcpy(entries, pack.entries, sizeof pack.entries);
        uint32_t n = PACK;
        int i = c % PACK;
        switch (c / PACK) {
        case 0: /* binding i missing */
            entries[i] = entries[PACK - 1];
            n = PACK - 1;
            snprintf(what, sizeof what, "uid %lld missing", (long long)PACK_UIDS[i]);
            break;
        case 1: /* binding i NULL */
            entries[i].ptr = NULL;
            snprintf(what, sizeof what, "uid %lld NULL", (long long)PACK_UIDS[i]);
            break;
        case 2: /* binding i misaligned */
            entries[i].ptr = (unsigned char *)entries[i].ptr + 1;
            snprintf(what, sizeof what, "uid %lld misaligned", (long long)PACK_UIDS[i]);
            break;
        case 3: /* binding i twice */
            entries[PACK] = entries[i];
            n = PACK + 1;
            snprintf(what, sizeof what, "uid %lld bound twice", (long long)PACK_UIDS[i]);
            break;
        default: /* an unknown uid instead of Q */
            entries[0].uid = 77;
            snprintf(what, sizeof what, "unknown uid 77");
            break;
        }
        expect_refused(p, p->execute(h, ctx, NULL, entries, n), what);
        CHECK(unchanged(&pack, &before, 4) && unchanged(&pack, &before, 9), "%s: output written",
              what);
        free_pack(&pack);
        free_pack(&before);
    }
    expect_refused(p, p->execute(h, ctx, NULL, NULL, PACK), "device_buffers NULL, 7 of them");
    /* Overrides: NULL arrays, an unknown uid, a changed rank, a NULL shape. */
    pack_t pack = read_pack(dir), before = read_pack(dir);
    const int64_t dims[4] = {1, 1, 1, 1}, strides[4] = {1, 1, 1, 1};
    const int64_t *dims_p[1] = {dims}, *strides_p[1] = {strides}, *null_p[1] = {NULL};
    const int64_t q = 1, unknown = 99;
    const uint32_t four = 4, three = 3;
    expect_refused(p, with_overrides(h, ctx, NULL, pack.entries, PACK, 1, NULL, &four, dims_p,
                                     strides_p), "override_unique_ids NULL");
    expect_refused(p, with_overrides(h, ctx, NULL, pack.entries, PACK, 1, &q, NULL, dims_p,
                                     strides_p), "override_lengths NULL");
    expect_refused(p, with_overrides(h, ctx, NULL, pack.entries, PACK, 1, &unknown, &four, dims_p,
                                     strides_p), "override of uid 99");
    expect_refused(p, with_overrides(h, ctx, NULL, pack.entries, PACK, 1, &q, &three, dims_p,
                                     strides_p), "override of rank 3");
    expect_refused(p, with_overrides(h, ctx, NULL, pack.entries, PACK, 1, &q, &four, null_p,
                                     strides_p), "override_shapes[0] NULL");
    CHECK(unchanged(&pack, &before, 4) && unchanged(&pack, &before, 9), "overrides: output written");
    free_pack(&pack);
    free_pack(&before);
}

static void bad_serialized(const plugin_t *p, handle_t h, context_t ctx, serialize_t serialize,
                           destroy_serialized_t destroy_serialized,
                           from_serialized_t from_serialized) {
    const_data_t stored = {NULL, 0};
    CHECK(serialize(h, ctx, &stored) == SUCCESS, "Serialize: %s", last_error(p));
    if (!stored.ptr) return;
    char what[128];
    for (int cut = 0; cut < 16; ++cut) {
        const_data_t c = exact_copy(stored.ptr, stored.size * (size_t)cut / 16);
        context_t out = NULL;
        snprintf(what, sizeof what, "serialized context cut at %d/16", cut);
        expect_refused(p, from_serialized(h, &c, &out), what);
        CHECK(out == NULL, "%s: a context was written", what);
        free((void *)c.ptr);
    }
    /* Every 7th byte flipped in turn: refused, or a context that then runs like any other. */
    long accepted = 0;
    for (size_t at = 0; at < stored.size; at += 7) {
        const_data_t c = exact_copy(stored.ptr, stored.size);
        ((unsigned char *)c.ptr)[at] ^= 0x5A;
        context_t out = NULL;
        status_t s = from_serialized(h, &c, &out);
        CHECK(s != INTERNAL_ERROR, "byte %zu flipped: INTERNAL_ERROR: %s", at, last_error(p));
        if (s == SUCCESS) {
            ++accepted;
            size_t ws = 0;
            CHECK(p->ctx_ws(h, out, &ws) == SUCCESS, "flipped byte %zu: workspace", at);
            CHECK(p->destroy_ctx(h, out) == SUCCESS, "flipped byte %zu: destroy", at);
        }
        free((void *)c.ptr);
    }
    const_data_t foreign = {stored.ptr, stored.size};
    size_t flips = (stored.size + 6) / 7;
    CHECK(destroy_serialized(h, &stored) == SUCCESS, "DestroySerialized: %s", last_error(p));
    expect_refused(p, destroy_serialized(h, &foreign), "serialized bytes given back twice");
    printf("%ld of %zu single-byte flips of a stored context were accepted (and ran)\n", accepted,
           flips);
}

static void mode_bad_input(const plugin_t *p, const char *graph_path, const char *config_path,
                           const char *dir) {
    const_data_t graph = file_data(graph_path), config = file_data(config_path);
    serialize_t serialize;
    destroy_serialized_t destroy_serialized;
    from_serialized_t from_serialized;
    with_overrides_t with_overrides;
    *(void **)&serialize = resolve(p->lib, "hipdnnEnginePluginSerializeExecutionContext");
    *(void **)&destroy_serialized = resolve(p->lib, "hipdnnEnginePluginDestroySerializedExecutionContext");
    *(void **)&from_serialized = resolve(p->lib, "hipdnnEnginePluginCreateExecutionContextFromSerialized");
    *(void **)&with_overrides = resolve(p->lib, "hipdnnEnginePluginExecuteOpGraphWithOverrides");
    handle_t h = NULL;
    context_t ctx = NULL;
    CHECK(p->create(&h) == SUCCESS, "Create");
    CHECK(p->create_ctx(h, &config, &graph, &ctx) == SUCCESS, "CreateExecutionContext: %s",
          last_error(p));
    bad_graph_bytes(p, h, graph, config, from_serialized);
    bad_variant_packs(p, h, ctx, dir, with_overrides);
    bad_serialized(p, h, ctx, serialize, destroy_serialized, from_serialized);
    /* NULL out-pointers and a NULL handle for the optional entry points. */
    const_data_t none = {NULL, 0};
    expect_refused(p, serialize(h, ctx, NULL), "Serialize(serialized_context = NULL)");
    expect_refused(p, serialize(NULL, ctx, &none), "Serialize(handle = NULL)");
    expect_refused(p, from_serialized(h, NULL, &ctx), "FromSerialized(serialized_context = NULL)");
    expect_refused(p, destroy_serialized(h, NULL), "DestroySerialized(NULL)");
    CHECK(p->destroy_ctx(h, ctx) == SUCCESS, "DestroyExecutionContext");
    CHECK(p->destroy(h) == SUCCESS, "Destroy");
    printf("%ld bad inputs refused with a message, no output written\n", refused);
    free((void *)graph.ptr);
    free((void *)config.ptr);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s extent PLUGIN GRAPH CONFIG\n"
                "       %s details-race PLUGIN GRAPH ROUNDS\n"
                "       %s stale PLUGIN GRAPH CONFIG ROUNDS\n"
                "       %s scale PLUGIN GRAPH CONFIG DIR\n"
                "       %s overlap PLUGIN GRAPH CONFIG DIR\n"
                "       %s unload PLUGIN SINK.so GRAPH CONFIG DIR LOOPS [POOL_GRAPH POOL_DIR]\n"
                "       %s threads PLUGIN GRAPH CONFIG DIR THREADS EXECUTES\n"
                "       %s bad-input PLUGIN GRAPH CONFIG DIR\n",
                argv[0], argv[0], argv[0], argv[0], argv[0], argv[0], argv[0], argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "unload") == 0 && (argc == 8 || argc == 10)) {
        mode_unload(argv[2], argv[3], argv[4], argv[5], argv[6], strtol(argv[7], NULL, 10),
                    argc == 10 ? argv[8] : NULL, argc == 10 ? argv[9] : NULL);
    } else {
        plugin_t p = load(argv[2]);
        if (strcmp(mode, "extent") == 0 && argc == 5) {
            mode_extent(&p, argv[3], argv[4]);
        } else if (strcmp(mode, "details-race") == 0 && argc == 5) {
            mode_details_race(&p, argv[3], strtol(argv[4], NULL, 10));
        } else if (strcmp(mode, "stale") == 0 && argc == 6) {
            mode_stale(&p, argv[3], argv[4], strtol(argv[5], NULL, 10));
        } else if (strcmp(mode, "scale") == 0 && argc == 6) {
            mode_scale(&p, argv[3], argv[4], argv[5]);
        } else if (strcmp(mode, "overlap") == 0 && argc == 6) {
            mode_overlap(&p, argv[3], argv[4], argv[5]);
        } else if (strcmp(mode, "bad-input") == 0 && argc == 6) {
            mode_bad_input(&p, argv[3], argv[4], argv[5]);
        } else if (strcmp(mode, "threads") == 0 && argc == 8) {
            mode_threads(&p, argv[3], argv[4], argv[5], strtol(argv[6], NULL, 10),
                         strtol(argv[7], NULL, 10));
        } else {
            fprintf(stderr, "unknown mode or wrong argument count: %s\n", mode);
            return 2;
        }
        dlclose(p.lib);
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
