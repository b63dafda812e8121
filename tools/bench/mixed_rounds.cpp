// mixed-rounds: cudalloc-bench's mixed workload (mixed_plan.h) on the simulated device, round
// after round, with what each round cost the allocator and the driver calls it made.
//
//   mixed-rounds [--rounds N] [--ops N] [--live-cap BYTES] [--conf CONF]
//
// cudalloc-bench runs the plan twice on the GPU, untimed ("cold") then timed; this runs it N
// times (default 4) on an unbacked FakeDevice of 141 GiB (an H200) through TimedDevice, so the
// allocator's host time per operation is printed apart from the simulated driver's, with the
// page maps, unmaps and page creations of each round: what a round would cost on a GPU is
// those counts times the driver's cost per call (page-move-bench). Everything live is freed
// between rounds, as cudalloc-bench does. Exit 0, 1 if an allocation failed, 2 bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/device_allocator.h"
#include "device/fake_device.h"
#include "device/timed_device.h"
#include "mixed_plan.h"
#include "options.h"
#include "util/units.h"

using namespace cudalloc;

namespace {

struct Args {
  int rounds = 4;
  int ops = 100000;
  std::size_t live_cap = std::size_t{8} << 30;
  std::string conf;
};

bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--rounds") == 0 && has_value) {
      a->rounds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ops") == 0 && has_value) {
      a->ops = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--live-cap") == 0 && has_value) {
      if (!parse_bytes(argv[++i], &a->live_cap)) return false;
    } else if (std::strcmp(argv[i], "--conf") == 0 && has_value) {
      a->conf = argv[++i];
    } else {
      return false;
    }
  }
  return a->rounds > 0 && a->ops > 0 && a->live_cap > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, &args)) {
    std::fprintf(stderr, "usage: mixed-rounds [--rounds N] [--ops N] [--live-cap BYTES] "
                         "[--conf CONF]\n");
    return 2;
  }
  Settings settings;
  for (const std::string& warning : parse_conf(args.conf, &settings)) {
    std::fprintf(stderr, "mixed-rounds: %s\n", warning.c_str());
  }
  const bench::MixedPlan plan = bench::make_mixed_plan(args.ops, args.live_cap);
  device::FakeDevice::Options o;
  o.backing = false;
  o.capacity = std::size_t{141} << 30;
  device::FakeDevice fake(o);
  device::TimedDevice timed(fake);
  DeviceAllocator alloc(timed, 0, settings);
  std::printf("mixed plan: %zu ops, peak live %s; simulated device of %s\n", plan.ops.size(),
              format_bytes(plan.peak_live).c_str(), format_bytes(o.capacity).c_str());
  std::printf("round  allocator ns/op  driver ns/op  page maps  unmaps  pages created  peak reserved\n");
  for (int round = 0; round < args.rounds; ++round) {
    const Stats before = alloc.stats();
    const double driver_before = timed.charged_ns();
    const auto start = std::chrono::steady_clock::now();
    bool ok = false;
    const std::vector<void*> live = bench::run_mixed_plan(
        plan,
        [&](std::size_t size) {
          void* p = nullptr;
          return alloc.allocate(size, 0, &p) == Error::ok ? p : nullptr;
        },
        [&](void* p) { return alloc.deallocate(p) == Error::ok; }, &ok);
    for (void* p : live) {
      if (p != nullptr) alloc.deallocate(p);
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (!ok) {
      std::fprintf(stderr, "mixed-rounds: an allocation failed in round %d\n", round);
      return 1;
    }
    const double driver = timed.charged_ns() - driver_before;
    const Stats s = alloc.stats();
    const double n = static_cast<double>(plan.ops.size());
    std::printf("%5d  %15.1f  %12.1f  %9lld  %6lld  %13lld  %s\n", round, (ns - driver) / n,
                driver / n, static_cast<long long>(s.page_maps.total - before.page_maps.total),
                static_cast<long long>(s.page_unmaps.total - before.page_unmaps.total),
                static_cast<long long>(s.device_allocs.total - before.device_allocs.total),
                format_bytes(static_cast<std::size_t>(s.reserved_bytes.peak)).c_str());
  }
  std::printf("(round 0 is cudalloc-bench's cold run, round 1 its timed one; ns/op includes the "
              "final frees of the round)\n");
  return 0;
}
