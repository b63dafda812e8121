// PageMapper: paged segments, fragmentation control through virtual memory.
//
// In paged mode each stream's pool places its blocks (best fit, split, coalesce, exactly as in
// plain segments) in large virtual ranges. Only the granules ("pages") that lie under a
// non-free block are backed by physical memory (physical_pages.h), so memory is reserved for
// what is in use, not for the holes between. Physical pages belong to the device, not to a
// range.
//
// A physical page may stay mapped at every virtual page it has served, but serves one at a
// time. When a page gets its first user it needs a physical page of its own:
//   - the one already mapped there, when no other page uses it now: no driver call. A step
//     that repeats the last one's sizes lands on the same addresses and maps nothing;
//   - else (the page is unmapped, or its physical page serves another page, which unmaps it
//     first) an idle physical page or new memory, mapped there in addition to wherever it is
//     mapped already (PhysicalPages::acquire says which).
// So a physical page is shared by addresses whose uses do not overlap in time, and memory
// tracks the peak of pages in use while the steady state needs no mapping calls.
//
// Invariants (validate.cpp): a Page with users (non-free blocks overlapping it) is mapped,
// accessible, and owns its physical page; page->phys == q exactly when page is in
// q->mappings.
//
// Ordering rules.
//   - Reusing a physical page on the stream that used it last needs nothing: later work on a
//     stream runs after earlier work. For another stream, that stream waits on the GPU for an
//     event recorded on the last one (StreamSync::order_after).
//   - cuMemUnmap does not wait for work that still uses the range. A page's mapping is removed
//     only after the host has waited for the work queued on the page's stream up to the time
//     the page lost its last user (or for the device, in empty_cache). When a physical page
//     gains a mapping while still mapped at pages without users, a checkpoint is recorded on
//     those pages' streams (stream_checkpoints.h): their later unmaps wait for it, not for
//     everything queued by then.
// Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/budget.h"
#include "core/errors.h"
#include "core/ledger.h"
#include "core/physical_pages.h"
#include "core/request.h"
#include "core/staging.h"
#include "core/stream_checkpoints.h"
#include "core/stream_pool.h"
#include "core/stream_sync.h"

namespace cudalloc {

class PageMapper {
 public:
  PageMapper(device::Device& device, int ordinal, std::size_t page_size, const Budget& budget,
             PhysicalPages& physical, StreamSync& sync, Staging& staging, Ledger& ledger,
             StreamPools& pools)
      : device_(device), ordinal_(ordinal), page_size_(page_size),
        chunk_pages_(chunk_pages_for(page_size)), budget_(budget), physical_(physical),
        sync_(sync), staging_(staging), ledger_(ledger), pools_(pools) {}

  std::size_t page_size() const { return page_size_; }

  // Reserves a virtual range for a new paged segment of `pool` that can hold `size` bytes;
  // *bytes is its size. The caller makes the segment (init_pages gives it its pages).
  Error reserve_range(const StreamPool& pool, std::size_t size, std::uintptr_t* va,
                      std::size_t* bytes);
  void init_pages(Segment& seg) const;
  // Unmaps every page of the segment and returns its address range (reset, reclaim).
  void drop(Segment& seg);

  // Adds the block [addr, addr + size) as a user of its pages; each page that gains its first
  // user gets a physical page it owns. On failure no page gains a user, and the physical pages
  // this call created are returned to the driver (reserved memory is as before).
  // (Inline with claim_in_place: the path of every allocation in paged segments.)
  // Parked pages under the block (parked_pages.h) become its own without a visit.
  Error use(Segment& seg, std::uintptr_t addr, std::size_t size, const Request& request) {
    const auto [first, last] = seg.pages_under(addr, size, page_size_);
    if (!seg.parked.empty()) return use_parked(seg, first, last, request);
    const std::size_t created = physical_.count();
    bool claimed = false;
    for (std::size_t i = first; i <= last; ++i) {
      if (const Error err = use_page(seg, i, request, &claimed); err != Error::ok) {
        undo_use(seg, first, i, created);
        return err;
      }
    }
    return claimed ? grant_claimed(seg, first, last, created) : Error::ok;
  }
  // Removes one user from each page of [addr, addr + size); physical pages left without an
  // owner become idle. The pages only this block used are parked as one run, when there are
  // enough of them to be worth it, in a segment without host pages (parked_pages.h).
  void unuse(Segment& seg, std::uintptr_t addr, std::size_t size) {
    auto [first, last] = seg.pages_under(addr, size, page_size_);
    if (last - first + 1 < kParkPages || seg.host_mapped != 0) {
      for (std::size_t i = first; i <= last; ++i) drop_user(seg.pages[i]);
      return;
    }
    // Only the end pages can have other users (neighbouring blocks).
    if (seg.pages[first].users > 1) drop_user(seg.pages[first++]);
    if (seg.pages[last].users > 1) drop_user(seg.pages[last--]);
    physical_.park(seg, first, last);
  }
  // Every parked page becomes an ordinary idle page (before a pass over every page).
  void unpark_all() { physical_.unpark_all(); }

  std::uintptr_t address_of(const Page& page) const;
  // Maps `phys` at `page` without the access grant (the caller grants it, maybe for many
  // pages), or with it. A chunk's page (pool_types.h) maps the whole chunk, its slot at
  // `page` and the others at the pages around it, which must be unmapped; its grant and
  // unmap_now also cover the whole chunk.
  Error attach(Page& page, PhysicalPage& phys);
  Error map(Page& page, PhysicalPage& phys);
  Error grant(Page& page);
  // Removes the page's mapping once no queued work can use it.
  Error unmap(Page& page);
  // Removes the page's mapping now: the caller knows no queued work uses it. unmap_run_now:
  // pages [first, first + count) of `seg`, all mapped, with one driver call where it can; on
  // failure the pages before the one that failed are unmapped.
  Error unmap_now(Page& page);
  Error unmap_run_now(Segment& seg, std::size_t first, std::size_t count);

  // Held segments (regions.h); the caller has waited for every piece of work that used them.
  // evict: the page loses its hold and its physical page, which is unmapped wherever it is
  // mapped and returned to the driver (a host page too; a chunk's page evicts the pages of
  // the whole chunk). On failure the page is as before;
  // when only another mapping or the release fails, the page is evicted and its physical page
  // stays idle (cached; a warning says so). release_vacated: a physical page that a moved page
  // left (idle, maybe mapped at pages without users) goes back to the driver; false if it
  // stays idle. A chunk goes back once each of its pages has been passed here.
  Error evict(Page& page);
  bool release_vacated(PhysicalPage& phys);
  // Chunks (pool_types.h): pieces of up to chunk_pages() pages of a held segment, each one
  // physical allocation. acquire_device_chunk: `count` pages of device memory in one chunk,
  // not idle, no owner: an idle chunk of that size, else new memory within the budget; where
  // cudalloc's cache holds the room as idle single pages of less than kTakeIdleFrom bytes,
  // as many of them go back to the driver first (taking them instead would move the piece
  // page by page at every pause, and below that size a page's driver calls cost about what
  // its copy does). Pages of kTakeIdleFrom and more stay: the caller takes them as they
  // are, since their calls cost a fraction of their copy, and creating right after giving
  // such pages back was measured slow (docs/offload.md, "With larger pages").
  // out_of_memory when none can be had (the caller takes single pages instead).
  // A chunk is about kChunkBytes whatever the page size (larger physical allocations are
  // more often refused on a nearly full device; page-move-bench measured the driver's calls
  // on 64 MiB ones). At most kStagingPages (a move copies that many pages per host wait), at
  // least kMinChunkPages.
  static constexpr std::size_t kChunkBytes = std::size_t{64} << 20;
  static constexpr std::size_t kMinChunkPages = 2;  // a piece of one page is a single page
  static constexpr std::size_t kTakeIdleFrom = std::size_t{8} << 20;
  static std::size_t chunk_pages_for(std::size_t page_size) {
    const std::size_t pages = page_size == 0 ? Staging::kStagingPages : kChunkBytes / page_size;
    return std::clamp(pages, kMinChunkPages, Staging::kStagingPages);
  }
  std::size_t chunk_pages() const { return chunk_pages_; }
  Error acquire_device_chunk(std::size_t count, PhysicalChunk** out);
  // The hold of a new held segment (regions.h): every page gets its one user, mapped and
  // accessible, piece by piece in device chunks of up to chunk_pages() pages where they can
  // be had, the rest in single pages (use()), so that the region's first pause moves and
  // releases chunks, not single pages. On failure no page is held, and what was mapped here
  // is unmapped (its memory idle).
  Error hold(Segment& seg, const Request& request);
  // Unmaps the pages of [first, first + count) of `seg` that are mapped without users: idle
  // pages a failed use() claimed for a held segment, whose mappings no work has seen.
  void unmap_unused(Segment& seg, std::size_t first, std::size_t count);
  // The hold of a held segment ends after a device synchronization: every page loses its
  // user and is unmapped, its physical page idle. False if an unmap failed (that page stays
  // mapped, without users).
  bool release_hold(Segment& seg);

  // Unmaps every page without users and returns every idle physical page to the driver, after
  // one device synchronization (empty_cache). False when that synchronization failed (then
  // nothing changed, and queued work may still use idle pages).
  bool release_cached();
  // Whether every page of the segment is unmapped (its range can be returned).
  bool unmapped(const Segment& seg) const;
  // The pool is about to be destroyed, and no queued work of its stream can still use its
  // memory (the caller has waited): forget every reference to it.
  void forget_pool(const StreamPool& pool) {
    if (wide_pool_ == &pool) wide_pool_ = nullptr;
    checkpoints_.forget(pool.stream);  // (another pool of the stream just waits longer)
    for (PhysicalPage* p : physical_.all()) {
      if (p->last_pool == &pool) p->last_pool = nullptr;
    }
  }
  // The program destroys `stream`: its checkpoints go, so that a stream created later with
  // the same handle is never taken as having run them (unmaps of the old stream's pages then
  // wait the slow way, which falls back to a device synchronization).
  void forget_stream(StreamHandle stream) { checkpoints_.forget(stream); }
  void forget_pools() {
    wide_pool_ = nullptr;
    checkpoints_.clear();
  }
  const StreamCheckpoints& checkpoints() const { return checkpoints_; }

  // Blocks over fewer pages than this drop their pages one by one (a run costs a map node).
  static constexpr std::size_t kParkPages = 4;

 private:
  // *claimed: the page was mapped anew, without access yet (grant_claimed gives it).
  Error use_page(Segment& seg, std::size_t i, const Request& request, bool* claimed) {
    Page& page = seg.pages[i];
    if (page.users == 0 && !claim_in_place(page)) {
      page.segment = &seg;  // a page never used has none yet (page_table.h)
      if (const Error err = claim(page, request); err != Error::ok) return err;
      *claimed = true;
    }
    ++page.users;
    return Error::ok;
  }
  Error use_parked(Segment& seg, std::size_t first, std::size_t last, const Request& request);
  void note_unmapped(Page& page);  // the records of a mapping the driver has removed
  // Gives up to `count` idle single device pages (the longest idle first, parked ones too)
  // back to the driver, each unmapped first wherever it is mapped, once the work that used it
  // there is done. The number released; a failed unmap or release stops it (that page stays
  // idle).
  std::size_t release_idle_pages(std::size_t count);
  // Maps `chunk` whole at pages [first, first + chunk.count()) of `seg` (unmapped, never
  // used), grants access, and gives each page its slot with one user (the hold). On failure
  // nothing is mapped and the chunk is idle.
  Error hold_chunk(Segment& seg, std::size_t first, PhysicalChunk& chunk);
  // A held page (regions.h) lets go of `phys`, which it owned: no users, `phys` idle.
  void end_hold(Page& page, PhysicalPage& phys);
  // Chunks: the first of the pages a chunk maps at when `page` takes slot `slot`.
  Error chunk_span(Page& page, PhysicalChunk& chunk, std::size_t slot, std::size_t* first) const;
  // The same for a page mapped to a chunk already: its chunk and slot are the page's own.
  Error mapped_chunk_span(Page& page, std::size_t* first) const {
    return chunk_span(page, *page.phys->chunk, page.phys->slot, first);
  }
  // The index of the last page that shares page i's mapping: a chunk's span (one mapping,
  // unmapped whole), else i. A pass over the pages whose unmap of page i failed skips to it,
  // so that it tries each mapping once.
  std::size_t last_sharing_mapping(Segment& seg, std::size_t i) const {
    Page& page = seg.pages[i];
    std::size_t first = 0;
    if (page.phys == nullptr || page.phys->chunk == nullptr ||
        mapped_chunk_span(page, &first) != Error::ok) {
      return i;
    }
    return std::max(i, first + page.phys->chunk->count() - 1);
  }
  Error attach_chunk(Page& page, PhysicalPage& phys);
  Error unmap_chunk_now(Page& page);
  Error evict_chunk(Page& page);  // evicts every page of the chunk; the chunk is released
  void drop_users(Segment& seg, std::size_t first, std::size_t last);
  // Grants access to the pages of [first, last] that use() mapped, one driver call per run of
  // consecutive pages (per page, cuMemSetAccess costs about 28 us; over a run, 0.3 us a
  // page). On failure the use is undone (undo_use) and the error returned: a driver that
  // refuses access to a run is not asked again page by page.
  Error grant_claimed(Segment& seg, std::size_t first, std::size_t last, std::size_t created);
  // (Inline: on the path of every free in paged segments.)
  void drop_user(Page& page) {
    if (--page.users != 0) return;
    page.idle_since = physical_.tick();
    PhysicalPage& phys = *page.phys;
    physical_.clear_owner(phys);
    phys.last_pool = page.segment->pool;
    physical_.make_idle(phys);
  }
  // The common claim: the page's own idle device page is still mapped here with access; no
  // driver call. False when anything else is needed (claim() does it).
  bool claim_in_place(Page& page) {
    PhysicalPage* phys = page.phys;
    if (phys == nullptr || phys->owner != nullptr || !page.accessible || phys->host ||
        phys->chunk != nullptr) {
      return false;
    }
    physical_.take_idle(*phys);
    adopt(page, *phys);
    return true;
  }
  // `page` takes `phys` as its own; another stream's last use of it is ordered first, and the
  // pages it stays mapped at get a checkpoint (their unmaps come later).
  void adopt(Page& page, PhysicalPage& phys) {
    StreamPool* pool = page.segment->pool;
    if (phys.last_pool != nullptr && phys.last_pool != pool) order_reuse(*phys.last_pool, *pool);
    physical_.set_owner(phys, &page);
    phys.last_pool = pool;
    if (phys.mappings.size() > 1) cover_other_mappings(phys, page);
  }
  void order_reuse(const StreamPool& last, const StreamPool& next);
  // Gives `page` a physical page it owns, mapped there; access is granted by the caller
  // (grant_claimed) unless the page kept an accessible mapping.
  Error claim(Page& page, const Request& request);
  // Gives `page`, mapped to an idle host page, device memory instead (not while spilling).
  Error replace_host_page(Page& page, const Request& request, PhysicalPage** out);
  // The host waits until no queued work of the pool's stream uses its pages that became idle
  // at or before `epoch`: for a checkpoint that covers them, else for the stream's work
  // queued so far (or the device's, when the stream's event fails). False when every way
  // failed.
  bool wait_until_settled(StreamPool& pool, std::uint64_t epoch);
  // Every pool of `stream` is settled up to `epoch`.
  void settle_stream(StreamHandle stream, std::uint64_t epoch);
  // `phys` was just mapped at `page` or became its own: its other mappings (pages without
  // users, which will have to be unmapped before they are used again) get a checkpoint on
  // their streams.
  void cover_other_mappings(const PhysicalPage& phys, const Page& page);
  // Undoes the pages [first, end) of a failed use(): their users drop, and the physical pages
  // created since `created` (mapped only there, by this call) are unmapped and released.
  void undo_use(Segment& seg, std::size_t first, std::size_t end, std::size_t created);

  device::Device& device_;
  const int ordinal_;
  const std::size_t page_size_;
  const std::size_t chunk_pages_;  // chunk_pages_for(page_size_)
  const Budget& budget_;
  PhysicalPages& physical_;
  StreamSync& sync_;
  Staging& staging_;
  Ledger& ledger_;
  StreamPools& pools_;
  StreamCheckpoints checkpoints_{sync_};
  const StreamPool* wide_pool_ = nullptr;  // the pool whose ranges are device-sized
};

}  // namespace cudalloc
