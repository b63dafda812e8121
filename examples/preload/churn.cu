// A CUDA program that allocates and frees on every iteration, the pattern that makes
// cudaMalloc/cudaFree a bottleneck. Built by nvcc with default flags (the CUDA runtime linked
// statically), it is the program to run under cudalloc's LD_PRELOAD:
//   ./preload_churn [ITERATIONS]
//   LD_PRELOAD=libcudalloc_preload.so ./preload_churn [ITERATIONS]
// It checks every result and prints the time per iteration.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void fill(float* x, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value + i % 7;
}

__global__ void axpy(const float* x, float* y, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t e = (call);                                                                \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));                      \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int sizes[] = {256, 4096, 65536, 1 << 20, 4 << 20};
  cudaStream_t side;
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::vector<float> host(4 << 20);
  double checksum_error = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < iterations; ++it) {
    const int n = sizes[it % 5];
    float *x = nullptr, *y = nullptr;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    const int blocks = (n + 255) / 256;
    fill<<<blocks, 256>>>(x, 1.0f, n);
    fill<<<blocks, 256, 0, side>>>(y, 2.0f, n);  // on a non-blocking stream
    CHECK(cudaStreamSynchronize(side));
    axpy<<<blocks, 256>>>(x, y, 3.0f, n);
    if (it % 100 == 0) {  // check a result now and then: y = (2 + k) + 3 (1 + k)
      CHECK(cudaMemcpy(host.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) {
        const float k = float(i % 7);
        checksum_error += std::abs(host[i] - ((2 + k) + 3 * (1 + k)));
      }
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
  }
  CHECK(cudaDeviceSynchronize());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(cudaStreamDestroy(side));
  std::printf("%d iterations, %.2f us per iteration, result error %.1f\n", iterations,
              seconds / iterations * 1e6, checksum_error);
  return checksum_error == 0 ? 0 : 1;
}
