// TorchAllocator: allocation, free and private pools (adapter.h).
#include "adapter.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cudalloc::torch_adapter {
namespace {

std::atomic<TorchAllocator*> g_installed{nullptr};

void raw_delete_fn(void* ptr) {
  if (TorchAllocator* a = TorchAllocator::instance()) a->raw_delete(ptr);
}

std::string format_size(std::size_t bytes) {
  char buf[64];
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

void check(cudalloc_error_t e, const char* what) {
  TORCH_CHECK(e == CUDALLOC_SUCCESS, "cudalloc: ", what, " failed: ",
              cudalloc_last_error_string());
}

}  // namespace

TorchAllocator::TorchAllocator() { g_installed.store(this); }

TorchAllocator* TorchAllocator::instance() { return g_installed.load(); }

c10::DeleterFnPtr TorchAllocator::raw_deleter() const { return &raw_delete_fn; }

c10::DataPtr TorchAllocator::allocate(size_t size) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  void* p = malloc_on(device, size, stream);
  return {p, p, &raw_delete_fn, c10::Device(c10::DeviceType::CUDA, device)};
}

void* TorchAllocator::raw_alloc(size_t nbytes) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  return malloc_on(device, nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* TorchAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  return malloc_on(c10::cuda::current_device(), nbytes, stream);
}

void* TorchAllocator::malloc_on(c10::DeviceIndex device, size_t size, cudaStream_t stream) {
  if (size == 0) return nullptr;  // as PyTorch's own allocator: no memory, a null pointer
  const Routes::Target target = routes_.route(device, stream);
  History::Context context = history_.gather_for_alloc();
  void* p = nullptr;
  if (target.external != nullptr) {
    // MemPool(allocator=...): that allocator serves the pool, as in PyTorch.
    p = target.external->raw_alloc_with_stream(size, stream);
    std::lock_guard lock(mutex_);
    external_ptrs_[p] = target.external;
    any_external_.store(true);
  } else {
    const cudalloc_error_t e = cudalloc_allocate_in_pool(&p, size, device, stream, target.key);
    if (e == CUDALLOC_ERROR_MEMORY_ALLOCATION) {
      raise_out_of_memory(device, size, stream, target.id);
    }
    check(e, "allocation");
  }
  history_.record(cca::TraceEntry::ALLOC, device, reinterpret_cast<std::uintptr_t>(p), size,
                  stream, target.id, std::move(context));
  if (c10::memoryProfilingEnabled()) report_to_profiler(p, static_cast<std::int64_t>(size), device);
  return p;
}

void TorchAllocator::raise_out_of_memory(c10::DeviceIndex device, size_t size,
                                         cudaStream_t stream, c10::MempoolId_t pool) {
  const std::string detail = cudalloc_last_error_string();
  std::size_t free_bytes = 0, total = 0;
  cudalloc_memory_info(device, &free_bytes, &total);
  cudalloc_stats_t stats{};
  cudalloc_get_stats(device, &stats);
  // allocated_bytes is entry 0 of stats_fields.h, whose positions never change.
  const auto allocated = static_cast<std::size_t>(stats.values[0].current);
  history_.record(cca::TraceEntry::OOM, device, free_bytes, size, stream, pool, nullptr);
  std::vector<cca::OutOfMemoryObserver> observers;
  {
    std::lock_guard lock(mutex_);
    observers = oom_observers_;
  }
  for (const auto& observer : observers) observer(device, allocated, total, free_bytes);
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ",
                   format_size(size), ". GPU ", static_cast<int>(device),
                   " has a total capacity of ", format_size(total), " of which ",
                   format_size(free_bytes), " is free. cudalloc: ", detail);
}

void* TorchAllocator::external_free_target(void* ptr,
                                           std::shared_ptr<cca::CUDAAllocator>* owner) {
  if (!any_external_.load()) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = external_ptrs_.find(ptr);
  if (it == external_ptrs_.end()) return nullptr;
  *owner = std::move(it->second);
  external_ptrs_.erase(it);
  return ptr;
}

void TorchAllocator::raw_delete(void* ptr) {
  if (ptr == nullptr) return;
  // Deleters run in destructors, also at exit after the CUDA runtime shut down: nothing here
  // may throw. The bookkeeping is best effort; the free itself is a C call.
  try {
    History::Context context = history_.gather_for_free();
    std::shared_ptr<cca::CUDAAllocator> external;
    if (external_free_target(ptr, &external) != nullptr) {
      external->raw_delete(ptr);
      return;
    }
    if (c10::memoryProfilingEnabled()) {
      std::size_t on_device = 0, on_host = 0;
      if (cudalloc_residency(ptr, &on_device, &on_host) == CUDALLOC_SUCCESS) {
        report_to_profiler(ptr, -static_cast<std::int64_t>(on_device + on_host),
                           c10::cuda::current_device());
      }
    }
    history_.record_free(reinterpret_cast<std::uintptr_t>(ptr), std::move(context));
  } catch (...) {
  }
  if (cudalloc_deallocate(ptr, -1) != CUDALLOC_SUCCESS) {
    std::fprintf(stderr, "[cudalloc warning] free of %p failed: %s\n", ptr,
                 cudalloc_last_error_string());
  }
}

void TorchAllocator::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  if (ptr.get() == nullptr) return;
  if (any_external_.load()) {  // the lock only once a MemPool(allocator=...) was used
    std::lock_guard lock(mutex_);
    if (external_ptrs_.count(ptr.get()) != 0) return;
  }
  check(cudalloc_record_stream(ptr.get(), stream.stream()), "record_stream");
}

void TorchAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

void TorchAllocator::init(int device_count) {
  device_count_ = device_count;
  initialized_.store(true);
}

void TorchAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  // A private pool keeps its memory while it has users (a graph replays into it); once
  // released, its memory is in the shared cache, which this empties.
  if (mempool_id.first != 0 || mempool_id.second != 0) return;
  check(cudalloc_empty_cache(-1), "empty_cache");
}

double TorchAllocator::getMemoryFraction(c10::DeviceIndex device) {
  double fraction = 1.0;
  check(cudalloc_get_memory_fraction(device, &fraction), "get_memory_fraction");
  return fraction;
}

void TorchAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(fraction > 0.0 && fraction <= 1.0, "invalid fraction: ", fraction,
              ". Please set within (0, 1].");
  check(cudalloc_set_memory_fraction(fraction, device), "set_memory_fraction");
}

// ---- Private pools ------------------------------------------------------------------

void TorchAllocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                        std::shared_ptr<cca::CUDAAllocator> allocator) {
  if (allocator != nullptr) routes_.set_external(mempool_id, std::move(allocator));
  check(cudalloc_pool_create(routes_.key_of(mempool_id), device), "creating a private pool");
}

void TorchAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                         std::function<bool(cudaStream_t)> filter) {
  // As PyTorch's allocator: routing to a pool adds a user to it (released by releasePool).
  check(cudalloc_pool_create(routes_.key_of(mempool_id), device), "creating a private pool");
  routes_.begin(device, mempool_id, std::move(filter));
}

void TorchAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  routes_.end(device, mempool_id);
}

void TorchAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  check(cudalloc_pool_release(routes_.key_of(mempool_id), device), "releasing a private pool");
}

int TorchAllocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  int count = 0;
  check(cudalloc_pool_use_count(routes_.key_of(mempool_id), device, &count), "pool use count");
  return count;
}

bool TorchAllocator::checkPoolLiveAllocations(c10::DeviceIndex device,
                                              c10::MempoolId_t mempool_id,
                                              const std::unordered_set<void*>& expected) {
  const std::uint64_t key = routes_.key_of(mempool_id);
  std::size_t count = 0;
  check(cudalloc_pool_allocations(key, device, nullptr, 0, &count), "pool allocations");
  std::vector<void*> live(count + 16);
  check(cudalloc_pool_allocations(key, device, live.data(), live.size(), &count),
        "pool allocations");
  if (count > live.size() || count != expected.size()) return false;
  for (std::size_t i = 0; i < count; ++i) {
    if (expected.count(live[i]) == 0) return false;
  }
  return true;
}

namespace {

// A checkpoint of a private pool (cudagraph trees): the core's list of its live allocations.
struct PoolCheckpoint final : cca::AllocatorState {
  std::uint64_t key = 0;
  std::vector<cudalloc_pool_allocation_t> allocations;
};

}  // namespace

std::shared_ptr<cca::AllocatorState> TorchAllocator::getCheckpointState(
    c10::DeviceIndex device, c10::MempoolId_t id) {
  auto checkpoint = std::make_shared<PoolCheckpoint>();
  checkpoint->key = routes_.key_of(id);
  std::size_t count = 0;
  check(cudalloc_pool_checkpoint(checkpoint->key, device, nullptr, 0, &count),
        "checkpointing a private pool");
  checkpoint->allocations.resize(count);
  check(cudalloc_pool_checkpoint(checkpoint->key, device, checkpoint->allocations.data(), count,
                                 &count),
        "checkpointing a private pool");
  checkpoint->allocations.resize(count);
  return checkpoint;
}

cca::CheckpointDelta TorchAllocator::setCheckpointPoolState(
    c10::DeviceIndex device, std::shared_ptr<cca::AllocatorState> state) {
  auto checkpoint = std::dynamic_pointer_cast<PoolCheckpoint>(state);
  TORCH_CHECK(checkpoint != nullptr, "cudalloc: a checkpoint of another allocator");
  std::size_t live = 0;
  check(cudalloc_pool_allocations(checkpoint->key, device, nullptr, 0, &live),
        "restoring a private pool");
  cca::CheckpointDelta delta;
  delta.ptrs_freed.resize(live);
  std::size_t freed = 0;
  check(cudalloc_pool_restore(checkpoint->key, device, checkpoint->allocations.data(),
                              checkpoint->allocations.size(), delta.ptrs_freed.data(),
                              delta.ptrs_freed.size(), &freed),
        "restoring a private pool");
  delta.ptrs_freed.resize(freed);
  const c10::Device where(c10::DeviceType::CUDA, device);
  for (const cudalloc_pool_allocation_t& a : checkpoint->allocations) {
    delta.dataptrs_allocd.emplace_back(a.ptr, a.ptr, &raw_delete_fn, where);
  }
  return delta;
}

// ---- Peers, copies, IPC -------------------------------------------------------------

void TorchAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  // cudalloc's paged memory is mapped for every peer the driver allows (device layer);
  // this enables peer access for memory of the runtime's own kind.
  c10::cuda::CUDAGuard guard(dev);
  const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else {
    C10_CUDA_CHECK(err);
  }
}

cudaError_t TorchAllocator::memcpyAsync(void* dst, int dstDevice, const void* src,
                                        int srcDevice, size_t count, cudaStream_t stream,
                                        bool p2p_enabled) {
  if (p2p_enabled || dstDevice == srcDevice) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

// PyTorch's wire format of a shareable handle (its CUDACachingAllocator): a version byte (2),
// a type byte, then the type's payload; from older versions, the 64 bytes of a legacy handle
// alone. The two types cudalloc writes are PyTorch's own, so a process under PyTorch's
// allocator opens them, and cudalloc opens PyTorch's:
//   'c'  memory of cudaMalloc (cudalloc's plain segments): a cudaIpcMemHandle_t;
//   'e'  expandable segments (cudalloc's paged memory): ShareHeader{pid, page size, pages},
//        then one int per page, the exporter's POSIX file descriptor of it, which the
//        receiver takes over with pidfd_getfd. The offset is from the first page's start.
constexpr char kHandleVersion = 2;
constexpr char kHandleCudaMalloc = 'c';
constexpr char kHandlePages = 'e';

// PyTorch's ExpandableSegment::ShareHeader, field for field (native layout).
struct ShareHeader {
  pid_t pid;
  size_t segment_size;
  size_t num_handles;
};

namespace {

// The 'e' handle of paged memory at `ptr`; its offset from the first shared page in *offset.
std::string share_pages(void* ptr, std::size_t* offset) {
  std::size_t page_size = 0, count = 0;
  check(cudalloc_ipc_share_pages(ptr, &page_size, offset, nullptr, 0, &count),
        "sharing a CUDA tensor with another process (CUDA IPC)");
  std::vector<int> fds(count);
  check(cudalloc_ipc_share_pages(ptr, &page_size, offset, fds.data(), fds.size(), &count),
        "sharing a CUDA tensor with another process (CUDA IPC)");
  TORCH_CHECK(count == fds.size(), "cudalloc: the tensor's memory changed while it was shared");
  const ShareHeader header{getpid(), page_size, count};
  std::string wire{kHandleVersion, kHandlePages};
  wire.append(reinterpret_cast<const char*>(&header), sizeof header);
  wire.append(reinterpret_cast<const char*>(fds.data()), fds.size() * sizeof(int));
  return wire;
}

}  // namespace

cca::ShareableHandle TorchAllocator::shareIpcHandle(void* ptr) {
  char handle[CUDALLOC_IPC_HANDLE_BYTES];
  std::size_t offset = 0;
  const cudalloc_error_t plain = cudalloc_ipc_handle(ptr, handle, &offset);
  if (plain == CUDALLOC_ERROR_NOT_SUPPORTED) {  // paged memory: shared by its pages
    std::string wire = share_pages(ptr, &offset);
    return {static_cast<ptrdiff_t>(offset), std::move(wire)};
  }
  check(plain, "sharing a CUDA tensor with another process (CUDA IPC)");
  std::string wire{kHandleVersion, kHandleCudaMalloc};
  wire.append(handle, sizeof handle);
  return {static_cast<ptrdiff_t>(offset), std::move(wire)};
}

void* TorchAllocator::open_pages(const std::string& handle) {
  ShareHeader header{};
  TORCH_CHECK(handle.size() >= 2 + sizeof header, "cudalloc: truncated CUDA IPC handle");
  std::memcpy(&header, handle.data() + 2, sizeof header);
  TORCH_CHECK(header.num_handles > 0 &&
                  (handle.size() - 2 - sizeof header) % sizeof(int) == 0 &&
                  header.num_handles == (handle.size() - 2 - sizeof header) / sizeof(int),
              "cudalloc: malformed CUDA IPC handle of expandable segments (",
              header.num_handles, " pages in ", handle.size(), " bytes)");
  std::vector<int> fds(header.num_handles);
  std::memcpy(fds.data(), handle.data() + 2 + sizeof header, fds.size() * sizeof(int));
  void* base = nullptr;
  check(cudalloc_ipc_open_pages(header.pid, fds.data(), fds.size(), header.segment_size, -1,
                                &base),
        "opening a CUDA tensor of another process (CUDA IPC)");
  return base;
}

std::shared_ptr<void> TorchAllocator::getIpcDevPtr(std::string handle) {
  std::lock_guard lock(ipc_mutex_);
  if (auto it = ipc_opened_.find(handle); it != ipc_opened_.end()) {
    if (auto open = it->second.lock()) return open;  // one mapping per handle, as CUDA wants
  }
  const bool legacy = handle.size() == CUDA_IPC_HANDLE_SIZE;
  TORCH_CHECK(legacy || (handle.size() >= 2 && handle[0] == kHandleVersion),
              "cudalloc: unknown CUDA IPC handle format (", handle.size(), " bytes)");
  const char type = legacy ? kHandleCudaMalloc : handle[1];
  TORCH_CHECK(type == kHandleCudaMalloc || type == kHandlePages,
              "cudalloc: unknown CUDA IPC handle type '", type, "'");
  void* ptr = nullptr;
  if (type == kHandlePages) {
    ptr = open_pages(handle);
  } else {
    TORCH_CHECK(legacy || handle.size() == 2 + CUDA_IPC_HANDLE_SIZE,
                "cudalloc: malformed CUDA IPC handle (", handle.size(), " bytes)");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data() + (legacy ? 0 : 2), CUDA_IPC_HANDLE_SIZE);
    C10_CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess));
  }
  std::shared_ptr<void> open(ptr, [this, handle, type](void* p) {
    std::lock_guard inner(ipc_mutex_);
    if (auto it = ipc_opened_.find(handle); it != ipc_opened_.end() && it->second.expired()) {
      ipc_opened_.erase(it);
    }
    if (type == kHandlePages) {
      if (cudalloc_ipc_close_pages(p) != CUDALLOC_SUCCESS) {
        TORCH_WARN("cudalloc: closing memory of another process: ", cudalloc_last_error_string());
      }
    } else {
      C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(p));
    }
  });
  ipc_opened_[handle] = open;
  return open;
}

// ---- History and observers ------------------------------------------------------------

void TorchAllocator::recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                                   size_t alloc_trace_max_entries, cca::RecordContext when,
                                   bool clearHistory, const std::vector<std::string>&) {
  history_.configure(enabled, context_recorder, alloc_trace_max_entries, when, clearHistory);
}

void TorchAllocator::attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) {
  std::lock_guard lock(mutex_);
  oom_observers_.push_back(std::move(observer));
}

void TorchAllocator::attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) {
  history_.attach_tracker(std::move(tracker));
}

}  // namespace cudalloc::torch_adapter
