/* A C program built against an installed cudalloc (CMake package or pkg-config): allocates,
 * writes and frees through the C API. Runs on the simulated device with CUDALLOC_DEVICE=fake. */
#include <cudalloc/cudalloc.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  printf("cudalloc %s (C API %d)\n", cudalloc_version_string(), cudalloc_version());
#ifdef CUDALLOC_PRELOAD_PATH
  printf("preload library: %s\n", CUDALLOC_PRELOAD_PATH);
#endif
  if (cudalloc_version() / 100 != CUDALLOC_VERSION_MAJOR * 100 + CUDALLOC_VERSION_MINOR) {
    fprintf(stderr, "header and library versions differ\n");
    return 1;
  }
  void* p = NULL;
  cudalloc_error_t e = cudalloc_allocate(&p, 1 << 20, -1, NULL);
  if (e != CUDALLOC_SUCCESS) {
    fprintf(stderr, "allocate: %s: %s\n", cudalloc_error_name(e), cudalloc_last_error_string());
    return 1;
  }
  memset(p, 0x5a, 1 << 20); /* host-addressable on the simulated device only */
  e = cudalloc_deallocate(p, -1);
  if (e != CUDALLOC_SUCCESS || cudalloc_validate(-1) != CUDALLOC_SUCCESS) return 1;
  printf("allocated, wrote and freed 1 MiB: ok\n");
  return 0;
}
