// The kernels of the GPU checks (streams.cu, static_reader.cu, ipc.cu): a fill, a slow reader
// that counts every word changed under it, and a final count of wrong words.
#pragma once

#include <cstddef>

constexpr int kReadRounds = 5;  // each after a sleep of 20 us: the window a reuse would hit

__device__ inline unsigned word(std::size_t i, unsigned pattern) { return pattern ^ unsigned(i * 2654435761u); }

static __global__ void fill(unsigned* x, std::size_t n, unsigned pattern) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    x[i] = word(i, pattern);
  }
}

// Counts the words of x that are not the pattern, reading all of them kReadRounds times.
static __global__ void slow_check(const unsigned* x, std::size_t n, unsigned pattern,
                           unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (int round = 0; round < kReadRounds; ++round) {
    __nanosleep(20000);
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
      bad += x[i] != word(i, pattern);
    }
  }
  if (bad != 0) atomicAdd(wrong, bad);
}

static __global__ void count_wrong(const unsigned* x, std::size_t n, unsigned pattern,
                            unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    bad += x[i] != word(i, pattern);
  }
  if (bad != 0) atomicAdd(wrong, bad);
}

