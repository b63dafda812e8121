// cudalloc-bench: allocation speed of cudalloc against the CUDA allocators and CUB, in one
// process and one run, on device 0.
//
//   (a) pair latency: alloc+free of one size, warmed; median over repetitions of a timed loop
//       of K pairs (K chosen so that one timing takes about 10 ms), in ns per pair.
//   (b) mixed workload (RMM-style): a fixed-seed plan of 100k operations, allocate with
//       probability 0.73 else free a random live block, sizes log-uniform in 256 B .. 64 MiB,
//       live bytes capped at 8 GiB (free instead when over the cap); ns per operation. The plan
//       runs once untimed ("cold", reported too) and once timed on the warmed allocator.
//
// Usage: cudalloc-bench [--quick] [--json PATH] [--only NAME]
//   --only NAME  measure one allocator (cudalloc, cudaMalloc, ...): comparisons of two builds
// Exit status: 0 ok, 1 an allocator failed, 2 bad usage, 77 no GPU.
#include <cuda_runtime.h>

#include <cub/util_allocator.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cudalloc.h"
#include "mixed_plan.h"

namespace {

struct Options {
  bool quick = false;
  const char* json_path = nullptr;
  double target_ns = 10e6;  // one timed loop
  int reps = 21;            // timed loops per case
  int slow_reps = 7;        // when one pair takes over 20 us (cudaMalloc at large sizes)
  int mixed_ops = 100000;
  std::size_t live_cap = std::size_t{8} << 30;
  const char* only = nullptr;  // run only the allocator of this name
};

double now_ns() {
  using namespace std::chrono;
  return static_cast<double>(
      duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count());
}

// ---- Allocators under test: one stream, device 0 -----------------------------------------

class Allocator {
 public:
  explicit Allocator(cudaStream_t stream) : stream_(stream) {}
  virtual ~Allocator() = default;
  virtual const char* name() const = 0;
  virtual cudaError_t allocate(void** p, std::size_t bytes) = 0;
  virtual cudaError_t deallocate(void* p) = 0;
  // Returns cached memory to the driver (after the stream's work), between cases.
  virtual void release() {}
  // Peak memory held from the driver since the last reset_peak(), -1 if unknown.
  virtual std::int64_t peak_reserved() { return -1; }
  virtual void reset_peak() {}

 protected:
  cudaStream_t stream_;
};

class CudallocAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  const char* name() const override { return "cudalloc"; }
  cudaError_t allocate(void** p, std::size_t n) override {
    return static_cast<cudaError_t>(cudalloc_allocate(p, n, 0, stream_));
  }
  cudaError_t deallocate(void* p) override {
    return static_cast<cudaError_t>(cudalloc_deallocate(p, 0));
  }
  void release() override {
    cudaStreamSynchronize(stream_);
    cudalloc_empty_cache(-1);
  }
  std::int64_t peak_reserved() override {
    cudalloc_stats_t stats{};
    if (cudalloc_get_stats(0, &stats) != CUDALLOC_SUCCESS) return -1;
    for (int i = 0; i < stats.count; ++i)
      if (std::strcmp(cudalloc_stat_name(i), "reserved_bytes") == 0) return stats.values[i].peak;
    return -1;
  }
  void reset_peak() override { cudalloc_reset_peak_stats(0); }
};

class CudaMallocAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  const char* name() const override { return "cudaMalloc"; }
  cudaError_t allocate(void** p, std::size_t n) override { return cudaMalloc(p, n); }
  cudaError_t deallocate(void* p) override { return cudaFree(p); }
};

// cudaMallocAsync on the device's default pool, which keeps everything it ever reserved.
class CudaMallocAsyncAllocator final : public Allocator {
 public:
  explicit CudaMallocAsyncAllocator(cudaStream_t stream) : Allocator(stream) {
    cudaDeviceGetDefaultMemPool(&pool_, 0);
    std::uint64_t threshold = UINT64_MAX;
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold);
  }
  const char* name() const override { return "cudaMallocAsync"; }
  cudaError_t allocate(void** p, std::size_t n) override {
    return cudaMallocAsync(p, n, stream_);
  }
  cudaError_t deallocate(void* p) override { return cudaFreeAsync(p, stream_); }
  void release() override {
    cudaStreamSynchronize(stream_);
    cudaMemPoolTrimTo(pool_, 0);
  }
  std::int64_t peak_reserved() override {
    std::uint64_t high = 0;
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &high) != cudaSuccess)
      return -1;
    return static_cast<std::int64_t>(high);
  }
  void reset_peak() override {
    std::uint64_t zero = 0;
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero);
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};

class CubAllocator final : public Allocator {
 public:
  // Default CUB settings (bins 512 B .. 2 MiB in powers of 8, ~6 MB cached).
  explicit CubAllocator(cudaStream_t stream) : Allocator(stream), cub_(), name_("cub") {}
  // Powers of 2 from 2 B with no largest bin and no cache limit: every size is cached.
  struct Unbounded {};
  CubAllocator(cudaStream_t stream, Unbounded)
      : Allocator(stream),
        cub_(2, 1, cub::CachingDeviceAllocator::INVALID_BIN,
             cub::CachingDeviceAllocator::INVALID_SIZE),
        name_("cub-unbounded") {}
  const char* name() const override { return name_; }
  cudaError_t allocate(void** p, std::size_t n) override {
    return cub_.DeviceAllocate(p, n, stream_);
  }
  cudaError_t deallocate(void* p) override { return cub_.DeviceFree(p); }
  void release() override {
    cudaStreamSynchronize(stream_);
    cub_.FreeAllCached();
  }

 private:
  cub::CachingDeviceAllocator cub_;
  const char* name_;
};

// ---- (a) pair latency --------------------------------------------------------------------

struct PairResult {
  std::string allocator;
  std::size_t size = 0;
  double median_ns = -1, min_ns = -1;
  int reps = 0;
  long pairs_per_rep = 0;
  std::string error;
};

// Total ns for `k` alloc+free pairs of `size`, or -1 (with `error` set) on a failure.
double time_pairs(Allocator& a, std::size_t size, long k, std::string& error) {
  double start = now_ns();
  for (long i = 0; i < k; ++i) {
    void* p = nullptr;
    cudaError_t err = a.allocate(&p, size);
    if (err == cudaSuccess) err = a.deallocate(p);
    if (err != cudaSuccess) {
      error = cudaGetErrorName(err);
      return -1;
    }
  }
  return now_ns() - start;
}

PairResult measure_pairs(Allocator& a, std::size_t size, const Options& o) {
  PairResult r;
  r.allocator = a.name();
  r.size = size;
  if (time_pairs(a, size, 3, r.error) < 0) return r;  // warm-up
  long k = 1;
  double t = 0;
  while ((t = time_pairs(a, size, k, r.error)) >= 0 && t < o.target_ns / 8) k *= 2;
  if (t < 0) return r;
  double per_pair = t / static_cast<double>(k);
  k = std::max(1L, static_cast<long>(o.target_ns / per_pair));
  int reps = per_pair > 20e3 ? o.slow_reps : o.reps;
  std::vector<double> samples;
  for (int i = 0; i < reps; ++i) {
    double total = time_pairs(a, size, k, r.error);
    if (total < 0) return r;
    samples.push_back(total / static_cast<double>(k));
  }
  std::sort(samples.begin(), samples.end());
  r.median_ns = samples[samples.size() / 2];
  r.min_ns = samples.front();
  r.reps = reps;
  r.pairs_per_rep = k;
  return r;
}

// ---- (b) mixed workload ------------------------------------------------------------------

// The plan (mixed_plan.h): the same sequence for every allocator.
using Plan = cudalloc::bench::MixedPlan;

Plan make_plan(const Options& o) { return cudalloc::bench::make_mixed_plan(o.mixed_ops, o.live_cap); }

// Runs the plan and frees what is left (untimed); ns per operation, -1 on a failure.
double run_plan(Allocator& a, const Plan& plan, std::string& error) {
  cudaError_t err = cudaSuccess;
  bool completed = false;
  const double start = now_ns();
  const std::vector<void*> live = cudalloc::bench::run_mixed_plan(
      plan,
      [&](std::size_t size) -> void* {
        void* p = nullptr;
        err = a.allocate(&p, size);
        return err == cudaSuccess ? p : nullptr;
      },
      [&](void* p) { return (err = a.deallocate(p)) == cudaSuccess; }, &completed);
  const double elapsed = now_ns() - start;
  for (void* p : live)
    if (p != nullptr) a.deallocate(p);
  if (!completed) {
    error = cudaGetErrorName(err);
    return -1;
  }
  return elapsed / static_cast<double>(plan.ops.size());
}

struct MixedResult {
  std::string allocator;
  double ns_per_op = -1, cold_ns_per_op = -1;
  std::int64_t peak_reserved = -1;
  std::string error;
};

MixedResult measure_mixed(Allocator& a, const Plan& plan) {
  MixedResult r;
  r.allocator = a.name();
  a.reset_peak();
  r.cold_ns_per_op = run_plan(a, plan, r.error);
  if (r.cold_ns_per_op >= 0) r.ns_per_op = run_plan(a, plan, r.error);
  r.peak_reserved = a.peak_reserved();
  return r;
}

// ---- Output -------------------------------------------------------------------------------

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

bool write_json(const char* path, const Options& o, const cudaDeviceProp& prop, const Plan& plan,
                const std::vector<PairResult>& pairs, const std::vector<MixedResult>& mixed) {
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const char* conf = std::getenv("CUDALLOC_CONF");
  std::fprintf(f, "{\n  \"schema_version\": 1,\n  \"device\": %s,\n", json_string(prop.name).c_str());
  std::fprintf(f, "  \"driver_version\": %d,\n  \"runtime_version\": %d,\n", driver, runtime);
  std::fprintf(f, "  \"cudalloc_version\": %s,\n  \"cudalloc_conf\": %s,\n",
               json_string(cudalloc_version_string()).c_str(),
               json_string(conf ? conf : "").c_str());
  std::fprintf(f, "  \"quick\": %s,\n  \"pair_latency\": [\n", o.quick ? "true" : "false");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const PairResult& r = pairs[i];
    std::fprintf(f,
                 "    {\"allocator\": %s, \"size\": %zu, \"ns_per_pair\": %.1f, \"min_ns\": %.1f, "
                 "\"reps\": %d, \"pairs_per_rep\": %ld, \"error\": %s}%s\n",
                 json_string(r.allocator).c_str(), r.size, r.median_ns, r.min_ns, r.reps,
                 r.pairs_per_rep, json_string(r.error).c_str(), i + 1 < pairs.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"mixed\": {\"ops\": %zu, \"allocs\": %ld, \"frees\": %ld, "
               "\"live_cap\": %zu, \"peak_live_bytes\": %zu, \"results\": [\n",
               plan.ops.size(), plan.allocs, plan.frees, o.live_cap, plan.peak_live);
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    const MixedResult& r = mixed[i];
    std::fprintf(f,
                 "    {\"allocator\": %s, \"ns_per_op\": %.1f, \"cold_ns_per_op\": %.1f, "
                 "\"peak_reserved_bytes\": %lld, \"error\": %s}%s\n",
                 json_string(r.allocator).c_str(), r.ns_per_op, r.cold_ns_per_op,
                 static_cast<long long>(r.peak_reserved), json_string(r.error).c_str(),
                 i + 1 < mixed.size() ? "," : "");
  }
  std::fprintf(f, "  ]}\n}\n");
  return std::fclose(f) == 0;
}

std::string size_label(std::size_t n) {
  if (n >= (1u << 20)) return std::to_string(n >> 20) + "MiB";
  if (n >= 1024) return std::to_string(n >> 10) + "KiB";
  return std::to_string(n) + "B";
}

void print_table(const std::vector<std::string>& names, const std::vector<std::size_t>& sizes,
                 const std::vector<PairResult>& pairs, const std::vector<MixedResult>& mixed) {
  std::printf("\nns per alloc+free pair (median), ns per op for the mixed workload\n");
  std::printf("%-16s", "allocator");
  for (std::size_t s : sizes) std::printf("%10s", size_label(s).c_str());
  std::printf("%10s%12s\n", "mixed", "mixed-cold");
  for (std::size_t a = 0; a < names.size(); ++a) {
    std::printf("%-16s", names[a].c_str());
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const PairResult& r = pairs[a * sizes.size() + s];
      if (r.median_ns < 0) std::printf("%10s", "ERR");
      else std::printf("%10.0f", r.median_ns);
    }
    const MixedResult& m = mixed[a];
    if (m.ns_per_op < 0) std::printf("%10s", "ERR");
    else std::printf("%10.0f", m.ns_per_op);
    if (m.cold_ns_per_op < 0) std::printf("%12s\n", "ERR");
    else std::printf("%12.0f\n", m.cold_ns_per_op);
  }
}

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
      o.target_ns = 1e6;
      o.reps = 3;
      o.slow_reps = 2;
      o.mixed_ops = 5000;
      o.live_cap = std::size_t{1} << 30;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      o.json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      o.only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--json PATH] [--only NAME]\n", argv[0]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) return 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaSetDevice(0);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;

  std::vector<std::unique_ptr<Allocator>> allocators;
  allocators.push_back(std::make_unique<CudallocAllocator>(stream));
  allocators.push_back(std::make_unique<CudaMallocAllocator>(stream));
  allocators.push_back(std::make_unique<CudaMallocAsyncAllocator>(stream));
  allocators.push_back(std::make_unique<CubAllocator>(stream));
  allocators.push_back(std::make_unique<CubAllocator>(stream, CubAllocator::Unbounded{}));
  if (o.only != nullptr) {
    allocators.erase(std::remove_if(allocators.begin(), allocators.end(),
                                    [&](const std::unique_ptr<Allocator>& a) {
                                      return std::strcmp(a->name(), o.only) != 0;
                                    }),
                     allocators.end());
    if (allocators.empty()) {
      std::fprintf(stderr, "--only %s: no allocator of that name\n", o.only);
      return 2;
    }
  }

  const std::vector<std::size_t> sizes = {512, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20};
  const Plan plan = make_plan(o);
  std::printf("device %s; mixed plan: %zu ops, peak live %.2f GiB%s\n", prop.name,
              plan.ops.size(), static_cast<double>(plan.peak_live) / (1 << 30),
              o.quick ? " (quick)" : "");
  std::vector<PairResult> pairs;
  std::vector<MixedResult> mixed;
  std::vector<std::string> names;
  bool failed = false;
  for (auto& a : allocators) {
    names.push_back(a->name());
    for (std::size_t s : sizes) {
      pairs.push_back(measure_pairs(*a, s, o));
      const PairResult& r = pairs.back();
      std::printf("%-16s %8s  %10.0f ns/pair  (%d x %ld)%s%s\n", a->name(),
                  size_label(s).c_str(), r.median_ns, r.reps, r.pairs_per_rep,
                  r.error.empty() ? "" : "  error: ", r.error.c_str());
      failed |= !r.error.empty();
    }
    a->release();
    mixed.push_back(measure_mixed(*a, plan));
    const MixedResult& m = mixed.back();
    std::printf("%-16s %8s  %10.0f ns/op (cold %.0f), peak reserved %lld%s%s\n", a->name(),
                "mixed", m.ns_per_op, m.cold_ns_per_op, static_cast<long long>(m.peak_reserved),
                m.error.empty() ? "" : "  error: ", m.error.c_str());
    failed |= !m.error.empty();
    a->release();
  }
  allocators.clear();
  cudaStreamDestroy(stream);
  if (o.json_path != nullptr && !write_json(o.json_path, o, prop, plan, pairs, mixed)) {
    std::fprintf(stderr, "cannot write %s\n", o.json_path);
    failed = true;
  }
  print_table(names, sizes, pairs, mixed);
  return failed ? 1 : 0;
}
