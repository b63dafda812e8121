// A CUDA graph with stream-ordered allocation, captured once and replayed many times, as a
// program built with nvcc's defaults does it; correct with and without
// LD_PRELOAD=libcudalloc_preload.so. Inside the capture a temporary comes from
// cudaMallocAsync and goes back with cudaFreeAsync: a graph memory node, owned by the graph.
// Buffers allocated after the capture must never see a replay's writes.
//
//   graph_capture [REPLAYS]     exit 0 when every element checked is right
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kN = 1 << 22;     // floats per buffer (16 MiB)
constexpr int kKeepers = 16;    // buffers allocated after the capture

__global__ void fill(float* p, float v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
__global__ void scale(const float* in, float* out, float k, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = in[i] * k;
  }
}
__global__ void add_one(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = in[i] + 1.0f;
  }
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "FAIL %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// How many elements of `p` (device) differ from `v`.
long long wrong(const float* p, float v, std::vector<float>& host) {
  ok(cudaMemcpy(host.data(), p, kN * sizeof(float), cudaMemcpyDeviceToHost), "copy back");
  long long n = 0;
  for (float x : host) n += x != v;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 200;
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  float *in = nullptr, *out = nullptr;
  ok(cudaMalloc(&in, kN * sizeof(float)), "cudaMalloc in");
  ok(cudaMalloc(&out, kN * sizeof(float)), "cudaMalloc out");

  cudaGraph_t graph;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture");
  float* tmp = nullptr;
  ok(cudaMallocAsync(&tmp, kN * sizeof(float), s), "cudaMallocAsync in capture");
  scale<<<256, 256, 0, s>>>(in, tmp, 2.0f, kN);
  add_one<<<256, 256, 0, s>>>(tmp, out, kN);
  ok(cudaFreeAsync(tmp, s), "cudaFreeAsync in capture");
  ok(cudaStreamEndCapture(s, &graph), "end capture");
  cudaGraphExec_t exec;
  ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  // Allocated after the capture, on the capture's stream and with cudaMalloc, each filled
  // with its index: no replay may write them. (Memory an allocator took back from the
  // capture would come back first to the same stream.)
  std::vector<float*> keepers(kKeepers);
  for (int k = 0; k < kKeepers; ++k) {
    if (k % 2 == 0) {
      ok(cudaMallocAsync(&keepers[k], kN * sizeof(float), s), "cudaMallocAsync keeper");
    } else {
      ok(cudaMalloc(&keepers[k], kN * sizeof(float)), "cudaMalloc keeper");
    }
    fill<<<256, 256, 0, s>>>(keepers[k], float(k), kN);
  }
  // Ordinary stream-ordered allocations between replays, outside any capture.
  std::vector<float> host(kN);
  long long bad = 0;
  for (int r = 0; r < replays; ++r) {
    fill<<<256, 256, 0, s>>>(in, float(r), kN);
    ok(cudaGraphLaunch(exec, s), "launch");
    float* scratch = nullptr;
    ok(cudaMallocAsync(&scratch, kN * sizeof(float), s), "cudaMallocAsync outside capture");
    fill<<<256, 256, 0, s>>>(scratch, -1.0f, kN);
    ok(cudaFreeAsync(scratch, s), "cudaFreeAsync outside capture");
    if (r % 25 == 0 || r == replays - 1) {
      ok(cudaStreamSynchronize(s), "sync");
      bad += wrong(out, 2.0f * float(r) + 1.0f, host);
    }
  }
  ok(cudaDeviceSynchronize(), "device sync");
  for (int k = 0; k < kKeepers; ++k) bad += wrong(keepers[k], float(k), host);
  ok(cudaGraphExecDestroy(exec), "exec destroy");
  ok(cudaGraphDestroy(graph), "graph destroy");
  for (int k = 0; k < kKeepers; ++k) {
    ok(k % 2 == 0 ? cudaFreeAsync(keepers[k], s) : cudaFree(keepers[k]), "free keeper");
  }
  ok(cudaStreamSynchronize(s), "sync");
  ok(cudaFree(in), "cudaFree in");
  ok(cudaFree(out), "cudaFree out");
  std::printf("%s: %d replays, %lld wrong elements\n", bad == 0 ? "PASS" : "FAIL", replays, bad);
  return bad == 0 ? 0 : 1;
}
