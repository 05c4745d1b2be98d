/*
 * What the two hosts built against the project header (run_graph.c, overrides_serialization.c)
 * share: the command line "PLUGIN.so GRAPH.bin ENGINE_CONFIG.bin DIR UID...", the plugin's
 * last-error text in failure reports, and the variant pack read from DIR/<uid>.bin and written
 * back to DIR/<uid>.out. Header-only, each host stays one translation unit.
 */
#ifndef RAGGED_TESTS_PLUGIN_HOST_H
#define RAGGED_TESTS_PLUGIN_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hipdnn_engine_plugin.h"
#include "host_io.h"

/* A pointer to an entry point, typed from the header's prototype. */
#define ENTRY_POINT(symbol) __typeof__(&symbol)

/* Resolved by each host before its first call that can fail. */
static ENTRY_POINT(hipdnnPluginGetLastErrorString) last_error;

static inline const char *message(void) {
    const char *text = NULL;
    last_error(&text);
    return text ? text : "(NULL)";
}

static inline int fail(const char *what, hipdnnPluginStatus_t status) {
    fprintf(stderr, "%s failed with status %d: %s\n", what, (int)status, message());
    return 1;
}

/* Checks the command line and dlopens argv[1]; exits with status 2 when either fails. */
static inline void *open_plugin(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s PLUGIN.so GRAPH.bin ENGINE_CONFIG.bin DIR UID...\n", argv[0]);
        exit(2);
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
    return lib;
}

/* The variant pack named by argv[5..]: one buffer per uid, read from DIR/<uid>.bin. */
struct pack_files {
    int count;
    hipdnnPluginDeviceBuffer_t *entries;
    size_t *sizes;
};

static inline struct pack_files read_pack(int argc, char **argv) {
    struct pack_files p;
    p.count = argc - 5;
    p.entries = calloc((size_t)p.count, sizeof *p.entries);
    p.sizes = calloc((size_t)p.count, sizeof *p.sizes);
    char path[4096];
    for (int i = 0; i < p.count; ++i) {
        p.entries[i].uid = strtoll(argv[5 + i], NULL, 10);
        snprintf(path, sizeof path, "%s/%lld.bin", argv[4], (long long)p.entries[i].uid);
        p.entries[i].ptr = read_file(path, &p.sizes[i]);
    }
    return p;
}

/* Writes every buffer to DIR/<uid>.out and frees the pack. */
static inline void write_back_pack(const char *dir, struct pack_files *p) {
    char path[4096];
    for (int i = 0; i < p->count; ++i) {
        snprintf(path, sizeof path, "%s/%lld.out", dir, (long long)p->entries[i].uid);
        write_file(path, p->entries[i].ptr, p->sizes[i]);
        free(p->entries[i].ptr);
    }
    free(p->entries);
    free(p->sizes);
}

#endif
