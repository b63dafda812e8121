/* Bad input through the C API: prints one Markdown table row per case with what cudalloc
 * returned and said, for docs/reliability.md (scripts/bad_inputs.sh runs it). Meant for a
 * simulated device of 64 MiB with two devices: CUDALLOC_DEVICE=fake:64M:2.
 *
 * It reports, it does not judge: scripts/bad_inputs.sh and a person read the table. It exits
 * non-zero only if cudalloc_validate finds a broken invariant after all the bad calls. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cudalloc.h"

static void row(const char* input, cudalloc_error_t err, const void* ptr) {
  char said[200];
  snprintf(said, sizeof said, "%s", err == CUDALLOC_SUCCESS ? "" : cudalloc_last_error_string());
  for (char* c = said; *c; ++c) {
    if (*c == '|') *c = '/';
  }
  printf("| C API | %s | `%s`%s | %s |\n", input, cudalloc_error_name(err),
         ptr != NULL ? " (pointer returned)" : "", said);
}

int main(void) {
  void* p = NULL;
  void* q = NULL;
  int on_stack = 0;
  cudaStream_t s0 = NULL;

  cudalloc_error_t e = cudalloc_allocate(&p, 0, 0, s0);
  row("allocate 0 bytes", e, p);
  e = cudalloc_allocate(&p, SIZE_MAX, 0, s0);
  row("allocate SIZE_MAX bytes", e, p);
  e = cudalloc_allocate(&p, ((size_t)1 << 50) + 1, 0, s0);
  row("allocate 2^50 + 1 bytes (past the largest request)", e, p);
  e = cudalloc_allocate(&p, (size_t)128 << 20, 0, s0);
  row("allocate 128 MiB on a 64 MiB device", e, p);
  e = cudalloc_allocate(&p, 4096, 7, s0);
  row("allocate on device 7 of 2", e, p);
  e = cudalloc_allocate(&p, 4096, -5, s0);
  row("allocate on device -5", e, p);
  e = cudalloc_allocate(NULL, 4096, 0, s0);
  row("allocate with ptr == NULL", e, NULL);

  e = cudalloc_deallocate(NULL, 0);
  row("free NULL", e, NULL);
  e = cudalloc_deallocate(&on_stack, 0);
  row("free a stack address (foreign pointer)", e, NULL);
  e = cudalloc_deallocate((void*)(uintptr_t)0xdead0000, -1);
  row("free 0xdead0000, device -1 (search all)", e, NULL);

  cudalloc_allocate(&p, 4096, 0, s0);
  e = cudalloc_deallocate((char*)p + 256, 0);
  row("free an interior pointer (p + 256)", e, NULL);
  e = cudalloc_deallocate(p, 0);
  row("free p (live)", e, NULL);
  e = cudalloc_deallocate(p, 0);
  row("free p again (double free)", e, NULL);

  cudalloc_allocate(&q, 1 << 20, 1, s0);
  e = cudalloc_deallocate(q, 0);
  row("free a device-1 pointer naming device 0", e, NULL);
  e = cudalloc_deallocate(q, 7);
  row("free a device-1 pointer naming device 7", e, NULL);
  e = cudalloc_deallocate(q, -1);
  row("free it with device -1 (search all)", e, NULL);

  e = cudalloc_record_stream(&on_stack, s0);
  row("record_stream of a foreign pointer", e, NULL);
  e = cudalloc_record_stream(NULL, s0);
  row("record_stream of NULL (PyTorch, zero-element tensor)", e, NULL);
  cudalloc_torch_record_stream(NULL, s0);
  printf("| C API | cudalloc_torch_record_stream (PyTorch entry, no result) of NULL | returns | |\n");
  e = cudalloc_offload(NULL, s0);
  row("offload NULL", e, NULL);
  e = cudalloc_prefetch(NULL, s0);
  row("prefetch NULL", e, NULL);
  {
    size_t on_device = 0, on_host = 0;
    e = cudalloc_residency(NULL, &on_device, &on_host);
    row("residency of NULL", e, NULL);
  }
  e = cudalloc_empty_cache(9);
  row("empty_cache of device 9", e, NULL);
  e = cudalloc_empty_cache(-5);
  row("empty_cache of device -5", e, NULL);
  e = cudalloc_promote(-5);
  row("promote device -5", e, NULL);
  e = cudalloc_validate(-5);
  row("validate device -5", e, NULL);
  e = cudalloc_deallocate(NULL, -5);
  row("free NULL naming device -5", e, NULL);
  e = cudalloc_set_memory_fraction(0.0, 0);
  row("set_memory_fraction 0", e, NULL);
  e = cudalloc_set_memory_fraction(1.5, 0);
  row("set_memory_fraction 1.5", e, NULL);
  e = cudalloc_set_memory_fraction(NAN, 0);
  row("set_memory_fraction NaN", e, NULL);
  e = cudalloc_set_memory_limit(1, 0);
  row("set_memory_limit 1 byte", e, NULL);
  e = cudalloc_allocate(&p, 512, 0, s0);
  row("then allocate 512 bytes", e, p);
  cudalloc_set_memory_limit(0, 0);

  cudalloc_free(&on_stack, 4, 0, s0); /* returns nothing: what it says is the last error */
  printf("| C API | cudalloc_free (PyTorch entry, no result) of a foreign pointer | returns | %s |\n",
         cudalloc_last_error_string());

  const cudalloc_error_t v0 = cudalloc_validate(0);
  const cudalloc_error_t v1 = cudalloc_validate(1);
  row("validate device 0 after all of the above", v0, NULL);
  row("validate device 1 after all of the above", v1, NULL);
  return v0 == CUDALLOC_SUCCESS && v1 == CUDALLOC_SUCCESS ? 0 : 1;
}
