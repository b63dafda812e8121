// Runs a replay plan through an allocator policy on a simulated device and measures it.
#pragma once

#include <cstdint>
#include <string>

#include "core/settings.h"
#include "core/state.h"
#include "replay/plan.h"

namespace cudalloc::replay {

struct PolicyResult {
  std::string policy;                 // "cudalloc", "pytorch" or "expandable"
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t final_reserved_bytes = 0;
  // Calls that obtained / returned device memory from the (simulated) driver: cudalloc's
  // device_allocs stat (physical pages created in paged mode, segments with vmm:0), PyTorch's
  // cudaMalloc calls (pytorch), its map calls of expandable segments (expandable).
  std::uint64_t device_allocs = 0;
  std::uint64_t device_frees = 0;
  std::uint64_t oom_events = 0;       // allocations that failed; their frees are skipped
  // cudalloc's paged mode and expandable segments: pages mapped / unmapped (all, and in the
  // second half of the events, where a repeating workload is in its steady state); cudalloc's
  // host waits before a page moved.
  std::uint64_t page_maps = 0;
  std::uint64_t page_unmaps = 0;
  std::uint64_t late_page_maps = 0;
  std::uint64_t late_page_unmaps = 0;
  std::uint64_t page_waits = 0;
  std::uint64_t fences = 0;  // device synchronizations for device-ordered frees
  double replay_ns_per_event = 0;     // allocator time only
  std::string problem;                // an invariant violation found after the replay
};

// cudalloc's own allocator (DeviceAllocator on a FakeDevice of `capacity` bytes). With
// final_state, the allocator's state after the last event (the trace's live allocations
// still in place) is copied there.
// With device_order, frees are device-ordered (as cudaFree under LD_PRELOAD) instead of
// stream-ordered (as PyTorch's pluggable allocator).
PolicyResult run_cudalloc(const Plan& plan, const Settings& settings, std::uint64_t capacity,
                          DeviceState* final_state = nullptr, bool device_order = false);
// PyTorch's native caching rules (PytorchModel).
PolicyResult run_pytorch(const Plan& plan, std::uint64_t capacity);
// PyTorch's rules with expandable_segments:True (ExpandableModel); its pages are 2 MiB in
// the small pool, 20 MiB in the large.
PolicyResult run_expandable(const Plan& plan, std::uint64_t capacity);

}  // namespace cudalloc::replay
