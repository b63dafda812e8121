// The mixed workload of cudalloc-bench (RMM-style), shared by the GPU benchmark and by
// mixed-rounds (the same plan on the simulated device): allocate with probability 0.73, else
// free a random live block; sizes log-uniform in 256 B .. 64 MiB; live bytes capped (free
// instead when over the cap). The same sequence for every allocator: it depends only on the
// seed, the number of operations and the cap.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace cudalloc::bench {

struct MixedOp {
  bool allocate;
  std::size_t value;  // size to allocate, or index of the live block to free
};

struct MixedPlan {
  std::vector<MixedOp> ops;
  std::size_t peak_live = 0;
  long allocs = 0, frees = 0;
};

inline MixedPlan make_mixed_plan(int operations, std::size_t live_cap) {
  MixedPlan plan;
  std::mt19937_64 rng(42);
  std::bernoulli_distribution coin(0.73);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * (1 << 20)));
  std::vector<std::size_t> live;
  std::size_t live_bytes = 0;
  for (int i = 0; i < operations; ++i) {
    auto size = static_cast<std::size_t>(std::exp(log_size(rng)));
    bool alloc = coin(rng) || live.empty();
    if (alloc && live_bytes + size > live_cap && !live.empty()) alloc = false;
    if (alloc) {
      live.push_back(size);
      live_bytes += size;
      plan.peak_live = std::max(plan.peak_live, live_bytes);
      plan.ops.push_back({true, size});
      ++plan.allocs;
    } else {
      std::size_t victim = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      live_bytes -= live[victim];
      live[victim] = live.back();
      live.pop_back();
      plan.ops.push_back({false, victim});
      ++plan.frees;
    }
  }
  return plan;
}

// Runs the plan through allocate(size) -> pointer (nullptr: failed) and deallocate(pointer)
// -> bool (false: failed); the first failure stops the run (*completed false). Returns what is
// still live, for the caller to free outside whatever it times.
template <typename Allocate, typename Deallocate>
std::vector<void*> run_mixed_plan(const MixedPlan& plan, Allocate&& allocate,
                                  Deallocate&& deallocate, bool* completed) {
  std::vector<void*> live;
  live.reserve(plan.ops.size());
  *completed = true;
  for (const MixedOp& op : plan.ops) {
    if (op.allocate) {
      void* p = allocate(op.value);
      live.push_back(p);
      *completed = p != nullptr;
    } else {
      void* p = live[op.value];
      live[op.value] = live.back();
      live.pop_back();
      if (p != nullptr) *completed = deallocate(p);
    }
    if (!*completed) break;
  }
  return live;
}

}  // namespace cudalloc::bench
