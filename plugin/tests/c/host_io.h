/*
 * The plumbing every C host of these tests needs and none of them tests: resolving a symbol or
 * exiting, reading a whole file, writing one. Header-only (static inline, so a host that uses
 * only part of it still builds under -Wall -Wextra -Werror); included by run_graph.c,
 * overrides_serialization.c and hardening.c, each built as one translation unit as before.
 * Failures exit with status 2, which the Rust drivers read as "the host could not run".
 */
#ifndef RAGGED_TESTS_HOST_IO_H
#define RAGGED_TESTS_HOST_IO_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static inline void *resolve(void *lib, const char *name) {
    void *symbol = dlsym(lib, name);
    if (!symbol) {
        fprintf(stderr, "missing symbol %s\n", name);
        exit(2);
    }
    return symbol;
}

static inline void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *data = malloc(len > 0 ? (size_t)len : 1);
    if (!data || fread(data, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)len;
    return data;
}

static inline void write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

#endif
