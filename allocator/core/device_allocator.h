// DeviceAllocator: the caching allocator of one device, a facade over the objects that do the
// work (allocator/core/README.md draws who owns whom):
//   Ledger         stats and trace, from domain events
//   StreamSync     events and the ordering of streams
//   DeferredFrees  frees that wait for other streams or for a fence
//   SlabPool       small requests, from slabs of size classes
//   BlockPool      large requests, best-fit blocks of segments (plain, paged, pinned host)
//   PageMapper     paged segments: pages mapped under blocks in use
//   PhysicalPages  the physical pages of paged segments and their idle lists
//   Staging        extra mappings for moves; Migrator moves live allocations
// The facade owns them, takes the lock, keeps the live-allocation table and runs the OOM
// ladder: cached memory -> fence of device-ordered frees -> release the cache -> host tier ->
// out of memory.
//
// Stream-ordering contract. Memory allocated on stream S is handed out for work on S. When
// it is freed, it becomes reusable at once for S (later work on S runs after earlier work on
// S). It is handed to another stream T only (a) through a wholly free segment moved from S's
// pool to T's, after an event recorded on S at that moment has completed or T has been made
// to wait for it, or (b) after a synchronization of the whole device (OOM path, empty_cache).
// Streams named by record_stream() get an event each at free time; the memory is reused only
// when all of them have completed.
//
// Thread safety: every public method takes this device's lock; devices never share a lock.
// Errors are returned, never thrown. Host memory for metadata is assumed: its exhaustion
// inside a state-changing method is fatal (errors.h, metadata_guard), so no caller ever sees
// a half-changed state.
#pragma once

#include <memory>
#include <string>

#include "core/block_pool.h"
#include "core/budget.h"
#include "core/deferred_frees.h"
#include "core/errors.h"
#include "core/fast_frees.h"
#include "core/ledger.h"
#include "core/live_map.h"
#include "core/migrator.h"
#include "core/page_mapper.h"
#include "core/imported_pages.h"
#include "core/physical_pages.h"
#include "core/private_pools.h"
#include "core/regions.h"
#include "core/request.h"
#include "core/settings.h"
#include "core/size_classes.h"
#include "core/slab_pool.h"
#include "core/spin_lock.h"
#include "core/staging.h"
#include "core/state.h"
#include "core/stream_pool.h"
#include "core/stream_sync.h"
#include "device/device.h"

namespace cudalloc {

class DeviceAllocator final : private FreeCompletion {
 public:
  // The largest request accepted; anything above fails up front.
  static constexpr std::size_t kMaxRequest = std::size_t{1} << 50;
  static constexpr std::size_t kBlockRound = BlockPool::kBlockRound;
  static constexpr std::size_t kStagingPages = Staging::kStagingPages;

  DeviceAllocator(device::Device& device, int ordinal, const Settings& settings);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  int ordinal() const { return ordinal_; }
  // Held across fork() so that the child never inherits a lock taken by another thread.
  void lock_for_fork() { lock_.lock(); }
  void unlock_after_fork() { lock_.unlock(); }

  // How a free is ordered against work that may still use the memory:
  //   stream  reusable at once in the allocation stream's order (PyTorch's contract; other
  //           streams are covered by record_stream)
  //   device  not reused by any work that could run before the work queued on the device
  //           before the free (cudaFree's guarantee), on any stream, seen or not. No device
  //           call at the free. With every stream seen (Settings::streams): while only default
  //           streams exist, reusable at once behind one event on the legacy default stream
  //           that the next allocation queues; else behind a GPU-side fence when an
  //           allocation would need new memory. Where streams may be unseen, the memory waits
  //           until an allocation would need new memory and the waiting frees exceed
  //           kFenceSlack (or 1/32 of reserved memory); then one device synchronization
  //           completes all of them (DeferredFrees::fence).
  enum class FreeOrder { stream, device };
  static constexpr std::size_t kFenceSlack = std::size_t{32} << 20;
  // Private pool ids of allocate_owned_by_capture: this bit and the driver's capture id.
  static constexpr PoolId kCapturePools = PoolId{1} << 63;

  // size 0 gives *ptr = nullptr and ok. `pool` routes the request to a private pool
  // (private_pools.h), which must have been created and not released (else invalid_value).
  Error allocate(std::size_t size, StreamHandle stream, void** ptr, PoolId pool = kSharedPool);
  Error deallocate(void* ptr, FreeOrder order = FreeOrder::stream);
  // Streams the program created and will destroy (the interposer sees both). With every
  // stream seen, a new stream is made to wait for all work queued so far, and fences order
  // it. unregister_stream is called before the driver destroys the stream: its pool, once
  // wholly free, is returned (address ranges and records) after the host waited for it.
  void register_stream(StreamHandle stream);
  void unregister_stream(StreamHandle stream);
  // Forgets everything after waiting for the device: every segment goes back to the driver
  // and every pointer handed out becomes invalid (cudaDeviceReset).
  Error reset();
  // Free and total memory as a program should see them: the device's free memory plus what
  // cudalloc holds unused, within the reserve cap.
  Error memory_info(std::size_t* free_bytes, std::size_t* total_bytes);
  Error record_stream(void* ptr, StreamHandle stream);
  // Returns all cached memory that holds no allocation to the driver, and the address ranges
  // and pools left empty.
  Error empty_cache();
  Error set_memory_fraction(double fraction);
  Error set_memory_limit(std::size_t bytes);
  // The effective cap on reserved bytes (limit and fraction combined; 0 = none).
  std::size_t reserve_cap() const { return budget_.reserve_cap(); }

  // The host tier (migrator.h). Moves the pages under the live allocation `ptr` to host
  // memory (offload) or device memory (prefetch), keeping its address. The copy is queued on
  // `stream` after the work already queued there and on the allocation's stream; the call
  // returns once the allocation is on its new backing. The caller guarantees that no work
  // uses the allocation (or, for a small one, its neighbours on the same pages) meanwhile.
  // On any failure every page is on its old or its new backing, with its bytes: the
  // allocation stays valid. Needs paged mode (not_supported otherwise).
  Error offload(void* ptr, StreamHandle stream);
  Error prefetch(void* ptr, StreamHandle stream);
  // Moves every host page in use back to device memory while the budget has room; ok also
  // when some stay on the host (the stats say how much).
  Error promote();
  // How many bytes of the allocation `ptr` lie in device and in host memory.
  Error residency(const void* ptr, std::size_t* device_bytes, std::size_t* host_bytes) const;

  // For a caller that cannot route a CUDA graph's allocations to a private pool itself
  // (PyTorch's pluggable interface gives no pool calls): an allocation on a stream being
  // captured goes to a private pool of that capture, which is never released, because the
  // caller never says when the graph is gone. The graph's memory stays the graph's for the
  // life of the process (one warning says so). Otherwise as allocate().
  Error allocate_owned_by_capture(std::size_t size, StreamHandle stream, void** ptr);
  // Before a CUDA graph capture begins: pays the event on the legacy stream that frees may
  // owe (DeferredFrees::order_before_reuse), which the capture would forbid.
  void before_capture();
  // Private pools (private_pools.h; private_pools.cpp): create or add a user; drop a user
  // (the last one releases the pool's memory to the shared cache as it becomes free).
  Error create_private_pool(PoolId id);
  Error release_private_pool(PoolId id);
  int private_pool_use_count(PoolId id) const;
  // The live allocations of private pool `id`, in address order.
  Error private_pool_allocations(PoolId id, std::vector<std::uintptr_t>* out) const;
  // A checkpoint of private pool `id` (its live allocations, in address order), and its
  // restore: every live allocation of the pool is freed (their addresses in *freed) and
  // exactly `checkpoint`'s are made live again (private_pools.h). On invalid_value nothing
  // changed.
  Error checkpoint_private_pool(PoolId id, std::vector<PoolAllocation>* out) const;
  Error restore_private_pool(PoolId id, const std::vector<PoolAllocation>& checkpoint,
                             std::vector<std::uintptr_t>* freed);
  // The legacy IPC handle of the plain segment under the live allocation `ptr`, and the
  // allocation's offset in it (PyTorch's shareIpcHandle). not_supported for paged and host
  // memory, which cannot carry one.
  Error ipc_handle(const void* ptr, unsigned char* handle, std::size_t* offset) const;
  // Paged memory shared with another process (ipc.cpp): the physical pages under the live
  // allocation `ptr` as POSIX file descriptors of this process, open while the pages exist.
  // *count is the number of pages; the first min(count, capacity) descriptors go to `fds`.
  // *offset is ptr's offset from the start of the first page. not_supported for plain and
  // host memory (plain memory has ipc_handle) and where the driver cannot export.
  Error share_pages(const void* ptr, std::size_t* page_size, std::size_t* offset, int* fds,
                    std::size_t capacity, std::size_t* count);
  // Maps pages another process shared (share_pages there) at a new range of this process;
  // close_shared_pages unmaps it (imported_pages.h).
  Error open_shared_pages(int pid, const int* fds, std::size_t count, std::size_t page_size,
                          void** base);
  Error close_shared_pages(void* base);
  bool owns_shared_pages(const void* base) const {
    return imported_.owns(reinterpret_cast<std::uintptr_t>(base));
  }
  // Regions (regions.h; regions.cpp): sleep and wake by tag. pause waits for the region's
  // work (its streams when `streams_known`, else the device), then moves its pages to host
  // pages (keep) or drops them, returning its device memory to the driver; resume maps device
  // memory at the same addresses and restores the bytes (zeroes dropped ones). A region this
  // device never saw is ok and nothing happens.
  Error pause_region(RegionId id, bool keep, bool streams_known);
  Error resume_region(RegionId id);
  // Pins now the host memory a pause with keep would copy the region into (within
  // host_limit) and leaves it cached, so that the pause itself only copies: pinning host
  // memory costs about ten times the copy, and more threads do not make it faster on the
  // driver measured (docs/offload.md). It stays cached until used or until empty_cache. On
  // failure (host_limit, the driver) what was pinned stays cached. invalid_value while paused.
  Error prepare_pause(RegionId id);
  // Bytes of the region's segments on the device and on the host (0, 0 when unknown here).
  void region_residency(RegionId id, std::size_t* device_bytes, std::size_t* host_bytes) const;
  bool knows_region(RegionId id) const;
  bool region_paused(RegionId id) const;

  // The largest free block of the shared pools that a request could get without new device
  // memory (in paged mode bounded by the idle physical pages that could back it).
  std::size_t largest_free_block();

  Stats stats() const;
  void reset_peak_stats();
  bool owns(const void* ptr) const;
  // Empty if every invariant holds, else a description of the first violation.
  std::string validate() const;
  // A copy of the whole state (segments, blocks, slabs, stats, trace); see state.h.
  DeviceState state();
  const Settings& settings() const { return settings_; }
  // True when memory comes from virtual ranges with pages mapped on demand.
  bool paged() const { return page_size_ != 0; }

 private:
  static std::size_t device_total_of(device::Device& device, int ordinal);
  // The page size of paged segments: settings.page_size rounded up to a multiple of the
  // driver's granularity, at least one granule; 0 without virtual memory management.
  static std::size_t paged_page_size(const Settings& settings, std::size_t granularity);
  void complete_free(Owner owner, std::uintptr_t addr) override;
  Error try_allocate(StreamPool& pool, const Request& request, std::uintptr_t* addr,
                     Owner* owner);
  Error allocate_locked(std::size_t size, StreamHandle stream, std::uintptr_t* addr,
                        Owner* owner);
  Error allocate_private(std::size_t size, StreamHandle stream, PoolId id, std::uintptr_t* addr,
                         Owner* owner);
  // A released private pool's wholly free segments join the shared pools (private_pools.h).
  void return_released_segments(StreamPool& pool);
  // The plain segment of private pool `id` that holds [addr, addr + size), or nullptr.
  Segment* private_segment_of(PoolId id, std::uintptr_t addr, std::size_t size) const;
  void forget_if_empty(PoolId id);
  // Regions (regions.cpp). A new private pool `id` belongs to the calling thread's current
  // region, if any; route_to_region gives a request of the shared pools the current
  // region's own pool instead.
  void tag_new_pool(PoolId id);
  PoolId route_to_region(PoolId pool);
  std::vector<Segment*> region_segments(RegionId id) const;
  Error wait_for_region(RegionId id, bool streams_known);
  // Whether `segments` (region `tag`'s) can be paused (held, not shared) and, with `keep`,
  // kept within host_limit; `what` names the operation in the error message.
  Error check_pausable(const std::string& tag, const std::vector<Segment*>& segments, bool keep,
                       const char* what) const;
  Error keep_on_host(const std::vector<Segment*>& segments);
  Error drop_pages(Segment& seg);
  Error rehold_dropped(Segment& seg, bool* zeroed);
  Error restore_pages(const std::vector<Segment*>& segments);
  // empty_cache: wholly free held segments of regions' own pools (not paused) and of
  // released pools go back to the driver.
  void release_held_segments();
  // Whether the device-ordered frees waiting are worth a device synchronization now.
  bool fence_due() const;
  // Serves a request that found no device room from the host tier.
  Error spill(StreamPool& pool, Request request, std::uintptr_t* addr, Owner* owner);
  // A request that failed for lack of memory: counted (stats, trace) and noted for the entry
  // point (errors.h, last_out_of_memory). Returns the device's free memory as the driver
  // reports it, and its total in *total (may be NULL); 0 for what the driver cannot say.
  std::size_t count_out_of_memory(std::size_t size, StreamHandle stream, std::size_t* total);
  // Counts the failure as above and formats its message (what is allocated, reserved, cached,
  // the cap, the device's free memory); returns out_of_memory.
  Error out_of_memory(std::size_t size, StreamHandle stream);
  Error move(void* ptr, device::Location to, StreamHandle stream);
  Error span_of(const void* ptr, AllocationSpan* out) const;
  // Waits for pending frees, returns empty slabs to the block pool and every wholly free
  // plain segment to the driver. Idle pages are kept: a request can take them anyway.
  void release_cached_memory();
  // Frees of blocks kept whole for a same-size allocation (fast_frees.h). keep_fast: whether
  // the completed free of `owner` may wait there (then it does). settle_fast_frees: frees every
  // kept block for real; every operation but a hit and a free calls it before it looks at or
  // changes the pools.
  bool keep_fast(Owner owner, std::uintptr_t addr);
  void settle_fast_frees();
  // Returns the pool of a destroyed stream when it holds nothing (unregister_stream).
  void release_pool(StreamHandle stream);
  // Returns every segment to the driver and forgets all state (destructor, reset).
  void drop_everything();
  void check_after_operation(const char* operation) const;
  std::string validate_locked() const;

  device::Device& device_;
  const int ordinal_;
  Settings settings_;
  const std::size_t page_size_;  // paged_page_size() when paged, else 0
  SizeClasses classes_;
  const Budget budget_;
  mutable SpinLock lock_;
  Ledger ledger_;
  StreamSync sync_;
  StreamPools pools_;
  LiveMap live_;
  Staging staging_;
  PhysicalPages physical_;
  PageMapper mapper_;
  ImportedPages imported_;  // memory of other processes mapped here (its own lock)
  BlockPool blocks_;
  FastFrees fast_;
  SlabPool slabs_;
  Migrator migrator_;
  DeferredFrees deferred_;
  PrivatePools private_;
  Regions regions_;
  std::vector<StreamHandle> created_streams_;
};

}  // namespace cudalloc
