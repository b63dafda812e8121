// History: what torch.cuda.memory._record_memory_history asks an allocator to keep, the
// Python (or C++) stack of each live allocation and a bounded trace of events, for
// torch.cuda.memory._snapshot() and memory_viz. Thread-safe; costs one atomic load per event
// while recording is off.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>

namespace cudalloc::torch_adapter {

namespace cca = c10::cuda::CUDACachingAllocator;

class History {
 public:
  using Context = std::shared_ptr<c10::GatheredContext>;

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void configure(bool enabled, cca::CreateContextFn recorder, std::size_t max_entries,
                 cca::RecordContext when, bool clear);
  // The stack to keep for a new allocation (gathered before any lock is taken), or null.
  Context gather_for_alloc() const;
  Context gather_for_free() const;
  // Records one event; `context` goes with it into the trace and, for an allocation, stays
  // with the live block until it is freed.
  void record(cca::TraceEntry::Action action, c10::DeviceIndex device, std::uintptr_t addr,
              std::size_t size, void* stream, c10::MempoolId_t pool, Context context);
  void attach_tracker(cca::AllocatorTraceTracker tracker);
  // The context of the live allocation at `addr`, or null.
  Context context_of(std::uintptr_t addr) const;
  // Records the free of the allocation at `addr` (free_requested, then free_completed: the
  // core reuses memory in stream order), with the size and stream it was allocated with.
  void record_free(std::uintptr_t addr, Context context);
  // The trace of each device (index = device), in the order events happened, with times
  // converted to microseconds since the epoch as PyTorch's snapshot expects.
  std::vector<std::vector<cca::TraceEntry>> traces(int devices) const;

 private:
  std::atomic<bool> enabled_{false};
  std::atomic<bool> tracked_{false};  // trace trackers are attached
  mutable std::mutex mutex_;
  cca::CreateContextFn recorder_ = nullptr;
  cca::RecordContext when_ = cca::RecordContext::NEVER;
  std::size_t max_entries_ = 0;
  std::deque<cca::TraceEntry> trace_;
  struct Live {
    Context context;
    std::size_t size = 0;
    void* stream = nullptr;
    c10::MempoolId_t pool{0, 0};
    c10::DeviceIndex device = 0;
  };
  std::unordered_map<std::uintptr_t, Live> live_;
  std::vector<cca::AllocatorTraceTracker> trackers_;
  mutable c10::ApproximateClockToUnixTimeConverter clock_;  // makeConverter() is not const
};

}  // namespace cudalloc::torch_adapter
