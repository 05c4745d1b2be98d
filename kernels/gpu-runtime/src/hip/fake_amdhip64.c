/* A stand-in for libamdhip64 on machines without an AMD GPU, for tests only.
 *
 * It claims one gfx942 device (FAKE_HIP_DEVICES=0 in the environment: none; HIP 6.2 unless
 * FAKE_HIP_VERSION says otherwise) and keeps
 * "device" memory in a side table: hipMalloc hands out addresses inside a PROT_NONE
 * reservation, so any host dereference of a device pointer faults, and only hipMemcpy* reach
 * the backing store. Copies and synchronisations are counted for the tests to read back through
 * fake_hip_counters(). Built with -DFAKE_HIP_NO_COPIES it lacks the copy path's functions, as
 * a runtime that cannot serve the host engine would. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>

typedef int hipError_t;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NO_DEVICE = 100 };
#define RESERVATION (1ull << 30)
#define MAX_ALLOCS 256

struct alloc { uintptr_t base; size_t size; unsigned char *backing; };
static struct alloc allocs[MAX_ALLOCS];
static int n_allocs;
static uintptr_t reserved, next_free;
static long h2d, d2h, syncs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void reserve(void) {
  if (reserved) return;
  void *p = mmap(NULL, RESERVATION, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) { reserved = (uintptr_t)p; next_free = reserved + 4096; }
}

/* The backing byte for [addr, addr + n) if it lies inside one allocation, else NULL. */
static unsigned char *backing(uintptr_t addr, size_t n) {
  for (int i = 0; i < n_allocs; i++) {
    struct alloc *a = &allocs[i];
    if (a->backing && addr >= a->base && addr - a->base <= a->size && n <= a->size - (addr - a->base))
      return a->backing + (addr - a->base);
  }
  return NULL;
}
static inline int is_device(uintptr_t addr) { return reserved && addr >= reserved && addr < reserved + RESERVATION; }

hipError_t hipInit(unsigned flags) { (void)flags; return OK; }
hipError_t hipGetDeviceCount(int *n) {
  const char *env = getenv("FAKE_HIP_DEVICES");
  *n = env && strcmp(env, "0") == 0 ? 0 : 1;
  return *n ? OK : NO_DEVICE;
}
hipError_t hipGetDevice(int *d) { *d = 0; return OK; }
hipError_t hipRuntimeGetVersion(int *v) {
  const char *env = getenv("FAKE_HIP_VERSION");
  *v = env ? atoi(env) : 60241133;
  return OK;
}
hipError_t hipGetDevicePropertiesR0600(void *props, int device) {
  if (device != 0) return INVALID_VALUE;
  memset(props, 0, 1472);
  strcpy((char *)props, "Fake Instinct");
  strcpy((char *)props + 1160, "gfx942:sramecc+:xnack-");
  return OK;
}
const char *hipGetErrorString(hipError_t e) {
  return e == OK ? "hipSuccess" : e == INVALID_VALUE ? "hipErrorInvalidValue" : "hipErrorOutOfMemory";
}
hipError_t hipMalloc(void **out, size_t size) {
  pthread_mutex_lock(&lock);
  reserve();
  size_t rounded = (size + 255) & ~(size_t)255;
  if (!reserved || n_allocs == MAX_ALLOCS || next_free + rounded > reserved + RESERVATION) {
    pthread_mutex_unlock(&lock);
    return OUT_OF_MEMORY;
  }
  allocs[n_allocs].base = next_free;
  allocs[n_allocs].size = size;
  allocs[n_allocs].backing = calloc(size ? size : 1, 1);
  *out = (void *)next_free;
  next_free += rounded + 256; /* a gap, so an overrun is not another allocation */
  n_allocs++;
  pthread_mutex_unlock(&lock);
  return OK;
}
hipError_t hipFree(void *p) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_allocs; i++)
    if (allocs[i].base == (uintptr_t)p && allocs[i].backing) {
      free(allocs[i].backing);
      allocs[i].backing = NULL;
      pthread_mutex_unlock(&lock);
      return OK;
    }
  pthread_mutex_unlock(&lock);
  return INVALID_VALUE;
}
#ifndef FAKE_HIP_NO_COPIES
/* HIP 6 layout and numbering: Unregistered 0, Device 2. */
struct attributes { int type; int device; void *device_pointer; void *host_pointer; int is_managed; unsigned flags; };
hipError_t hipPointerGetAttributes(struct attributes *a, const void *p) {
  pthread_mutex_lock(&lock);
  int device = is_device((uintptr_t)p) && backing((uintptr_t)p, 0);
  pthread_mutex_unlock(&lock);
  memset(a, 0, sizeof *a);
  a->type = device ? 2 : 0;
  a->device = device ? 0 : -1;
  a->device_pointer = device ? (void *)p : NULL;
  return OK;
}
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
  (void)stream;
  pthread_mutex_lock(&lock);
  hipError_t status = OK;
  if (kind == 1) { /* host to device */
    unsigned char *d = backing((uintptr_t)dst, n);
    if (!d || is_device((uintptr_t)src)) status = INVALID_VALUE; else { memcpy(d, src, n); h2d++; }
  } else if (kind == 2) { /* device to host */
    unsigned char *s = backing((uintptr_t)src, n);
    if (!s || is_device((uintptr_t)dst)) status = INVALID_VALUE; else { memcpy(dst, s, n); d2h++; }
  } else {
    status = INVALID_VALUE;
  }
  pthread_mutex_unlock(&lock);
  return status;
}
#endif
hipError_t hipMemsetAsync(void *dst, int value, size_t n, void *stream) {
  (void)stream;
  pthread_mutex_lock(&lock);
  unsigned char *d = backing((uintptr_t)dst, n);
  if (d) memset(d, value, n);
  pthread_mutex_unlock(&lock);
  return d ? OK : INVALID_VALUE;
}
hipError_t hipStreamSynchronize(void *stream) { (void)stream; __atomic_add_fetch(&syncs, 1, __ATOMIC_SEQ_CST); return OK; }

/* Test hook: copies host→device, device→host and stream synchronisations so far. */
void fake_hip_counters(long *out) {
  pthread_mutex_lock(&lock);
  out[0] = h2d; out[1] = d2h; out[2] = __atomic_load_n(&syncs, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&lock);
}
