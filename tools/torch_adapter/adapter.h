// TorchAllocator: PyTorch's CUDAAllocator interface over cudalloc's C API. It only
// translates: every policy (private pools, the largest free block, stats, OOM) lives in the
// core and is tested there on the fake device. Installed by cudalloc_torch_install()
// (install.cpp), in place of PyTorch's own caching allocator, before CUDA is first used.
//
// What it keeps itself: the routes of allocations to private pools (routes.h), the stacks
// and trace torch.cuda.memory._record_memory_history asks for (history.h), the OOM
// observers, and baselines for resetAccumulatedStats.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>

#include "cudalloc.h"
#include "history.h"
#include "routes.h"

namespace cudalloc::torch_adapter {

namespace cca = c10::cuda::CUDACachingAllocator;

class TorchAllocator final : public cca::CUDAAllocator {
 public:
  TorchAllocator();
  static TorchAllocator* instance();  // the installed one (immortal), or null

  // c10::Allocator
  c10::DataPtr allocate(size_t size) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // c10::DeviceAllocator
  bool initialized() override { return initialized_.load(); }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  cca::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
  // CUDAAllocator
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override {
    return {};
  }
  void enable(bool value) override { enabled_ = value; }
  bool isEnabled() const override { return enabled_; }
  void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  cca::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex, c10::MempoolId_t, bool) override {}
  void setNoSplit(c10::DeviceIndex, c10::MempoolId_t) override {}
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected) override;
  cca::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override { return history_.enabled(); }
  void recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                     size_t alloc_trace_max_entries, cca::RecordContext when,
                     bool clearHistory, const std::vector<std::string>& skip_actions) override;
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                          size_t count, cudaStream_t stream, bool p2p_enabled) override;
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::MempoolId_t id) override;
  cca::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) override;
  std::string name() override { return "cudalloc"; }

 private:
  void* malloc_on(c10::DeviceIndex device, size_t size, cudaStream_t stream);
  [[noreturn]] void raise_out_of_memory(c10::DeviceIndex device, size_t size,
                                        cudaStream_t stream, c10::MempoolId_t pool);
  void report_to_profiler(void* ptr, std::int64_t delta, c10::DeviceIndex device);
  void* external_free_target(void* ptr, std::shared_ptr<cca::CUDAAllocator>* owner);

  std::atomic<bool> initialized_{false};
  bool enabled_ = true;
  int device_count_ = 0;
  Routes routes_;
  History history_;
  std::mutex mutex_;  // observers, baselines, externally allocated pointers
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::unordered_map<int, cudalloc_stats_t> baselines_;
  // Maps the pages of an 'e' handle (shareIpcHandle's wire format); their base.
  void* open_pages(const std::string& handle);
  std::mutex ipc_mutex_;  // handles opened from other processes, shared by their tensors
  std::unordered_map<std::string, std::weak_ptr<void>> ipc_opened_;
  std::atomic<bool> any_external_{false};
  std::unordered_map<void*, std::shared_ptr<cca::CUDAAllocator>> external_ptrs_;
};

}  // namespace cudalloc::torch_adapter
