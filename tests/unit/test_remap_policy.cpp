// The paged remap policy on whole workloads, replayed on the simulated device: a repeating
// training step stops mapping after its warm-up, and a workload whose shapes change every
// step keeps its reserved memory within (1 + remap_growth) of its peak in use while growth
// cuts its remaps. The workloads are generated here (not the shared traces) so that the
// policy is held to shapes it was not chosen on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lcg.h"
#include "replay/plan.h"
#include "replay/runner.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::replay;
using snapshot::TraceRecord;
using test::Lcg;

namespace {

constexpr std::uint64_t kCapacity = std::uint64_t{1} << 40;

class TraceBuilder {
 public:
  std::uint64_t alloc(std::uint64_t size) {
    const std::uint64_t addr = next_addr_++;
    events_.push_back({TraceAction::alloc, addr, size, 0, 0});
    return addr;
  }
  void release(std::uint64_t addr) {
    events_.push_back({TraceAction::free_completed, addr, 0, 0, 0});
  }
  Plan plan() const {
    Plan plan;
    std::string error;
    REQUIRE(make_plan(events_, 0, false, &plan, &error));
    return plan;
  }

 private:
  std::vector<TraceRecord> events_;
  std::uint64_t next_addr_ = 1;
};

// One step of a model: a sequence of tensors drawn from `shape_seed` (the same sequence every
// step for the same seed), of 1-64 MiB and not page multiples, each freed a few tensors after
// it was made, so lifetimes interleave as a real step's do. `scale` multiplies every size
// (1: the fixed-shape step).
void model_step(TraceBuilder& t, std::uint64_t shape_seed, double scale) {
  Lcg shapes{shape_seed};
  std::vector<std::pair<std::uint64_t, int>> live;  // address, ops left to live
  for (int op = 0; op < 80; ++op) {
    const std::uint64_t bytes = MiB + shapes.below(63 * MiB) + shapes.below(4096);
    const std::uint64_t size = std::uint64_t(double(bytes) * scale) + 512;
    live.push_back({t.alloc(size), 1 + int(shapes.below(12))});
    for (std::size_t i = 0; i < live.size();) {
      if (--live[i].second > 0) {
        ++i;
        continue;
      }
      t.release(live[i].first);
      live.erase(live.begin() + std::ptrdiff_t(i));
    }
  }
  for (const auto& tensor : live) t.release(tensor.first);
}

Plan fixed_shape_training(int steps) {
  TraceBuilder t;
  const std::uint64_t weights = t.alloc(300 * MiB + 7);
  for (int step = 0; step < steps; ++step) model_step(t, 7, 1.0);
  t.release(weights);
  return t.plan();
}

// Every step's sizes scale with a batch length drawn anew, as with variable sequence length.
Plan varlen_training(int steps, std::uint64_t seed) {
  TraceBuilder t;
  Lcg lcg{seed};
  const std::uint64_t weights = t.alloc(300 * MiB + 7);
  for (int step = 0; step < steps; ++step) {
    model_step(t, 7, 0.3 + double(lcg.below(71)) / 100.0);
  }
  t.release(weights);
  return t.plan();
}

// The defaults (page_slack 0: idle pages serve before new memory) with `remap_growth`.
Settings with_growth(double remap_growth) {
  Settings s;
  s.remap_growth = remap_growth;
  return s;
}

double fragmentation(const PolicyResult& r, const Plan& plan) {
  return double(r.peak_reserved_bytes) / double(plan.peak_live_bytes);
}

}  // namespace

TEST_CASE("remap policy: a repeating training step maps nothing after its warm-up",
          "[replay][remap_policy]") {
  const Plan plan = fixed_shape_training(40);
  // Without growth the step's pages take each other's memory in a cycle that repeats: the
  // pattern needs the policy (the test could not pass by accident).
  const PolicyResult none = run_cudalloc(plan, with_growth(0), kCapacity);
  REQUIRE(none.problem.empty());
  CHECK(none.late_page_maps > 0);
  // Growth bounded by overhead over the peak in use gives the cycle its memory during the
  // warm-up, whatever was grown before, so the second half maps nothing. This step's cycle
  // needs about 10% (its tensors are 1-64 MiB, a few live at a time): the default covers it.
  for (const double growth : {Settings{}.remap_growth, 0.2, 0.5}) {
    INFO("remap_growth " << growth);
    const PolicyResult r = run_cudalloc(plan, with_growth(growth), kCapacity);
    REQUIRE(r.problem.empty());
    CHECK(r.late_page_maps == 0);
    CHECK(r.late_page_unmaps == 0);
    CHECK(fragmentation(r, plan) <= 1.0 + growth);
  }
}

TEST_CASE("remap policy: varying shapes buy fewer remaps with memory within the bound",
          "[replay][remap_policy]") {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    const Plan plan = varlen_training(60, seed);
    const PolicyResult none = run_cudalloc(plan, with_growth(0), kCapacity);
    REQUIRE(none.problem.empty());
    REQUIRE(none.late_page_maps > 0);
    std::uint64_t previous_maps = none.late_page_maps;
    for (const double growth : {0.02, Settings{}.remap_growth, 0.2}) {
      INFO("seed " << seed << ", remap_growth " << growth);
      const PolicyResult r = run_cudalloc(plan, with_growth(growth), kCapacity);
      REQUIRE(r.problem.empty());
      // Chronic growth stops at (1 + remap_growth) x the peak allocated; what is reserved
      // past it comes from pages in use (a page is the unit), as without growth.
      CHECK(fragmentation(r, plan) <= std::max(fragmentation(none, plan), 1.0 + growth));
      // More room, fewer remaps: the memory buys what it is for.
      CHECK(r.late_page_maps <= previous_maps);
      previous_maps = r.late_page_maps;
    }
    // At the default at least half the remaps are gone.
    const PolicyResult defaults = run_cudalloc(plan, Settings{}, kCapacity);
    CHECK(2 * defaults.late_page_maps <= none.late_page_maps);
  }
}

namespace {

// Replays every op of `plan` through `policy`, then frees what it left live.
void replay_whole(const Plan& plan, CudallocPolicy& policy) {
  OpReplayer replayer(plan);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) replayer.apply(i, policy);
  replayer.release_all(policy);
}

// A phase with a peak of `bytes` allocated at once, then nothing live.
Plan one_large_phase(std::uint64_t bytes) {
  TraceBuilder t;
  t.release(t.alloc(bytes));
  return t.plan();
}

}  // namespace

TEST_CASE("remap policy: after empty_cache a smaller phase grows within its own peak",
          "[replay][remap_policy]") {
  // A trainer's 8 GiB, emptied from the cache, then an inference phase of shapes that change
  // every step and peak far lower: the growth bound follows the phase running now.
  const Plan smaller = varlen_training(60, 5);
  REQUIRE(smaller.peak_live_bytes < GiB);
  const Settings settings;  // the defaults
  const PolicyResult alone = run_cudalloc(smaller, settings, kCapacity);
  const PolicyResult none = run_cudalloc(smaller, with_growth(0), kCapacity);
  REQUIRE(alone.problem.empty());
  REQUIRE(none.problem.empty());
  CudallocPolicy policy(0, settings, kCapacity, false);
  DeviceAllocator& alloc = policy.allocator();
  replay_whole(one_large_phase(8 * GiB), policy);
  REQUIRE(alloc.empty_cache() == Error::ok);
  REQUIRE(alloc.stats().reserved_bytes.current == 0);
  alloc.reset_peak_stats();
  replay_whole(smaller, policy);
  CHECK(alloc.validate().empty());
  const double after = double(alloc.stats().reserved_bytes.peak);
  const double limit = std::max(fragmentation(none, smaller), 1.0 + settings.remap_growth);
  CHECK(after <= limit * double(smaller.peak_live_bytes));
  // The phase reserves what it does alone: what came before and was emptied does not show.
  CHECK(alloc.stats().reserved_bytes.peak == std::int64_t(alone.peak_reserved_bytes));
}
