// A small test-and-test-and-set lock for the per-device allocator state.
//
// Why not std::mutex: the cached path holds the lock for tens of nanoseconds, and an
// uncontended std::mutex costs about as much again. Under contention waiters spin briefly and
// then yield, so a preempted holder does not burn a core. Satisfies Lockable.
#pragma once

#include <atomic>
#include <thread>

namespace cudalloc {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.load(std::memory_order_relaxed) &&
          !locked_.exchange(true, std::memory_order_acquire)) {
        return;
      }
      if (spins > 64) std::this_thread::yield();
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace cudalloc
