/* The cheapest allocator PyTorch's CUDAPluggableAllocator can call: it keeps the last freed
 * pointer of each of a few sizes and otherwise calls the CUDA runtime that PyTorch already
 * loaded. Timing torch.empty + del through it measures the cost of PyTorch's pluggable
 * wrapper itself, the floor under any pluggable allocator. A benchmark aid, not for use. */
#include <dlfcn.h>
#include <stddef.h>

typedef int (*malloc_fn)(void**, size_t);
typedef int (*free_fn)(void*);

#define SLOTS 8
static size_t slot_size[SLOTS];
static void* slot_ptr[SLOTS];

static malloc_fn runtime_malloc(void) {
  static malloc_fn fn;
  if (!fn) fn = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
  return fn;
}

__attribute__((visibility("default"))) void* floor_malloc(size_t size, int device, void* stream) {
  (void)device;
  (void)stream;
  for (int i = 0; i < SLOTS; ++i) {
    if (slot_ptr[i] && slot_size[i] == size) {
      void* p = slot_ptr[i];
      slot_ptr[i] = NULL;
      return p;
    }
  }
  void* p = NULL;
  malloc_fn fn = runtime_malloc();
  return fn && fn(&p, size) == 0 ? p : NULL;
}

__attribute__((visibility("default"))) void floor_free(void* ptr, size_t size, int device,
                                                       void* stream) {
  (void)device;
  (void)stream;
  for (int i = 0; i < SLOTS; ++i) {
    if (!slot_ptr[i]) {
      slot_ptr[i] = ptr;
      slot_size[i] = size;
      return;
    }
  }
  free_fn fn = (free_fn)dlsym(RTLD_DEFAULT, "cudaFree");
  if (fn) fn(ptr);
}
