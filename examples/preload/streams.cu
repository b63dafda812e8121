// cudaFree's guarantee, checked word by word: memory freed while kernels on other streams
// still read it must not be handed to work that overwrites it before they are done. CUDA's
// cudaFree waits for the device; an allocator that does not must order the reuse itself,
// also for streams it never saw being created.
//
//   preload_streams MODE [ITERATIONS]
//     blocking     reader and writer on two streams from cudaStreamCreate
//     nonblocking  the same with cudaStreamNonBlocking
//     threads      four host threads, each with its own non-blocking stream
//     default      four host threads on their default stream: built with
//                  --default-stream per-thread (the *_ptds targets), the per-thread
//                  default streams, which no call creates and which do not order each other
//     driver       cuMemAlloc/cuMemFree and cuStreamCreate (the driver API), two streams
//     library      (the preload_streams_library target) the reader runs inside a library
//                  that carries its own statically linked runtime and stream, as NCCL does
//     detector     the control: the same loop over a pool that hands a freed buffer out again
//                  at once, with no ordering at all, as an unsafe allocator would. It must
//                  find changed words (exit 0 when it does): proof that the check can fail.
//
// Each iteration fills a buffer, queues a slow kernel that reads every word of it several
// times over about 100 us, frees it at once, allocates a buffer of the same size (the freed
// memory is the likely answer) and overwrites it from another stream or thread. The reader
// counts every word that changed under it; each overwritten buffer is checked word by word
// before it is freed. Exit 0 only when no word was wrong. Built with the CUDA runtime linked
// statically (nvcc's default) and dynamically (the *_shared targets).
#include <cuda.h>
#include <cuda_runtime.h>

#include "hazard_kernels.cuh"

#ifdef STREAMS_WITH_LIBRARY
// static_reader.cu: a reader on the library's own runtime and stream.
extern "C" int static_reader_check(const unsigned* x, std::size_t n, unsigned pattern,
                                   unsigned long long* wrong);
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CHECK(call)                                                                        \
  do {                                                                                     \
    const auto e = (call);                                                                 \
    if (e != 0) {                                                                          \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, int(e));  \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// The library mode's reader: the library's own runtime on its own stream.
bool g_library_reader = false;

enum class Api { runtime, driver, unsafe_pool };

// The detector's pool: one buffer of the largest size, handed out again as soon as it is
// freed (nothing orders the reuse after the work that still reads it).
void* g_unsafe_buffer = nullptr;

void* allocate(Api api, std::size_t bytes) {
  if (api == Api::unsafe_pool) return g_unsafe_buffer;
  if (api == Api::driver) {
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc(&p, bytes));
    return reinterpret_cast<void*>(p);
  }
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  return p;
}

void release(Api api, void* p) {
  if (api == Api::unsafe_pool) return;
  if (api == Api::driver) {
    CHECK(cuMemFree(reinterpret_cast<CUdeviceptr>(p)));
  } else {
    CHECK(cudaFree(p));
  }
}

struct Counters {
  unsigned long long* device = nullptr;  // [0] words changed under a reader, [1] wrong later
};

struct Live {
  unsigned* ptr;
  std::size_t n;
  unsigned pattern;
};

// One worker's loop: reads on `reader`, overwrites reused memory on `writer`.
void hazard_loop(Api api, cudaStream_t reader, cudaStream_t writer, int iterations, int seed,
                 const Counters& counters) {
  const std::size_t sizes_mib[] = {1, 4, 2, 8, 16, 3};
  constexpr int kGrid = 264, kBlock = 256;
  std::vector<Live> live;  // overwritten buffers, checked when they are freed
  for (int it = 0; it < iterations; ++it) {
    const std::size_t n = sizes_mib[(it + seed) % 6] * (1u << 20) / sizeof(unsigned);
    const unsigned read_pattern = 0x5eed0000u + unsigned(seed * 100000 + it);
    auto* a = static_cast<unsigned*>(allocate(api, n * sizeof(unsigned)));
    fill<<<kGrid, kBlock, 0, reader>>>(a, n, read_pattern);
    if (g_library_reader) {
#ifdef STREAMS_WITH_LIBRARY
      CHECK(cudaStreamSynchronize(reader));  // the library's stream does not wait for ours
      CHECK(static_reader_check(a, n, read_pattern, counters.device));
#endif
    } else {
      slow_check<<<kGrid, kBlock, 0, reader>>>(a, n, read_pattern, counters.device);
    }
    release(api, a);  // the reader still runs
    auto* b = static_cast<unsigned*>(allocate(api, n * sizeof(unsigned)));
    const unsigned write_pattern = ~read_pattern;
    fill<<<kGrid, kBlock, 0, writer>>>(b, n, write_pattern);
    live.push_back(Live{b, n, write_pattern});
    if (api == Api::unsafe_pool) continue;  // a and b are one buffer: only the reader counts
    if (live.size() > 3) {
      const Live old = live.front();
      live.erase(live.begin());
      count_wrong<<<kGrid, kBlock, 0, writer>>>(old.ptr, old.n, old.pattern, counters.device + 1);
      release(api, old.ptr);
    }
    CHECK(cudaGetLastError());
  }
  if (api == Api::unsafe_pool) return;
  for (const Live& l : live) {
    count_wrong<<<kGrid, kBlock, 0, writer>>>(l.ptr, l.n, l.pattern, counters.device + 1);
    release(api, l.ptr);
  }
}

cudaStream_t make_stream(Api api, bool non_blocking) {
  if (api == Api::driver) {
    CUstream s = nullptr;
    CHECK(cuStreamCreate(&s, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT));
    return reinterpret_cast<cudaStream_t>(s);
  }
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
  return s;
}

void run_threads(int iterations, bool own_streams, const Counters& counters) {
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([=, &counters] {
      // Stream 0 is the thread's per-thread default stream in a --default-stream per-thread
      // build, the legacy default stream otherwise.
      cudaStream_t s = own_streams ? make_stream(Api::runtime, true) : nullptr;
      hazard_loop(Api::runtime, s, s, iterations, t, counters);
      CHECK(cudaStreamSynchronize(s));
      if (own_streams) CHECK(cudaStreamDestroy(s));
    });
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "nonblocking";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 300;
  CHECK(cudaFree(nullptr));  // creates the context (the driver API below needs it current)
  Counters counters;
  CHECK(cudaMalloc(&counters.device, 2 * sizeof(unsigned long long)));
  CHECK(cudaMemset(counters.device, 0, 2 * sizeof(unsigned long long)));
  CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  if (mode == "blocking" || mode == "nonblocking" || mode == "driver") {
    const Api api = mode == "driver" ? Api::driver : Api::runtime;
    const bool non_blocking = mode != "blocking";
    cudaStream_t reader = make_stream(api, non_blocking), writer = make_stream(api, non_blocking);
    hazard_loop(api, reader, writer, iterations, 0, counters);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(reader));
    CHECK(cudaStreamDestroy(writer));
  } else if (mode == "threads" || mode == "default") {
    run_threads(iterations, mode == "threads", counters);
  } else if (mode == "library") {
#ifdef STREAMS_WITH_LIBRARY
    g_library_reader = true;
    cudaStream_t writer = make_stream(Api::runtime, true);
    hazard_loop(Api::runtime, nullptr, writer, iterations, 0, counters);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(writer));
#else
    std::fprintf(stderr, "mode library needs the preload_streams_library build\n");
    return 2;
#endif
  } else if (mode == "detector") {
    CHECK(cudaMalloc(&g_unsafe_buffer, std::size_t{16} << 20));
    cudaStream_t reader = make_stream(Api::runtime, true), writer = make_stream(Api::runtime, true);
    hazard_loop(Api::unsafe_pool, reader, writer, iterations, 0, counters);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(g_unsafe_buffer));
  } else {
    std::fprintf(stderr,
                 "unknown mode %s (blocking, nonblocking, threads, default, driver, detector)\n",
                 mode.c_str());
    return 2;
  }
  CHECK(cudaDeviceSynchronize());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  unsigned long long wrong[2] = {};
  CHECK(cudaMemcpy(wrong, counters.device, sizeof wrong, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(counters.device));
  std::printf("%s: %d iterations per worker, %llu words changed under a reader, %llu words "
              "wrong in overwritten buffers, %.1f us per iteration\n",
              mode.c_str(), iterations, wrong[0], wrong[1], ms * 1000.0 / iterations);
  if (mode == "detector") return wrong[0] != 0 ? 0 : 1;  // the check must have caught it
  return wrong[0] == 0 && wrong[1] == 0 ? 0 : 1;
}
