// cudalloc on a real GPU: patterns written by kernels on four streams, frees while those
// kernels are still queued, re-allocation on other streams, record_stream, stats and
// empty_cache. Every live buffer is checked byte-exact: a position-weighted checksum computed
// on the GPU with CUB is compared with the same checksum computed on the host.
//
// Exit status: 0 all checks passed, 1 a check failed, 77 no GPU (CTest SKIP_RETURN_CODE).
#include <cuda_runtime.h>

#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <vector>

#include "cudalloc.h"

namespace {

constexpr int kStreams = 4;
constexpr std::size_t kMaxSize = std::size_t{64} << 20;
constexpr int kMaxSlots = 4096;  // checksum result slots
constexpr std::uint64_t kWeightModulus = 65521;

int g_failures = 0;

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      ++g_failures;                                                       \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
      std::printf(__VA_ARGS__);                                           \
      std::printf("\n");                                                  \
    }                                                                     \
  } while (0)

// Aborts the test (exit 1) on a CUDA runtime failure: later checks would be meaningless.
#define CUDA_OK(call)                                                                 \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      std::printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                  \
                  cudaGetErrorString(err_));                                          \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// ---- Patterns and checksums (identical on host and device) -------------------------------

__host__ __device__ inline std::uint32_t mix32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

// Word j of the pattern `seed`; byte i of a buffer is byte (i % 4) of word i / 4.
__host__ __device__ inline std::uint32_t pattern_word(std::uint64_t seed, std::uint64_t j) {
  return mix32(seed * 0x9E3779B97F4A7C15ULL + j);
}

__host__ __device__ inline std::uint64_t weight(std::uint64_t i) {
  return 1 + i % kWeightModulus;
}

__global__ void fill_kernel(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  std::size_t words = (n + 3) / 4;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < words;
       j += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t w = pattern_word(seed, j);
    if (4 * j + 4 <= n) {
      *reinterpret_cast<std::uint32_t*>(p + 4 * j) = w;  // p is 256-aligned; little endian
    } else {
      for (std::size_t i = 4 * j; i < n; ++i) p[i] = static_cast<std::uint8_t>(w >> (8 * (i & 3)));
    }
  }
}

__device__ inline std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds a stream for `ns` nanoseconds so that work queued behind it stays queued.
__global__ void sleep_kernel(std::uint64_t ns) {
  std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) __nanosleep(10000);
}

struct WeightedByte {
  const std::uint8_t* data;
  __device__ std::uint64_t operator()(std::uint64_t i) const { return data[i] * weight(i); }
};

std::uint64_t host_checksum(std::uint64_t seed, std::size_t n) {
  std::uint64_t sum = 0;
  std::uint64_t w = 1;
  for (std::size_t j = 0; 4 * j < n; ++j) {
    std::uint32_t word = pattern_word(seed, j);
    for (std::size_t i = 4 * j; i < n && i < 4 * j + 4; ++i) {
      sum += ((word >> (8 * (i & 3))) & 0xff) * w;
      if (++w > kWeightModulus) w = 1;
    }
  }
  return sum;
}

void launch_fill(void* p, std::size_t n, std::uint64_t seed, cudaStream_t s) {
  std::size_t words = (n + 3) / 4;
  unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((words + 255) / 256, 2048));
  fill_kernel<<<blocks, 256, 0, s>>>(static_cast<std::uint8_t*>(p), n, seed);
  CUDA_OK(cudaGetLastError());
}

// One CUB temporary buffer per stream, so reductions on different streams never share one.
struct Checksummer {
  void* temp[kStreams] = {};
  std::size_t temp_bytes = 0;
  std::uint64_t* results = nullptr;  // kMaxSlots device slots

  void init() {
    CUDA_OK(cub::DeviceReduce::TransformReduce(
        nullptr, temp_bytes, thrust::counting_iterator<std::uint64_t>(0), results,
        static_cast<std::uint64_t>(kMaxSize), cuda::std::plus<std::uint64_t>{},
        WeightedByte{nullptr}, std::uint64_t{0}));
    for (void*& t : temp) CUDA_OK(cudaMalloc(&t, temp_bytes));
    CUDA_OK(cudaMalloc(&results, kMaxSlots * sizeof(std::uint64_t)));
  }
  // Queues the checksum of `n` bytes at `p` into slot `slot` on stream `si`.
  void launch(const void* p, std::size_t n, int slot, int si, cudaStream_t s) {
    std::size_t bytes = temp_bytes;
    CUDA_OK(cub::DeviceReduce::TransformReduce(
        temp[si], bytes, thrust::counting_iterator<std::uint64_t>(0), results + slot,
        static_cast<std::uint64_t>(n), cuda::std::plus<std::uint64_t>{},
        WeightedByte{static_cast<const std::uint8_t*>(p)}, std::uint64_t{0}, s));
  }
  std::vector<std::uint64_t> fetch(int count) {
    std::vector<std::uint64_t> out(count);
    CUDA_OK(cudaMemcpy(out.data(), results, count * sizeof(std::uint64_t),
                       cudaMemcpyDeviceToHost));
    return out;
  }
};

struct Buffer {
  void* ptr;
  std::size_t size;
  int stream;
  std::uint64_t seed;
};

// The test's view of what is live: buffers plus an interval map to detect overlaps.
struct LiveSet {
  std::vector<Buffer> buffers;
  std::map<std::uintptr_t, std::size_t> intervals;

  void add(const Buffer& b) {
    auto start = reinterpret_cast<std::uintptr_t>(b.ptr);
    CHECK(start % 256 == 0, "pointer %p of size %zu is not 256-byte aligned", b.ptr, b.size);
    auto next = intervals.lower_bound(start);
    if (next != intervals.end())
      CHECK(start + b.size <= next->first, "[%p, +%zu) overlaps a live block at 0x%" PRIxPTR,
            b.ptr, b.size, next->first);
    if (next != intervals.begin()) {
      auto prev = std::prev(next);
      CHECK(prev->first + prev->second <= start,
            "[%p, +%zu) overlaps the live block [0x%" PRIxPTR ", +%zu)", b.ptr, b.size,
            prev->first, prev->second);
    }
    intervals[start] = b.size;
    buffers.push_back(b);
  }
  Buffer remove(std::size_t index) {
    Buffer b = buffers[index];
    buffers[index] = buffers.back();
    buffers.pop_back();
    intervals.erase(reinterpret_cast<std::uintptr_t>(b.ptr));
    return b;
  }
  std::size_t bytes() const {
    std::size_t sum = 0;
    for (const Buffer& b : buffers) sum += b.size;
    return sum;
  }
};

struct Context {
  cudaStream_t streams[kStreams] = {};
  Checksummer sums;
  LiveSet live;
  std::mt19937_64 rng{20240607};
  std::uint64_t next_seed = 1;
};

std::size_t random_size(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> log_size(0.0, std::log(static_cast<double>(kMaxSize)));
  auto n = static_cast<std::size_t>(std::exp(log_size(rng)));
  return std::min(std::max<std::size_t>(n, 1), kMaxSize);
}

// Allocates `size` bytes on stream `si` through cudalloc and queues a fresh pattern into them.
bool allocate_and_fill(Context& c, std::size_t size, int si) {
  void* p = nullptr;
  cudalloc_error_t err = cudalloc_allocate(&p, size, 0, c.streams[si]);
  CHECK(err == CUDALLOC_SUCCESS && p != nullptr, "cudalloc_allocate(%zu) failed: %d %s", size,
        static_cast<int>(err), cudalloc_last_error_string());
  if (err != CUDALLOC_SUCCESS || p == nullptr) return false;
  Buffer b{p, size, si, c.next_seed++};
  c.live.add(b);
  launch_fill(p, size, b.seed, c.streams[si]);
  return true;
}

void free_buffer(Context& c, std::size_t index) {
  Buffer b = c.live.remove(index);
  cudalloc_error_t err = cudalloc_deallocate(b.ptr, 0);
  CHECK(err == CUDALLOC_SUCCESS, "cudalloc_deallocate(%p) failed: %d %s", b.ptr,
        static_cast<int>(err), cudalloc_last_error_string());
}

// Waits for all work, then checks every live buffer against its pattern.
void verify_live(Context& c, const char* phase) {
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<Buffer>& bufs = c.live.buffers;
  CHECK(static_cast<int>(bufs.size()) <= kMaxSlots, "too many live buffers: %zu", bufs.size());
  int n = static_cast<int>(std::min<std::size_t>(bufs.size(), kMaxSlots));
  for (int i = 0; i < n; ++i)
    c.sums.launch(bufs[i].ptr, bufs[i].size, i, bufs[i].stream, c.streams[bufs[i].stream]);
  std::vector<std::uint64_t> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = host_checksum(bufs[i].seed, bufs[i].size);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<std::uint64_t> got = c.sums.fetch(n);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (got[i] == expected[i]) continue;
    if (++bad <= 10)
      std::printf("  buffer %p size %zu stream %d seed %" PRIu64 ": checksum %" PRIu64
                  " expected %" PRIu64 "\n",
                  bufs[i].ptr, bufs[i].size, bufs[i].stream, bufs[i].seed, got[i], expected[i]);
  }
  CHECK(bad == 0, "%s: %d of %d live buffers hold wrong bytes", phase, bad, n);
  std::printf("%s: verified %d live buffers, %.1f MiB\n", phase, n,
              static_cast<double>(c.live.bytes()) / (1 << 20));
}

int stat_index(const char* name) {
  for (int i = 0; i < cudalloc_stat_count(); ++i)
    if (std::strcmp(cudalloc_stat_name(i), name) == 0) return i;
  return -1;
}

std::int64_t stat_current(const char* name) {
  cudalloc_stats_t stats{};
  cudalloc_error_t err = cudalloc_get_stats(0, &stats);
  int i = stat_index(name);
  CHECK(err == CUDALLOC_SUCCESS && i >= 0 && i < stats.count, "stat %s unavailable (err %d)",
        name, static_cast<int>(err));
  return (err == CUDALLOC_SUCCESS && i >= 0 && i < stats.count) ? stats.values[i].current : -1;
}

void check_validate(const char* phase) {
  cudalloc_error_t err = cudalloc_validate(0);
  CHECK(err == CUDALLOC_SUCCESS, "%s: cudalloc_validate: %s", phase,
        cudalloc_last_error_string());
}

// Phase 1: many buffers on all streams, queued behind sleeping kernels.
void phase_fill(Context& c, int count) {
  const std::uint64_t sleep_ns[kStreams] = {400'000'000, 150'000'000, 30'000'000, 0};
  for (int s = 0; s < kStreams; ++s) sleep_kernel<<<1, 1, 0, c.streams[s]>>>(sleep_ns[s]);
  std::uniform_int_distribution<int> stream(0, kStreams - 1);
  for (int i = 0; i < count; ++i) allocate_and_fill(c, random_size(c.rng), stream(c.rng));
}

// Phase 2: free most buffers of the slow streams 0 and 1 while their fills are still queued,
// then allocate on the fast streams 2 and 3 (and some on 0) and write new patterns. If freed
// memory were handed to another stream too early, the late fills would overwrite the new
// patterns.
void phase_churn(Context& c, int count) {
  bool queued = cudaStreamQuery(c.streams[0]) == cudaErrorNotReady;
  (void)cudaGetLastError();  // not-ready is not an error; keep launch checks clean
  std::bernoulli_distribution pick(0.6);
  int freed = 0;
  for (std::size_t i = c.live.buffers.size(); i-- > 0;) {
    int s = c.live.buffers[i].stream;
    if ((s <= 1 && pick(c.rng)) || (s >= 2 && pick(c.rng) && pick(c.rng))) {
      free_buffer(c, i);
      ++freed;
    }
  }
  std::discrete_distribution<int> stream({1, 0, 3, 3});
  for (int i = 0; i < count; ++i) allocate_and_fill(c, random_size(c.rng), stream(c.rng));
  bool still_queued = cudaStreamQuery(c.streams[0]) == cudaErrorNotReady;
  (void)cudaGetLastError();
  std::printf("churn: freed %d, allocated %d; stream 0 busy at first free: %s, after: %s\n",
              freed, count, queued ? "yes" : "no", still_queued ? "yes" : "no");
  if (!still_queued) std::printf("note: fills finished early; the race window was smaller\n");
}

void check_stats(Context& c) {
  auto requested = static_cast<std::int64_t>(c.live.bytes());
  std::int64_t req = stat_current("requested_bytes");
  std::int64_t alloc = stat_current("allocated_bytes");
  std::int64_t count = stat_current("allocated_count");
  std::printf("stats: requested %" PRId64 " allocated %" PRId64 " count %" PRId64
              " (live by test: %" PRId64 " bytes, %zu buffers)\n",
              req, alloc, count, requested, c.live.buffers.size());
  std::printf("pages: mapped %" PRId64 " bytes, %" PRId64 " maps, %" PRId64 " unmaps, %" PRId64
              " host waits\n",
              stat_current("mapped_bytes"), stat_current("page_maps"),
              stat_current("page_unmaps"), stat_current("page_waits"));
  CHECK(req == requested, "requested_bytes %" PRId64 " != %" PRId64, req, requested);
  CHECK(alloc >= requested, "allocated_bytes %" PRId64 " < requested %" PRId64, alloc,
        requested);
  CHECK(count == static_cast<std::int64_t>(c.live.buffers.size()),
        "allocated_count %" PRId64 " != %zu", count, c.live.buffers.size());
}

// Memory used by stream 1 and declared with record_stream must not be reused by stream 0
// before that use has finished, even though it was freed (in stream 0's order) earlier.
void check_record_stream(Context& c) {
  const std::size_t n = std::size_t{8} << 20;
  cudaStream_t s0 = c.streams[0], s1 = c.streams[1];
  void* p = nullptr;
  CHECK(cudalloc_allocate(&p, n, 0, s0) == CUDALLOC_SUCCESS, "allocate: %s",
        cudalloc_last_error_string());
  if (p == nullptr) return;
  const std::uint64_t seed_a = 0xA11CE, seed_b = 0xB0B;
  launch_fill(p, n, seed_a, s0);
  cudaEvent_t filled;
  CUDA_OK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  CUDA_OK(cudaEventRecord(filled, s0));
  CUDA_OK(cudaStreamWaitEvent(s1, filled, 0));
  sleep_kernel<<<1, 1, 0, s1>>>(200'000'000);
  c.sums.launch(p, n, 0, 1, s1);  // the use on s1: reads p after the sleep
  CHECK(cudalloc_record_stream(p, s1) == CUDALLOC_SUCCESS, "record_stream: %s",
        cudalloc_last_error_string());
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS, "deallocate: %s",
        cudalloc_last_error_string());
  void* q = nullptr;
  CHECK(cudalloc_allocate(&q, n, 0, s0) == CUDALLOC_SUCCESS, "re-allocate: %s",
        cudalloc_last_error_string());
  if (q != nullptr) {
    launch_fill(q, n, seed_b, s0);
    c.sums.launch(q, n, 1, 0, s0);
  }
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<std::uint64_t> got = c.sums.fetch(2);
  CHECK(got[0] == host_checksum(seed_a, n), "stream 1 saw its buffer overwritten (q %s p)",
        q == p ? "==" : "!=");
  if (q != nullptr) {
    CHECK(got[1] == host_checksum(seed_b, n), "re-allocated buffer holds wrong bytes");
    CHECK(cudalloc_deallocate(q, 0) == CUDALLOC_SUCCESS, "deallocate q");
  }
  CUDA_OK(cudaEventDestroy(filled));
  std::printf("record_stream: checked (re-allocation %s the recorded block)\n",
              q == p ? "reused" : "did not reuse");
}

void check_foreign_pointer(Context& c) {
  void* foreign = c.sums.results;  // cudaMalloc'd by the test, never by cudalloc
  CHECK(cudalloc_deallocate(foreign, 0) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER,
        "freeing a foreign pointer must fail with INVALID_DEVICE_POINTER");
}

void check_empty_cache(Context& c) {
  while (!c.live.buffers.empty()) free_buffer(c, c.live.buffers.size() - 1);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(stat_current("allocated_bytes") == 0, "allocated_bytes not 0 after freeing all");
  std::int64_t before = stat_current("reserved_bytes");
  cudalloc_error_t err = cudalloc_empty_cache(-1);
  CHECK(err == CUDALLOC_SUCCESS, "empty_cache: %s", cudalloc_last_error_string());
  std::int64_t after = stat_current("reserved_bytes");
  std::printf("empty_cache: reserved %" PRId64 " -> %" PRId64 " bytes\n", before, after);
  CHECK(before > 0 && after < before, "reserved bytes did not drop");
}

bool conf_has(const char* text) {
  const char* conf = std::getenv("CUDALLOC_CONF");
  return conf != nullptr && std::strstr(conf, text) != nullptr;
}

std::size_t host_bytes_of(const void* p) {
  std::size_t device_bytes = 0, host_bytes = 0;
  cudalloc_error_t err = cudalloc_residency(p, &device_bytes, &host_bytes);
  CHECK(err == CUDALLOC_SUCCESS, "cudalloc_residency(%p): %s", p, cudalloc_last_error_string());
  return host_bytes;
}

// Moves live buffers to host memory while their fills are still queued (the move must wait for
// them), has kernels read and rewrite them there, and moves them back on another stream while
// the rewrites are queued. Buffers smaller than a page carry their neighbours along. Plain
// segments (vmm:0) cannot move: every call must say so.
void check_moves(Context& c) {
  const bool paged = !conf_has("vmm:0");
  const std::size_t count = std::min<std::size_t>(c.live.buffers.size(), 60);
  for (std::size_t i = 0; i < count; ++i) {
    Buffer& b = c.live.buffers[i];
    b.seed = c.next_seed++;
    launch_fill(b.ptr, b.size, b.seed, c.streams[b.stream]);
  }
  int moved = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Buffer& b = c.live.buffers[i];
    cudalloc_error_t err = cudalloc_offload(b.ptr, c.streams[b.stream]);
    if (!paged) {
      CHECK(err == CUDALLOC_ERROR_NOT_SUPPORTED, "offload with vmm:0 gave %d", static_cast<int>(err));
      continue;
    }
    CHECK(err == CUDALLOC_SUCCESS, "cudalloc_offload(%p, %zu): %s", b.ptr, b.size,
          cudalloc_last_error_string());
    CHECK(host_bytes_of(b.ptr) >= b.size, "buffer %p is not wholly on the host", b.ptr);
    ++moved;
  }
  verify_live(c, "offloaded (kernels read host memory)");
  for (std::size_t i = 0; i < count; ++i) {
    Buffer& b = c.live.buffers[i];
    b.seed = c.next_seed++;
    launch_fill(b.ptr, b.size, b.seed, c.streams[b.stream]);
  }
  for (std::size_t i = 0; paged && i < count; ++i) {
    const Buffer& b = c.live.buffers[i];
    cudaStream_t other = c.streams[(b.stream + 1) % kStreams];
    CHECK(cudalloc_prefetch(b.ptr, other) == CUDALLOC_SUCCESS, "cudalloc_prefetch(%p): %s",
          b.ptr, cudalloc_last_error_string());
    CHECK(host_bytes_of(b.ptr) == 0, "buffer %p is still partly on the host", b.ptr);
  }
  verify_live(c, "written on the host, moved back");
  std::printf("moves: %d buffers offloaded and prefetched, %" PRId64 " pages out, %" PRId64
              " back\n", moved, stat_current("page_offloads"), stat_current("page_prefetches"));
}

// With offload:host: a device budget 64 MiB above what is reserved, then 8 x 32 MiB of new
// buffers. Those past the budget are spilled to host memory; kernels write and read them all.
// Freeing half and promoting brings spilled pages back; the bytes stay right throughout.
void check_spill(Context& c) {
  if (!conf_has("offload:host")) {
    std::printf("spill: skipped (CUDALLOC_CONF has no offload:host)\n");
    return;
  }
  CHECK(cudalloc_empty_cache(0) == CUDALLOC_SUCCESS, "empty_cache");  // no idle pages left
  const std::int64_t reserved = stat_current("reserved_bytes");
  const std::size_t limit = static_cast<std::size_t>(reserved) + (std::size_t{64} << 20);
  CHECK(cudalloc_set_memory_limit(limit, 0) == CUDALLOC_SUCCESS, "set limit");
  const std::size_t first = c.live.buffers.size();
  for (int i = 0; i < 8; ++i) allocate_and_fill(c, std::size_t{32} << 20, i % kStreams);
  verify_live(c, "spilled past the device budget");
  const std::int64_t host_active = stat_current("host_active_bytes");
  std::size_t spilled = 0;
  for (std::size_t i = first; i < c.live.buffers.size(); ++i) {
    spilled += host_bytes_of(c.live.buffers[i].ptr);
  }
  CHECK(spilled >= (std::size_t{128} << 20), "only %zu bytes were spilled", spilled);
  CHECK(stat_current("reserved_bytes") <= static_cast<std::int64_t>(limit),
        "reserved bytes passed the limit");
  // Free the buffers that live on the device: room to promote into.
  for (std::size_t i = c.live.buffers.size(); i-- > first;) {
    if (host_bytes_of(c.live.buffers[i].ptr) == 0) free_buffer(c, i);
  }
  const std::int64_t before = stat_current("host_active_bytes");
  CHECK(cudalloc_promote(0) == CUDALLOC_SUCCESS, "promote: %s", cudalloc_last_error_string());
  const std::int64_t after = stat_current("host_active_bytes");
  std::printf("spill: %zu bytes spilled (host in use %" PRId64 "); after freeing the buffers on "
              "the device, promotion took host use from %" PRId64 " to %" PRId64 "\n",
              spilled, host_active, before, after);
  CHECK(after < before, "promote moved nothing back");
  verify_live(c, "after promotion");
  while (c.live.buffers.size() > first) free_buffer(c, first);
  CHECK(cudalloc_set_memory_limit(0, 0) == CUDALLOC_SUCCESS, "clear limit");
}

int section(const char* name, int failures_before) {
  std::printf("%s %s\n", g_failures == failures_before ? "PASS" : "FAIL", name);
  return g_failures;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  Context c;
  for (cudaStream_t& s : c.streams) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  c.sums.init();
  std::printf("cudalloc %s, %d device(s) seen by cudalloc\n", cudalloc_version_string(),
              cudalloc_device_count());

  int f = g_failures;
  phase_fill(c, 300);
  phase_churn(c, 200);
  f = section("allocate/free across streams (alignment, overlap)", f);
  check_stats(c);
  f = section("stats", f);
  verify_live(c, "patterns");
  check_validate("after patterns");
  f = section("patterns byte-exact", f);
  check_record_stream(c);
  f = section("record_stream", f);
  check_foreign_pointer(c);
  f = section("foreign pointer rejected", f);
  check_moves(c);
  check_validate("after moves");
  f = section("offload/prefetch at the same address, byte-exact", f);
  check_empty_cache(c);
  check_validate("after empty_cache");
  f = section("empty_cache", f);
  check_spill(c);
  check_validate("after spill");
  f = section("host tier past the device budget, promotion", f);

  for (cudaStream_t s : c.streams) CUDA_OK(cudaStreamDestroy(s));
  std::printf("gpu.patterns: %s (%d failed checks)\n", g_failures == 0 ? "PASS" : "FAIL",
              g_failures);
  return g_failures == 0 ? 0 : 1;
}
