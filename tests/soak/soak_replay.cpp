// Soak driver: replays traces again and again through ONE long-lived allocator, so that
// growth that a single replay cannot show (reserved memory creeping up from fragmentation,
// host memory of metadata that is never given back) becomes visible. Not a test: it prints
// one line per iteration for a person (or scripts/soak.sh) to judge flatness.
//
//   cudalloc_soak SECONDS TRACE...
//
// Each iteration replays every trace (every device of it) on device 0 of an 80 GiB simulated
// device, frees what the trace left live, and prints: reserved bytes at the end (cache kept),
// peak reserved, segments obtained so far, host RSS, and whether validate() holds. Every 10th
// iteration also empties the cache and checks that reserved memory drops to zero.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/device_allocator.h"
#include "device/fake_device.h"
#include "replay/plan.h"
#include "snapshot/trace_reader.h"

using namespace cudalloc;

namespace {

std::size_t host_rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

double mib(std::int64_t bytes) { return double(bytes) / double(1 << 20); }

// Replays one plan; returns the allocations that failed.
std::uint64_t replay_once(DeviceAllocator& alloc, const replay::Plan& plan) {
  std::vector<void*> slots(plan.slots, nullptr);
  std::uint64_t failed = 0;
  for (const replay::ReplayOp& op : plan.ops) {
    void*& slot = slots[op.slot];
    if (op.kind == replay::ReplayOp::alloc) {
      if (alloc.allocate(op.size, op.stream, &slot) != Error::ok) ++failed;
    } else if (slot != nullptr) {
      alloc.deallocate(slot);
      slot = nullptr;
    }
  }
  for (void* p : slots) {
    if (p != nullptr) alloc.deallocate(p);
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SECONDS TRACE...\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  std::vector<replay::Plan> plans;
  for (int i = 2; i < argc; ++i) {
    snapshot::TraceFile trace;
    std::string error;
    if (!snapshot::read_trace(argv[i], &trace, &error)) {
      std::fprintf(stderr, "%s: %s\n", argv[i], error.c_str());
      return 1;
    }
    for (int dev : replay::trace_devices(trace.events)) {
      replay::Plan plan;
      if (!replay::make_plan(trace.events, dev, true, &plan, &error)) {
        std::fprintf(stderr, "%s: %s\n", argv[i], error.c_str());
        return 1;
      }
      plans.push_back(std::move(plan));
    }
  }
  std::size_t ops = 0;
  for (const replay::Plan& plan : plans) ops += plan.ops.size();
  std::printf("%zu plans (trace devices), %zu allocations and frees per iteration\n",
              plans.size(), ops);
  device::FakeDevice fake;  // 80 GiB, one device, streams complete at once
  DeviceAllocator alloc(fake, 0, Settings{});
  std::printf("%-5s %12s %12s %10s %10s %12s %s\n", "iter", "reserved_MiB", "peak_MiB",
              "segments", "failed", "host_rss_MiB", "state");
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (int iter = 1;; ++iter) {
    std::uint64_t failed = 0;
    for (const replay::Plan& plan : plans) failed += replay_once(alloc, plan);
    const Stats s = alloc.stats();
    std::string state = alloc.validate();
    if (state.empty() && s.allocated_count.current != 0) state = "allocations left live";
    if (iter % 10 == 0 && state.empty()) {
      alloc.empty_cache();
      if (alloc.stats().reserved_bytes.current != 0) state = "empty_cache left reserved memory";
    }
    std::printf("%-5d %12.1f %12.1f %10lld %10llu %12.1f %s\n", iter,
                mib(s.reserved_bytes.current), mib(s.reserved_bytes.peak),
                static_cast<long long>(s.device_allocs.total),
                static_cast<unsigned long long>(failed),
                double(host_rss_bytes()) / double(1 << 20), state.empty() ? "ok" : state.c_str());
    std::fflush(stdout);
    if (!state.empty()) status = 1;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (status != 0 || elapsed.count() >= seconds) break;
  }
  return status;
}
