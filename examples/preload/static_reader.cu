// A library that carries its own CUDA runtime, linked statically into it (as NCCL does), and
// queues work on a stream it creates itself. A program that loads it has two runtimes: the
// shared one the preload library interposes, and this one, whose streams no interposed call
// creates. streams.cu (mode library) reads freed memory through it.
#include <cuda_runtime.h>

#include "hazard_kernels.cuh"

extern "C" __attribute__((visibility("default"))) int static_reader_check(
    const unsigned* x, std::size_t n, unsigned pattern, unsigned long long* wrong) {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  slow_check<<<264, 256, 0, stream>>>(x, n, pattern, wrong);
  return static_cast<int>(cudaGetLastError());
}
