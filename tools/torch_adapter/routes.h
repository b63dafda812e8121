// Routes: which private pool a PyTorch allocation goes to. PyTorch names pools by a
// MempoolId_t pair and routes with filters on the stream (beginAllocateToPool: a CUDA graph's
// capture, or use_mem_pool's thread); cudalloc's core names them by a nonzero integer.
// Thread-safe; while no route is active, lookup costs one atomic load.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>

namespace cudalloc::torch_adapter {

namespace cca = c10::cuda::CUDACachingAllocator;

class Routes {
 public:
  using Filter = std::function<bool(cudaStream_t)>;
  struct Target {
    std::uint64_t key = 0;  // 0: the shared pools
    c10::MempoolId_t id{0, 0};
    std::shared_ptr<cca::CUDAAllocator> external;  // MemPool(allocator=...): its allocator
  };

  // The core's key of pool `id` (assigned on first use).
  std::uint64_t key_of(c10::MempoolId_t id);
  // The PyTorch id of core key `key` ({0, 0} for 0 or unknown).
  c10::MempoolId_t id_of(std::uint64_t key) const;
  void set_external(c10::MempoolId_t id, std::shared_ptr<cca::CUDAAllocator> allocator);
  std::shared_ptr<cca::CUDAAllocator> external_of(c10::MempoolId_t id) const;

  void begin(c10::DeviceIndex device, c10::MempoolId_t id, Filter filter);
  // false when no route to `id` was active on `device`.
  bool end(c10::DeviceIndex device, c10::MempoolId_t id);
  // The pool the allocation of `device` on `stream` goes to: the most recent active route
  // whose filter accepts the stream, as PyTorch's own allocator chooses.
  Target route(c10::DeviceIndex device, cudaStream_t stream) const;
  bool any_active() const { return active_.load(std::memory_order_acquire) != 0; }

 private:
  struct Active {
    c10::DeviceIndex device;
    c10::MempoolId_t id;
    Filter filter;
  };
  mutable std::mutex mutex_;
  std::atomic<int> active_{0};
  std::vector<Active> routes_;
  std::map<c10::MempoolId_t, std::uint64_t> keys_;
  std::map<std::uint64_t, c10::MempoolId_t> ids_;
  std::map<c10::MempoolId_t, std::shared_ptr<cca::CUDAAllocator>> externals_;
  std::uint64_t next_key_ = 1;
};

}  // namespace cudalloc::torch_adapter
