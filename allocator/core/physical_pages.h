// PhysicalPages: every physical page of one device's paged segments, and which are idle.
//
// A physical page is one granule of physical memory, on the device or (the host tier) on the
// host. It is owned by at most one virtual page at a time (the one it serves, page_mapper.h)
// and may stay mapped at others it served before. Invariants (validate.cpp checks them):
//   - a page without owner is idle and sits in its location's idle list, in the order it
//     became idle (idle_since increases along the list);
//   - host_active_bytes counts host pages that have an owner: ownership changes go through
//     set_owner / clear_owner;
//   - reserved (host_reserved) bytes count every device (host) page, idle or not.
// Idle device pages are in the idle list or parked in runs (parked_pages.h); both count as
// idle, and acquire takes the oldest or newest of either as if they were one list.
// Chunks (pool_types.h) are several pages in one physical allocation, for the held segments
// of regions only: their pages are in pages_ and counted like any other, but never in an idle
// list (they cannot be mapped alone). A chunk is idle whole or not at all between calls; an
// idle chunk is in idle_chunks_, where acquire_chunk finds it, and release_idle returns it.
// The epoch counts the times a page lost its last user or became idle: page_mapper.h uses it
// to know which idle pages queued work may still use. Not thread-safe: the device allocator's
// lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/budget.h"
#include "core/errors.h"
#include "core/ledger.h"
#include "core/parked_pages.h"
#include "core/pool_types.h"
#include "core/request.h"
#include "core/staging.h"

namespace cudalloc {

// Why a virtual page needs a physical page: it had none (fresh), or its own now serves
// another page (conflict), which has happened to it kChronicConflicts times or more
// (chronic).
enum class Claim { fresh, conflict, chronic };

class PhysicalPages {
 public:
  static constexpr int kChronicConflicts = 2;

  struct IdleList {
    PhysicalPage* head = nullptr;
    PhysicalPage* tail = nullptr;
    std::size_t count = 0;
  };

  PhysicalPages(device::Device& device, int ordinal, std::size_t page_size,
                const Settings& settings, const Budget& budget, Ledger& ledger,
                Staging& staging)
      : device_(device), ordinal_(ordinal), page_size_(page_size), settings_(settings),
        budget_(budget), ledger_(ledger), staging_(staging) {}
  ~PhysicalPages() { drop_all(); }
  PhysicalPages(const PhysicalPages&) = delete;
  PhysicalPages& operator=(const PhysicalPages&) = delete;

  // A physical page for a virtual page that needs one, taken from the idle list (no driver
  // call) or new, by the policy in physical_pages.cpp; not idle on return.
  Error acquire(Claim claim, const Request& request, PhysicalPage** out);
  // A host page for the host tier: an idle one, else new within host_limit.
  Error acquire_host(PhysicalPage** out);
  // New physical memory within the budget; not idle, no owner.
  Error create(device::Location where, PhysicalPage** out);
  // Returns an idle page mapped nowhere to the driver; false (and kept) on failure.
  bool release(PhysicalPage* phys);
  // `count` pages in one physical allocation at `where`, for a bulk move: an idle chunk of
  // that size, else new memory within the budget (a host chunk with its home mapped). Its
  // pages have no owner and are not idle on return. out_of_memory when there is no room or
  // the driver refuses (the caller takes single pages instead).
  Error acquire_chunk(device::Location where, std::size_t count, PhysicalChunk** out);
  // Returns a wholly idle chunk mapped nowhere but at its home to the driver; false (kept
  // idle) on failure.
  bool release_chunk(PhysicalChunk* chunk);
  // Pages in idle chunks at `where`.
  std::size_t idle_chunk_pages(device::Location where) const;
  const std::vector<PhysicalChunk*>& idle_chunks() const { return idle_chunks_; }
  // A POSIX file descriptor of `phys` for another process (CUDA IPC of paged memory): exported
  // at the first call, the same one afterwards, open until the page is released (the other
  // process takes it over whenever it opens the share). not_supported for host pages and
  // memory the driver cannot export.
  Error share(PhysicalPage& phys, int* fd);
  // Returns every idle page mapped nowhere (empty_cache); the device bytes released.
  std::size_t release_idle();
  // Makes sure the driver's answer to host-located pages is known (the first spill).
  void probe_host();

  // (Inline, with the list and ownership changes below: they are on the path of every
  // allocation and free in paged segments.)
  void make_idle(PhysicalPage& phys) {
    phys.idle_since = tick();
    if (phys.chunk != nullptr) return chunk_page_idle(phys);
    append_idle(phys);
  }
  // Appends `phys` to its idle list keeping its idle_since (which must be the newest).
  void append_idle(PhysicalPage& phys) {
    IdleList& list = idle_of(phys);
    phys.idle_next = nullptr;
    phys.idle_prev = list.tail;
    (list.tail != nullptr ? list.tail->idle_next : list.head) = &phys;
    list.tail = &phys;
    ++list.count;
  }
  void take_idle(PhysicalPage& phys) {
    IdleList& list = idle_of(phys);
    (phys.idle_prev != nullptr ? phys.idle_prev->idle_next : list.head) = phys.idle_next;
    (phys.idle_next != nullptr ? phys.idle_next->idle_prev : list.tail) = phys.idle_prev;
    phys.idle_prev = phys.idle_next = nullptr;
    --list.count;
  }
  void set_owner(PhysicalPage& phys, Page* page) {
    phys.owner = page;
    if (phys.host) ledger_.host_in_use(page_size_);
  }
  void clear_owner(PhysicalPage& phys) {
    phys.owner = nullptr;
    if (phys.host) ledger_.host_unused(page_size_);
  }

  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t tick() { return ++epoch_; }

  // Parked pages (parked_pages.h). park: pages [first, last] of `seg`, each with one user
  // (the block being freed) that owns a device page, become idle as one run.
  void park(Segment& seg, std::size_t first, std::size_t last) {
    const std::uint64_t epoch = epoch_ + 1;
    epoch_ += last - first + 1;
    parked_.park(seg, first, last, epoch);
  }
  ParkedPages& parked() { return parked_; }
  const ParkedPages& parked() const { return parked_; }
  // A page taken out of its run becomes an ordinary idle page that became idle at `epoch`; its
  // physical page is returned, not in the idle list (the caller takes it or lists it).
  PhysicalPage& unpark(Page& page, std::uint64_t epoch);
  // If `phys` is owned by a parked page, unparks that page: true, and phys is idle but not
  // in the idle list.
  bool unpark_owner(PhysicalPage& phys);
  bool owner_parked(const PhysicalPage& phys) const {
    return phys.owner != nullptr && phys.owner->users == 1 && parked_.contains(*phys.owner);
  }
  // Makes every parked page an ordinary idle page, in the idle list (empty_cache).
  void unpark_all();
  bool host_supported() const { return host_supported_; }
  std::size_t count() const { return pages_.size(); }
  std::size_t host_count() const { return host_pages_; }
  std::size_t device_idle() const { return device_idle_.count + parked_.count(); }
  // Idle pages, with those of idle chunks (which serve bulk moves only).
  std::size_t idle() const { return device_idle() + host_idle_.count + chunk_idle_pages_; }
  // Device pages that serve a virtual page now.
  std::size_t device_owned() const { return pages_.size() - host_pages_ - device_idle(); }
  const std::vector<PhysicalPage*>& all() const { return pages_; }
  const IdleList& device_idle_list() const { return device_idle_; }
  const IdleList& host_idle_list() const { return host_idle_; }

  // Unmaps every home, releases every page and forgets them (reset, destructor). The caller
  // has unmapped the pages' mappings in segments.
  void drop_all();

 private:
  void close_share(PhysicalPage& phys);  // closes the exported descriptor, if any
  void chunk_page_idle(PhysicalPage& phys);
  // Takes `phys` out of pages_ and the counts (release, release_chunk).
  void forget(PhysicalPage* phys);
  PhysicalChunk* new_chunk(device::PhysicalHandle handle, bool host, std::size_t count);
  IdleList& idle_of(const PhysicalPage& phys) { return phys.host ? host_idle_ : device_idle_; }
  // Takes the oldest (newest) idle device page, listed or parked; requires one.
  PhysicalPage* take_device_idle(bool newest);
  // Whether a chronic claim may take new memory (acquire).
  bool chronic_may_grow() const;
  bool has_device_idle() const { return device_idle_.head != nullptr || !parked_.empty(); }
  bool room_for(device::Location where) const;

  device::Device& device_;
  const int ordinal_;
  const std::size_t page_size_;
  const Settings& settings_;
  const Budget& budget_;
  Ledger& ledger_;
  Staging& staging_;
  std::vector<PhysicalPage*> pages_;
  IdleList device_idle_;
  ParkedPages parked_;
  IdleList host_idle_;
  std::vector<PhysicalChunk*> idle_chunks_;  // wholly idle chunks, oldest first
  std::size_t chunk_idle_pages_ = 0;         // their pages
  std::size_t host_pages_ = 0;   // host-located pages among pages_
  std::uint64_t epoch_ = 0;
  bool host_supported_ = true;   // false once the driver refused a host-located page
};

}  // namespace cudalloc
