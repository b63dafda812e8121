// Captures: the CUDA-graph captures underway in the process, as the interposer sees them begin
// and end (cuStreamBeginCapture / cuStreamEndCapture and the runtime's forms).
//
// Why the core asks: while a capture is underway, a device-wide synchronization ends it with
// an error (global capture mode: any thread's), and a fence's events and stream waits on a
// capturing stream would join the graph. So meanwhile nothing fences device-ordered frees
// and the out-of-memory path does not release the cache: memory that waits for a fence stays
// out of use, and requests take new memory instead. Once the last capture ends, the next
// allocation that needs it fences as usual. Process-wide because capture mode is.
// Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cudalloc {

class Captures {
 public:
  static Captures& process() {
    static Captures* captures = new Captures;  // immortal: used until the process exits
    return *captures;
  }
  // A capture of `stream` began (the driver accepted it).
  void began(std::uintptr_t stream) {
    std::lock_guard lock(mutex_);
    streams_.push_back(stream);
    count_.store(static_cast<int>(streams_.size()), std::memory_order_release);
  }
  // The capture of `stream` ended (successfully or not); unknown streams are ignored.
  void ended(std::uintptr_t stream) {
    std::lock_guard lock(mutex_);
    auto it = std::find(streams_.begin(), streams_.end(), stream);
    if (it == streams_.end()) return;
    streams_.erase(it);
    count_.store(static_cast<int>(streams_.size()), std::memory_order_release);
  }
  bool underway() const { return count_.load(std::memory_order_acquire) != 0; }

 private:
  Captures() = default;
  mutable std::mutex mutex_;
  std::vector<std::uintptr_t> streams_;
  std::atomic<int> count_{0};
};

}  // namespace cudalloc
