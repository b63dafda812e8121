/* A training-loop-shaped allocation pattern through cudalloc's C API: per step, activations
 * of a few shapes are allocated on the compute stream and freed in reverse order, gradients on
 * a second stream are recorded for the compute stream, and a few small buffers churn.
 * Prints the stats at the end. Runs on a GPU, or on the simulated device with
 * CUDALLOC_DEVICE=fake. Usage: training_loop [STEPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cudalloc.h"

#define LAYERS 12
#define CHECK(call)                                                                   \
  do {                                                                                \
    cudalloc_error_t err_ = (call);                                                   \
    if (err_ != CUDALLOC_SUCCESS) {                                                   \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, cudalloc_error_name(err_),       \
              cudalloc_last_error_string());                                          \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int64_t stat_value(const cudalloc_stats_t* s, const char* name, int peak) {
  for (int i = 0; i < s->count; ++i) {
    const char* n = cudalloc_stat_name(i);
    int same = 1;
    for (int k = 0; n[k] || name[k]; ++k) {
      if (n[k] != name[k]) { same = 0; break; }
    }
    if (same) return peak ? s->values[i].peak : s->values[i].current;
  }
  return -1;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 200;
  cudaStream_t compute = (cudaStream_t)0;
  /* The per-thread default stream (cudaStreamPerThread), valid without creating a stream. */
  cudaStream_t comm = (cudaStream_t)(uintptr_t)0x2;
  if (cudalloc_device_count() < 1) {
    fprintf(stderr, "no device: %s\n", cudalloc_last_error_string());
    return 77;
  }
  void* weights[LAYERS];
  for (int l = 0; l < LAYERS; ++l) CHECK(cudalloc_allocate(&weights[l], (size_t)9 << 20, 0, compute));
  long ops = 0;
  const double start = now_ns();
  for (int step = 0; step < steps; ++step) {
    void* acts[LAYERS];
    void* small[64];
    const size_t seq = (size_t)(128 + (step * 37) % 896); /* a varying sequence length */
    for (int l = 0; l < LAYERS; ++l) {
      CHECK(cudalloc_allocate(&acts[l], seq * 768 * 4 * 4, 0, compute));
      ++ops;
    }
    for (int i = 0; i < 64; ++i) {
      CHECK(cudalloc_allocate(&small[i], 512 + (size_t)i * 96, 0, compute));
      ++ops;
    }
    for (int i = 63; i >= 0; --i) CHECK(cudalloc_deallocate(small[i], 0));
    for (int l = LAYERS - 1; l >= 0; --l) {
      void* grad;
      CHECK(cudalloc_allocate(&grad, seq * 768 * 4, 0, comm));
      CHECK(cudalloc_record_stream(grad, compute));
      CHECK(cudalloc_deallocate(grad, 0));
      CHECK(cudalloc_deallocate(acts[l], 0));
      ops += 2;
    }
  }
  const double elapsed = now_ns() - start;
  for (int l = 0; l < LAYERS; ++l) CHECK(cudalloc_deallocate(weights[l], 0));
  CHECK(cudalloc_validate(-1));

  cudalloc_stats_t s;
  CHECK(cudalloc_get_stats(0, &s));
  printf("cudalloc %s: %d steps, %ld allocations, %.1f ns per allocate+free pair\n",
         cudalloc_version_string(), steps, ops, elapsed / (double)ops);
  printf("%-18s %16s %16s %16s\n", "stat", "current", "peak", "total");
  for (int i = 0; i < s.count; ++i) {
    printf("%-18s %16lld %16lld %16lld\n", cudalloc_stat_name(i), (long long)s.values[i].current,
           (long long)s.values[i].peak, (long long)s.values[i].total);
  }
  const int64_t peak_alloc = stat_value(&s, "allocated_bytes", 1);
  const int64_t peak_reserved = stat_value(&s, "reserved_bytes", 1);
  printf("peak reserved / peak allocated = %.3f\n", (double)peak_reserved / (double)peak_alloc);
  CHECK(cudalloc_empty_cache(-1));
  CHECK(cudalloc_get_stats(0, &s));
  printf("after empty_cache: reserved %lld bytes\n", (long long)stat_value(&s, "reserved_bytes", 0));
  return 0;
}
