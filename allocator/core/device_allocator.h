// DeviceAllocator: the caching allocator of one device.
//
// Requests up to settings.slab_max come from slabs (one size class per slab); larger ones
// from best-fit blocks that split and coalesce within segments. Both are kept per stream:
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
// Errors are returned, never thrown, except std::bad_alloc from host metadata, which the
// C API turns into an error code.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "core/live_map.h"
#include "core/pool_types.h"
#include "core/stream_pool.h"
#include "core/settings.h"
#include "core/size_classes.h"
#include "core/spin_lock.h"
#include "core/state.h"
#include "core/stats.h"
#include "core/trace.h"
#include "device/device.h"

namespace cudalloc {

class DeviceAllocator {
 public:
  // The largest request accepted; anything above fails with invalid_value up front.
  static constexpr std::size_t kMaxRequest = std::size_t{1} << 50;
  static constexpr std::size_t kBlockRound = 512;
  // Pages a migration copies per host wait: the size of its staging range.
  static constexpr std::size_t kStagingPages = 32;

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
  //           before the free (cudaFree's guarantee), on any stream. No device call at the
  //           free. While only the default streams exist, their own ordering suffices and
  //           the memory is reusable at once; with registered streams, freed memory waits
  //           until an allocation would otherwise need new memory, then one fence orders
  //           every stream after all of them (fence_device_ordered_frees) and it is reused.
  enum class FreeOrder { stream, device };

  // size 0 gives *ptr = nullptr and ok.
  Error allocate(std::size_t size, StreamHandle stream, void** ptr);
  Error deallocate(void* ptr, FreeOrder order = FreeOrder::stream);
  // Streams created by the program (besides the default ones) that device-ordered frees must
  // be ordered against. A new stream is made to wait for all work queued so far. Streams are
  // unregistered before they are destroyed.
  void register_stream(StreamHandle stream);
  void unregister_stream(StreamHandle stream);
  // Forgets everything after waiting for the device: every segment goes back to the driver
  // and every pointer handed out becomes invalid (cudaDeviceReset).
  Error reset();
  // Free and total memory as a program should see them: the device's free memory plus what
  // cudalloc holds unused, within the reserve cap.
  Error memory_info(std::size_t* free_bytes, std::size_t* total_bytes);
  Error record_stream(void* ptr, StreamHandle stream);
  // Returns all cached memory that holds no allocation to the driver.
  Error empty_cache();
  Error set_memory_fraction(double fraction);
  Error set_memory_limit(std::size_t bytes);
  // The effective cap on reserved bytes (limit and fraction combined; 0 = none).
  std::size_t reserve_cap() const;

  // The host tier (migration.cpp). Moves the pages under the live allocation `ptr` to host
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

  Stats stats() const;
  void reset_peak_stats();
  bool owns(const void* ptr) const;
  // Empty if every invariant holds, else a description of the first violation.
  std::string validate() const;
  // A copy of the whole state (segments, blocks, slabs, stats, trace); see state.h.
  DeviceState state() const;
  const Settings& settings() const { return settings_; }
  // True when memory comes from virtual ranges with pages mapped on demand.
  bool paged() const { return page_size_ != 0; }

 private:
  // LiveEntry::owner tagging: Block* (large) or Slab* | kSlabTag.
  static constexpr std::uintptr_t kSlabTag = 1;
  static constexpr std::uintptr_t kHasStreamUses = 2;
  static constexpr std::uintptr_t kTagMask = 3;

  StreamPool& pool_for(StreamHandle stream);
  // The rounded size and the allocation stream of a live or pending allocation.
  static std::size_t rounded_size(std::uintptr_t owner) {
    return (owner & kSlabTag) ? reinterpret_cast<const Slab*>(owner & ~kTagMask)->object_size
                              : reinterpret_cast<const Block*>(owner & ~kTagMask)->size;
  }
  static StreamHandle stream_of(std::uintptr_t owner) {
    return (owner & kSlabTag)
               ? reinterpret_cast<const Slab*>(owner & ~kTagMask)->pool->stream
               : reinterpret_cast<const Block*>(owner & ~kTagMask)->segment->pool->stream;
  }

  // slab_pool.cpp
  Error allocate_small(StreamPool& pool, std::size_t size, std::uintptr_t* addr, Slab** slab);
  Slab* new_slab(StreamPool& pool, int cls);
  void free_small(Slab* slab, std::uintptr_t addr);
  void release_slab(Slab* slab);
  void release_empty_slabs();

  // block_pool.cpp
  Error allocate_large(StreamPool& pool, std::size_t size, bool slab, Block** out);
  Block* take_free_block(StreamPool& pool, std::size_t size);
  Block* steal_segment(StreamPool& pool, std::size_t size);
  Error new_segment(StreamPool& pool, std::size_t size, bool slab, Block** out);
  void order_after_stream(StreamHandle earlier, StreamHandle later);
  void insert_free(StreamPool& pool, Block* block);
  void erase_free(StreamPool& pool, Block* block);
  // Block records come from a free list: splitting and merging allocate nothing.
  Block* new_block();
  void recycle_block(Block* block);
  std::size_t segment_size_for(std::size_t size, bool slab) const;
  void split(StreamPool& pool, Block* block, std::size_t size);
  void free_block(Block* block);
  // Inserts a free block into its pool's free bins, merged with free neighbours.
  void merge_free(Block* block);
  // Returns every wholly free plain segment to the driver, or (pinned) every wholly free
  // pinned host segment of the host tier, after one device synchronization.
  std::size_t release_free_segments(bool pinned);

  // page_pool.cpp: paged segments (virtual ranges with pages mapped on demand).
  Error new_paged_segment(StreamPool& pool, std::size_t size, Segment** out);
  // Adds the block [addr, addr + size) as a user of its pages; each page that gains its first
  // user gets a physical page it owns. On failure no page gains a user.
  Error use_pages(Segment* seg, std::uintptr_t addr, std::size_t size);
  // Removes one user from each page of [addr, addr + size); physical pages left without an
  // owner become idle.
  void unuse_pages(Segment* seg, std::uintptr_t addr, std::size_t size);
  void drop_page_user(Page& page);
  Error claim_page(Page& page);
  // Gives `page`, mapped to an idle host page, device memory instead (not while spilling).
  Error replace_host_page(Page& page, PhysicalPage** out);
  // conflict: the page's physical page serves another page; chronic: that happened to the
  // page kChronicConflicts times or more.
  static constexpr int kChronicConflicts = 2;
  static constexpr double kChronicShare = 0.25;  // of page_slack
  Error acquire_physical(bool conflict, bool chronic, PhysicalPage** out);
  Error map_physical(Page& page, PhysicalPage& phys);
  // map_physical without the access grant (the caller grants it, maybe for many pages).
  Error attach_physical(Page& page, PhysicalPage& phys);
  Error grant_access(Page& page);
  Error unmap_page(Page& page);
  bool wait_until_settled(StreamPool& pool, std::uint64_t epoch);
  // Idle physical pages of one location, in the order they became idle.
  struct IdleList {
    PhysicalPage* head = nullptr;
    PhysicalPage* tail = nullptr;
    std::size_t count = 0;
  };
  IdleList& idle_of(const PhysicalPage& phys) { return phys.host ? host_idle_ : device_idle_; }
  void idle_push(PhysicalPage& phys);
  void idle_remove(PhysicalPage& phys);
  // Ownership changes go through these: they keep host_active_bytes.
  void set_owner(PhysicalPage& phys, Page* page);
  void clear_owner(PhysicalPage& phys);
  // A host page for the host tier: an idle one, else new within host_limit.
  Error acquire_host_page(PhysicalPage** out);
  Error create_page(device::Location where, PhysicalPage** out);
  std::uintptr_t page_address(const Page& page) const;
  // Unmaps every page without users and returns every idle physical page to the driver.
  std::size_t release_cached_pages();
  // Returns an idle physical page mapped nowhere to the driver; false (and kept) on failure.
  bool release_physical_page(PhysicalPage* phys);
  // Unmaps every page of the segment and returns its address range (drop_everything).
  void drop_paged_segment(Segment* seg);

  // migration.cpp
  Error move_allocation(void* ptr, StreamHandle stream, bool to_host);
  // Moves the pages of `pages` (all with users, of one segment) whose location differs.
  Error move_pages(std::vector<Page*> pages, bool to_host, StreamHandle stream);
  Error move_batch(const std::vector<Page*>& pages, bool to_host, StreamHandle stream);
  Error stage_batch(const std::vector<PhysicalPage*>& fresh, std::size_t* staged);
  void unstage(std::size_t staged);
  // The address each new page is written at (mapping staging slots where needed), after
  // ordering `stream` behind the new pages' last users.
  Error prepare_targets(const std::vector<PhysicalPage*>& fresh, StreamHandle stream,
                        std::vector<std::uintptr_t>& targets, std::size_t* staged);
  Error copy_pages(const std::vector<Page*>& pages, const std::vector<std::uintptr_t>& targets,
                   StreamHandle stream);
  // Host pages keep a mapping of their own ("home"), so that moves write them without staging.
  void map_home(PhysicalPage& phys);
  void unmap_home(PhysicalPage& phys);
  // Retries unmapping the staging and home pages whose unmap failed, and returns retired
  // staging ranges once nothing is mapped in them (empty_cache, drop_everything).
  void release_stray_mappings();
  // Swaps the backing of pages[first, last) (consecutive addresses) to fresh[first, last);
  // done[k] tells which pages now live on their fresh page.
  Error swap_run(const std::vector<Page*>& pages, const std::vector<PhysicalPage*>& fresh,
                 std::size_t first, std::size_t last, std::vector<char>& done);
  Error undo_swap(Page& page, PhysicalPage& fresh, PhysicalPage& old);
  // Grants access to `count` pages mapped from `va` on: one call, else page by page.
  bool grant_range(std::uintptr_t va, std::size_t count);
  // Waits on the host for the work queued on `stream` so far; where events fail, for the
  // whole device (then *whole_device, when given, is set).
  Error wait_for_stream(StreamHandle stream, bool* whole_device = nullptr);
  void maybe_promote();
  Error promote_locked();
  // Where the live allocation `ptr` lies: its segment and its rounded extent.
  struct AllocationSpan {
    Segment* segment = nullptr;
    std::uintptr_t addr = 0;
    std::size_t size = 0;
  };
  Error span_of(const void* ptr, AllocationSpan* out) const;

  // A new segment record over [base, base + bytes) in `pool`, one free block covering it
  // (the caller accounts for the memory).
  Segment* add_segment(StreamPool& pool, std::uintptr_t base, std::size_t bytes);
  // host_segments.cpp: the host tier without host-located pages.
  Error new_host_segment(StreamPool& pool, std::size_t size, Block** out);
  // Serves a request that found no device room from the host tier.
  Error spill(StreamPool& pool, std::size_t size, std::uintptr_t* addr, std::uintptr_t* owner);

  // pending.cpp
  void process_pending(bool wait);
  // Device-ordered frees: fence (GPU-side ordering, no host wait) or complete after a device
  // synchronization (OOM path, empty_cache).
  void fence_device_ordered_frees();
  // Makes every stream of `waiters` wait for the work queued so far on the legacy default
  // stream and every registered stream (or, when events fail, after a device
  // synchronization); false when neither worked and nothing is ordered.
  bool order_streams_after_now(const std::vector<StreamHandle>& waiters);
  void complete_device_ordered_frees();
  void defer_until_device_idle(const LiveEntry& entry);
  template <typename F>
  void for_each_pending(F&& f) const {
    for (const PendingFree& p : pending_) f(p);
    for (const PendingFree& p : unfenced_) f(p);
  }
  Error defer_free(const LiveEntry& entry, StreamHandle alloc_stream,
                   const std::vector<StreamHandle>& uses);
  void complete_free(std::uintptr_t owner, std::uintptr_t addr, std::size_t requested);
  Error take_event(EventHandle* event);
  void give_event(EventHandle event);

  // device_allocator.cpp
  Error try_allocate(StreamPool& pool, std::size_t size, std::uintptr_t* addr,
                     std::uintptr_t* owner);
  Error allocate_locked(std::size_t size, StreamHandle stream, std::uintptr_t* addr,
                        std::uintptr_t* owner);
  void record_allocation(std::uintptr_t addr, std::uintptr_t owner, std::size_t requested);
  Error out_of_memory(std::size_t size, StreamHandle stream);
  // Waits for pending frees, returns empty slabs to the block pool and every wholly free
  // plain segment to the driver. Idle pages are kept: a request can take them anyway.
  void release_cached_memory();
  // Returns every segment to the driver and forgets all state (destructor, reset).
  void drop_everything();
  void check_after_operation(const char* operation);
  std::string validate_locked() const;

  device::Device& device_;
  const int ordinal_;
  Settings settings_;
  const std::size_t page_size_;  // the VMM granularity when paged, else 0
  SizeClasses classes_;
  std::size_t device_total_ = 0;

  mutable SpinLock lock_;
  std::unordered_map<StreamHandle, std::unique_ptr<StreamPool>> pools_;
  StreamPool* last_pool_ = nullptr;  // the most recently used pool: the common case
  LiveMap live_;
  std::unordered_map<std::uintptr_t, std::vector<StreamHandle>> stream_uses_;
  std::vector<PendingFree> pending_;
  std::vector<PendingFree> unfenced_;    // device-ordered frees waiting for a fence
  std::vector<StreamHandle> fence_streams_;
  bool may_grow_ = true;  // false: serve from the cache only, never from new device memory
  std::vector<EventHandle> idle_events_;
  std::vector<Block*> spare_blocks_;
  // Paged mode: every physical page, and the idle ones (without owner) in the order they
  // became idle; page_epoch_ counts the times a page lost its last user.
  std::vector<PhysicalPage*> physical_pages_;
  IdleList device_idle_;
  IdleList host_idle_;
  std::size_t host_pages_ = 0;  // host-located physical pages among physical_pages_
  // The host tier while a request is spilled: off, host-located pages, or host segments
  // (pinned memory, where the device cannot create host-located pages or without paging).
  enum class Spill { off, host_pages, host_segments };
  Spill spill_ = Spill::off;
  bool host_pages_supported_ = true;
  // Staging addresses for migration: pages are copied into their new backing mapped here.
  std::uintptr_t staging_va_ = 0;
  // Address ranges for host pages' home mappings (kHomeChunkPages pages each), and the slots
  // of them no host page uses.
  static constexpr std::size_t kHomeChunkPages = 512;
  std::vector<std::uintptr_t> home_chunks_;
  std::vector<std::uintptr_t> free_homes_;
  std::vector<std::uintptr_t> stray_pages_;   // staging or home pages left mapped
  std::vector<std::uintptr_t> stray_ranges_;  // retired staging ranges (kStagingPages each)
  std::uint64_t page_epoch_ = 0;
  std::size_t chronic_pages_ = 0;  // physical pages created for chronic conflicts
  Stats stats_;
  TraceRing trace_;
};

}  // namespace cudalloc
