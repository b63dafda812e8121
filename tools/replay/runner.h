// Runs a replay plan through an allocator policy on a simulated device and measures it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device_allocator.h"
#include "core/settings.h"
#include "core/state.h"
#include "device/fake_device.h"
#include "device/timed_device.h"
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
  // With oom_events: the first failed request's size and its event (the index among the
  // device's events). served_peak_live_bytes: the most bytes live at once in this replay,
  // which lacks the failed allocations (the plan's peak live when none failed).
  std::uint64_t first_failed_size = 0;
  std::uint64_t first_failed_event = 0;
  std::uint64_t served_peak_live_bytes = 0;
  // cudalloc's paged mode and expandable segments: pages mapped / unmapped (all, and in the
  // second half of the events, where a repeating workload is in its steady state); cudalloc's
  // host waits before a page moved.
  std::uint64_t page_maps = 0;
  std::uint64_t page_unmaps = 0;
  std::uint64_t late_page_maps = 0;
  std::uint64_t late_page_unmaps = 0;
  std::uint64_t page_waits = 0;
  std::uint64_t fences = 0;  // device synchronizations for device-ordered frees
  // Host time per replayed event: the allocator's own (cudalloc: less the simulated driver's
  // calls, which device_ns_per_event holds; the models make none).
  double replay_ns_per_event = 0;
  double device_ns_per_event = 0;
  bool paged = false;                 // cudalloc: paged segments (device_allocs are pages)
  std::string problem;                // an invariant violation found after the replay
};

// A policy is what a replay drives: allocate(size, stream, void** handle) -> bool (false: out
// of memory), free(handle), reserved() and peak_reserved() in bytes. PytorchModel and
// ExpandableModel are policies; so is CudallocPolicy.

// cudalloc's DeviceAllocator for device `device` of a FakeDevice of `capacity` bytes per
// device that keeps records but no bytes (no system calls), reached through a TimedDevice so
// that the time of the simulated driver's calls can be told apart from the allocator's.
// Frees are stream-ordered, or device-ordered with device_order.
// While one exists, cudalloc's logger at its default level (warn) shows errors only: a replay
// counts the allocations that fail and reports them once (PolicyResult), where the allocator
// would warn of each. CUDALLOC_LOG=info, debug or trace keep every message.
class CudallocPolicy {
 public:
  CudallocPolicy(int device, const Settings& settings, std::uint64_t capacity, bool device_order);
  ~CudallocPolicy();
  CudallocPolicy(const CudallocPolicy&) = delete;
  CudallocPolicy& operator=(const CudallocPolicy&) = delete;
  bool allocate(std::uint64_t size, std::uint64_t stream, void** handle) {
    return alloc_.allocate(size, stream, handle) == Error::ok;
  }
  void free(void* handle) { alloc_.deallocate(handle, order_); }
  std::uint64_t reserved() const;
  std::uint64_t peak_reserved() const;
  DeviceAllocator& allocator() { return alloc_; }
  // Nanoseconds the simulated driver's calls have cost so far (TimedDevice::charged_ns).
  double device_ns() const { return timed_.charged_ns(); }

 private:
  const int log_level_;  // the logger's level before, restored at destruction
  device::FakeDevice fake_;
  device::TimedDevice timed_;  // over fake_
  DeviceAllocator alloc_;
  DeviceAllocator::FreeOrder order_;
};

// Replays a plan's ops, one at a time, through a policy: the handle of op.slot's allocation
// lives in a slot until its free. An allocation that fails is recorded and its free skipped.
class OpReplayer {
 public:
  explicit OpReplayer(const Plan& plan) : plan_(plan), slots_(plan.slots, nullptr) {}
  // Replays plan.ops[i]; ops are replayed in order, each once.
  template <typename Policy>
  void apply(std::size_t i, Policy& policy) {
    const ReplayOp& op = plan_.ops[i];
    void*& slot = slots_[op.slot];
    if (op.kind == ReplayOp::alloc) {
      if (!policy.allocate(op.size, op.stream, &slot)) {
        slot = nullptr;
        failed_.push_back(i);
      }
    } else if (slot != nullptr) {
      policy.free(slot);
      slot = nullptr;
    }
  }
  // Frees what is still live (what the trace left live).
  template <typename Policy>
  void release_all(Policy& policy) {
    for (void*& slot : slots_) {
      if (slot != nullptr) policy.free(slot);
      slot = nullptr;
    }
  }
  // The indices in plan.ops of the allocations that failed, ascending.
  const std::vector<std::size_t>& failed() const { return failed_; }

 private:
  const Plan& plan_;
  std::vector<void*> slots_;
  std::vector<std::size_t> failed_;
};

// The most bytes live at once when the allocations of plan.ops[failed[i]] (ascending) and
// their frees never happened: what a replay whose allocations failed had live at its peak.
// plan.peak_live_bytes when `failed` is empty.
std::uint64_t served_peak_live(const Plan& plan, const std::vector<std::size_t>& failed);

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
