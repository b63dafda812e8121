// A plain CUDA program whose working set is bigger than the device memory it is given. With
// cudalloc's host tier it runs on: what does not fit the device budget is served from host
// memory mapped into the device's address space.
//   ./offload_oversubscribe [BUFFERS [MIB]]                  (default 24 buffers of 128 MiB)
//   LD_PRELOAD=libcudalloc_preload.so CUDALLOC_CONF=limit:1G,offload:host
//     ./offload_oversubscribe 24 128                          (3 GiB on a 1 GiB budget)
// It allocates every buffer with cudaMalloc, fills each with a pattern derived from (buffer,
// element), then one kernel reads every element of every buffer, counts mismatches, sums the
// values and writes a transformed value back; the host copies every buffer back and checks
// every element, and the device's counts and sums. Exit status: 0 all correct, 1 a mismatch,
// 2 a CUDA error, 64 bad arguments. Built by nvcc with the CUDA runtime linked statically,
// like examples/preload/churn.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,             \
                   cudaGetErrorName(e), cudaGetErrorString(e));                            \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// Element i of buffer b: a bijection of i for each b (murmur3's finaliser), so a page that
// lands at the wrong address, or in the wrong buffer, does not match.
__host__ __device__ inline uint32_t pattern(uint32_t b, uint64_t i) {
  uint32_t h = static_cast<uint32_t>(i) ^ (static_cast<uint32_t>(i >> 32) * 0x27d4eb2fu) ^
               ((b + 1u) * 0x9e3779b9u);
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// What the verify kernel writes back in place of `value`.
__host__ __device__ inline uint32_t transform(uint32_t value, uint32_t b) {
  return (value ^ 0xa5a5a5a5u) + b;
}

__global__ void fill(uint32_t* buffer, uint64_t n, uint32_t b) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    buffer[i] = pattern(b, i);
  }
}

__device__ inline unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Block row y handles buffer y: counts elements that differ from the pattern, sums the values
// read, and writes transform(value) back.
__global__ void verify(uint32_t* const* buffers, uint64_t n, unsigned long long* mismatches,
                       unsigned long long* sums) {
  const uint32_t b = blockIdx.y;
  uint32_t* buffer = buffers[b];
  unsigned long long bad = 0, sum = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint32_t v = buffer[i];
    bad += v != pattern(b, i);
    sum += v;
    buffer[i] = transform(v, b);
  }
  bad = warp_sum(bad);
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0) {
    if (bad) atomicAdd(&mismatches[b], bad);
    atomicAdd(&sums[b], sum);
  }
}

static double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int main(int argc, char** argv) {
  const long buffers_arg = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 24;
  const long mib_arg = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 128;
  if (argc > 3 || buffers_arg < 1 || buffers_arg > 65535 || mib_arg < 1 || mib_arg > (1L << 20)) {
    std::fprintf(stderr, "usage: %s [BUFFERS (1-65535, default 24) [MIB per buffer, default 128]]\n",
                 argv[0]);
    return 64;
  }
  const int count = static_cast<int>(buffers_arg);
  const size_t bytes = static_cast<size_t>(mib_arg) << 20;
  const uint64_t n = bytes / sizeof(uint32_t);
  const double total_gib = double(bytes) * count / double(1ull << 30);

  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("device %d: %s, cudaMemGetInfo free %.2f GiB of %.2f GiB\n", device, prop.name,
              free_bytes / double(1ull << 30), total_bytes / double(1ull << 30));
  std::printf("working set: %d buffers of %ld MiB = %.2f GiB\n", count, mib_arg, total_gib);

  auto start = std::chrono::steady_clock::now();
  std::vector<uint32_t*> buffers(count, nullptr);
  for (int b = 0; b < count; ++b) {
    CHECK(cudaMalloc(&buffers[b], bytes));
  }
  uint32_t** table = nullptr;
  unsigned long long* results = nullptr;  // mismatches[count], then sums[count]
  CHECK(cudaMalloc(&table, count * sizeof(uint32_t*)));
  CHECK(cudaMalloc(&results, 2 * count * sizeof(unsigned long long)));
  CHECK(cudaMemcpy(table, buffers.data(), count * sizeof(uint32_t*), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(results, 0, 2 * count * sizeof(unsigned long long)));
  std::printf("allocated in %.3f s\n", seconds_since(start));

  const int threads = 256;
  const unsigned blocks =
      static_cast<unsigned>(std::min<uint64_t>((n + threads - 1) / threads, 1024));
  start = std::chrono::steady_clock::now();
  for (int b = 0; b < count; ++b) {
    fill<<<blocks, threads>>>(buffers[b], n, static_cast<uint32_t>(b));
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  const double fill_s = seconds_since(start);

  start = std::chrono::steady_clock::now();
  verify<<<dim3(blocks, static_cast<unsigned>(count)), threads>>>(table, n, results,
                                                                  results + count);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  const double verify_s = seconds_since(start);
  std::printf("fill %.3f s (%.1f GB/s), read+check+write %.3f s (%.1f GB/s)\n", fill_s,
              double(bytes) * count / fill_s / 1e9, verify_s,
              2.0 * double(bytes) * count / verify_s / 1e9);

  std::vector<unsigned long long> device_results(2 * count);
  CHECK(cudaMemcpy(device_results.data(), results, device_results.size() * sizeof(unsigned long long),
                   cudaMemcpyDeviceToHost));

  // Every element on the host, and the device's counts and sums against the host's.
  start = std::chrono::steady_clock::now();
  std::vector<uint32_t> host(n);
  unsigned long long host_mismatches = 0, device_mismatches = 0;
  int bad_sums = 0;
  for (int b = 0; b < count; ++b) {
    CHECK(cudaMemcpy(host.data(), buffers[b], bytes, cudaMemcpyDeviceToHost));
    const uint32_t ub = static_cast<uint32_t>(b);
    unsigned long long expected_sum = 0, bad = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t p = pattern(ub, i);
      expected_sum += p;
      bad += host[i] != transform(p, ub);
    }
    host_mismatches += bad;
    device_mismatches += device_results[b];
    const bool sum_ok = device_results[count + b] == expected_sum;
    bad_sums += !sum_ok;
    if (bad || device_results[b] || !sum_ok) {
      std::printf("buffer %d: %llu host mismatches, %llu device mismatches, sum %s\n", b, bad,
                  device_results[b], sum_ok ? "ok" : "WRONG");
    }
  }
  std::printf("copied back and checked on the host in %.3f s\n", seconds_since(start));

  for (uint32_t* p : buffers) CHECK(cudaFree(p));
  CHECK(cudaFree(table));
  CHECK(cudaFree(results));
  CHECK(cudaDeviceSynchronize());

  const unsigned long long elements = n * static_cast<unsigned long long>(count);
  std::printf("%llu elements in %d buffers (%.2f GiB): %llu host mismatches, %llu device "
              "mismatches, %d wrong sums\n",
              elements, count, total_gib, host_mismatches, device_mismatches, bad_sums);
  const bool ok = host_mismatches == 0 && device_mismatches == 0 && bad_sums == 0;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
