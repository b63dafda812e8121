// The invariant checker: walks every structure of one device and compares it with the stats.
// Tests run it after every operation; CUDALLOC_CONF=validate:1 runs it in any program.
#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "core/device_allocator.h"

namespace cudalloc {
namespace {

struct Totals {
  std::int64_t reserved = 0, segments = 0, free_blocks = 0, slab_bytes = 0, slabs = 0;
  std::int64_t mapped_pages = 0, dropped = 0, fast_blocks = 0;
  std::size_t parked_pages = 0;
  std::int64_t host_reserved = 0, host_active = 0;
  std::int64_t allocated = 0, allocations = 0, requested = 0, pending_bytes = 0, pending = 0;
};

class Checker {
 public:
  bool ok() const { return !failed_; }
  std::string problem() const { return problem_.str(); }
  template <typename... Args>
  bool expect(bool condition, const Args&... what) {
    if (!condition && ok()) {
      (problem_ << ... << what);
      failed_ = true;
    }
    return condition;
  }

 private:
  std::ostringstream problem_;
  bool failed_ = false;
};

void check_slab(Checker& c, const Slab* slab, const StreamPool& pool) {
  c.expect(slab->pool == &pool, "slab at ", slab->base(), " is in the wrong pool");
  c.expect(slab->used + slab->free_slots.size() == slab->capacity, "slab at ", slab->base(),
           ": used ", slab->used, " + free ", slab->free_slots.size(), " != capacity ",
           slab->capacity);
  c.expect(std::uint64_t{slab->capacity} * slab->object_size <= slab->block->size,
           "slab at ", slab->base(), " overruns its block");
  const bool listed = slab->available_index >= 0;
  c.expect(listed == !slab->free_slots.empty(), "slab at ", slab->base(),
           " availability does not match its free slots");
  const auto& avail = pool.classes[static_cast<std::size_t>(slab->cls)].available;
  c.expect(!listed || avail[static_cast<std::size_t>(slab->available_index)] == slab,
           "slab at ", slab->base(), " has a stale available index");
  std::vector<bool> seen(slab->capacity);
  for (std::uint32_t s : slab->free_slots) {
    c.expect(s < slab->capacity && !seen[s], "slab at ", slab->base(),
             ": bad or repeated free slot ", s);
    if (s < slab->capacity) seen[s] = true;
  }
}

void check_segment(Checker& c, const Segment* seg, const StreamPool& pool, Totals& t) {
  c.expect(seg->pool == &pool, "segment at ", seg->base, " is in the wrong pool");
  std::uintptr_t at = seg->base;
  const Block* prev = nullptr;
  for (const Block* b = seg->first; b != nullptr && c.ok(); b = b->next) {
    c.expect(b->addr == at && b->segment == seg && b->prev == prev && b->size > 0,
             "segment at ", seg->base, ": block at ", b->addr, " breaks the address chain");
    const bool is_free = b->state == Block::State::free;
    c.expect(!(is_free && prev != nullptr && prev->state == Block::State::free),
             "adjacent free blocks at ", prev ? prev->addr : 0, " and ", b->addr,
             " were not coalesced");
    const FreeBins& bins = pool.bins_for(*seg);
    c.expect(is_free == bins.contains(b), "block at ",
             b->addr, is_free ? " is free but not in its pool's free set"
                              : " is in the free set but not free");
    if (seg->pinned_host() && !is_free) t.host_active += static_cast<std::int64_t>(b->size);
    if (b->state == Block::State::slab) {
      c.expect(b->slab != nullptr && b->slab->block == b, "slab block at ", b->addr,
               " does not point to its slab");
      if (b->slab != nullptr) check_slab(c, b->slab, pool);
      t.slab_bytes += static_cast<std::int64_t>(b->size);
      ++t.slabs;
    }
    if (is_free) ++t.free_blocks;
    if (b->state == Block::State::fast) {
      // Kept for a same-size allocation (fast_frees.h): only where a free changes nothing else.
      const StreamPool& owner = *seg->pool;
      c.expect(!owner.is_private() && owner.region == kNoRegion && !seg->spill &&
                   !seg->pinned_host() && !seg->held && seg->host_mapped == 0,
               "kept block at ", b->addr, " lies in a segment that keeps none");
      ++t.fast_blocks;
    }
    at += b->size;
    prev = b;
  }
  c.expect(at == seg->base + seg->size, "segment at ", seg->base, " blocks do not cover it");
  if (seg->paged()) return;  // its pages are counted by check_pages
  c.expect(!seg->pinned_host() || seg->spill, "pinned segment at ", seg->base,
           " is not a spill segment");
  c.expect(seg->pages.empty(), "unpaged segment at ", seg->base, " has page records");
  if (seg->pinned_host()) {
    t.host_reserved += static_cast<std::int64_t>(seg->size);
    return;
  }
  t.reserved += static_cast<std::int64_t>(seg->size);
  ++t.segments;
}

// A held segment's pages (regions.h) have one user each, the hold, and are mapped; a paused
// one's are on host pages (kept) or unmapped without users (dropped), or, after a failed
// pause or resume, still mapped to device pages. Blocks over them add no users.
std::vector<std::uint32_t> held_users(Checker& c, const Segment* seg, std::size_t page_size) {
  c.expect(seg->parked.empty(), "held segment at ", seg->base, " has parked pages");
  std::vector<std::uint32_t> users(seg->pages.size(), 1);
  for (std::size_t i = 0; i < seg->pages.size() && c.ok(); ++i) {
    const Page& p = seg->pages[i];
    if (seg->paused && p.users == 0) {
      c.expect(p.phys == nullptr, "dropped page at ", seg->base + i * page_size, " is mapped");
      users[i] = 0;
    }
  }
  return users;
}

// Every page's users are the non-free blocks over it; a page with users owns the physical
// page mapped there; mappings agree in both directions.
void check_pages(Checker& c, const Segment* seg, std::size_t page_size, Totals& t) {
  std::vector<std::uint32_t> users =
      seg->held ? held_users(c, seg, page_size) : std::vector<std::uint32_t>(seg->pages.size());
  for (const Block* b = seg->first; b != nullptr && !seg->held; b = b->next) {
    if (b->state == Block::State::free) continue;
    const auto [first, last] = seg->pages_under(b->addr, b->size, page_size);
    for (std::size_t i = first; i <= last; ++i) ++users[i];
  }
  // A parked page's one user is its run: no block lies over it, and it owns a device page.
  std::size_t after_last_run = 0;
  for (const auto& [first, run] : seg->parked) {
    c.expect(first == run.first && run.segment == seg && run.count > 0 &&
                 run.last() < seg->pages.size(),
             "a parked run of the segment at ", seg->base, " is keyed or sized wrongly");
    c.expect(first >= after_last_run, "parked runs overlap at page ", first);
    after_last_run = run.last() + 1;
    for (std::size_t i = first; i <= run.last() && i < users.size() && c.ok(); ++i) {
      const Page& p = seg->pages[i];
      c.expect(users[i] == 0, "parked page at ", seg->base + i * page_size, " is under a block");
      c.expect(p.phys != nullptr && !p.phys->host && p.accessible, "parked page at ",
               seg->base + i * page_size, " lacks an accessible device page");
      ++users[i];
    }
    t.parked_pages += run.count;
  }
  std::size_t mapped = 0, host_mapped = 0;
  for (std::size_t i = 0; i < seg->pages.size() && c.ok(); ++i) {
    const Page& p = seg->pages[i];
    const std::uintptr_t va = seg->base + i * page_size;
    // A page never claimed is all zero (page_table.h); every other one knows its segment.
    c.expect(p.segment == seg || (p.segment == nullptr && p.phys == nullptr && p.users == 0),
             "page at ", va, " points to the wrong segment");
    c.expect(p.users == users[i], "page at ", va, " counts ", p.users, " users, blocks give ",
             users[i]);
    c.expect(p.users == 0 || (p.phys != nullptr && p.phys->owner == &p), "page at ", va,
             " is used but does not own a mapped physical page");
    c.expect(p.users == 0 || p.accessible, "page at ", va, " is used without access");
    if (p.phys == nullptr && seg->held) t.dropped += static_cast<std::int64_t>(page_size);
    if (p.phys == nullptr) continue;
    ++t.mapped_pages;
    ++mapped;
    if (p.phys->host) ++host_mapped;
    const auto& m = p.phys->mappings;
    c.expect(std::find(m.begin(), m.end(), &p) != m.end(), "page at ", va,
             " is not among its physical page's mappings");
  }
  c.expect(!c.ok() || mapped == seg->mapped_pages, "segment at ", seg->base, " counts ",
           seg->mapped_pages, " mapped pages, its records ", mapped);
  c.expect(!c.ok() || host_mapped == seg->host_mapped, "segment at ", seg->base, " counts ",
           seg->host_mapped, " pages mapped to host pages, its records ", host_mapped);
}

// A chunk (pool_types.h): its pages point back at it; it is idle whole or not at all, listed
// exactly when idle; mapped whole at consecutive pages of one segment in slot order, or not
// at all (its home aside).
void check_chunk(Checker& c, const PhysicalChunk& chunk, const PhysicalPages& physical,
                 std::size_t page_size) {
  std::size_t idle = 0, mapped = 0;
  for (std::size_t k = 0; k < chunk.count() && c.ok(); ++k) {
    const PhysicalPage* p = chunk.pages[k];
    c.expect(p->chunk == &chunk && p->slot == k && p->handle == chunk.handle &&
                 p->host == chunk.host,
             "a chunk's page ", k, " does not point back at it");
    c.expect(p->home == (chunk.home != 0 ? chunk.home + k * page_size : 0),
             "a chunk's page ", k, " has the wrong home");
    if (p->owner == nullptr) ++idle;
    c.expect(p->mappings.size() <= 1, "a chunk's page is mapped at ", p->mappings.size(),
             " pages");
    if (p->mappings.empty()) continue;
    ++mapped;
    const Page* first = chunk.pages[0]->mappings.empty() ? nullptr : chunk.pages[0]->mappings[0];
    c.expect(first != nullptr && p->mappings[0]->segment == first->segment &&
                 p->mappings[0] == first + k,
             "a chunk is not mapped whole at consecutive pages in slot order");
  }
  c.expect(mapped == 0 || mapped == chunk.count(), "a chunk is mapped in part");
  c.expect(idle == chunk.idle && (idle == 0 || idle == chunk.count()), "a chunk counts ",
           chunk.idle, " idle pages, has ", idle, " of ", chunk.count());
  const auto& listed = physical.idle_chunks();
  const bool in_list = std::find(listed.begin(), listed.end(), &chunk) != listed.end();
  c.expect(in_list == (idle == chunk.count()), "an idle chunk is not listed, or the reverse");
}

}  // namespace

std::string DeviceAllocator::validate_locked() const {
  Checker c;
  Totals t;
  pools_.for_each([&](const StreamPool& pool) {
    const std::int64_t free_before = t.free_blocks;
    for (const Segment* seg : pool.segments) {
      check_segment(c, seg, pool, t);
      if (seg->paged()) check_pages(c, seg, page_size_, t);
    }
    c.expect(std::size_t(t.free_blocks - free_before) ==
                 pool.free_blocks.size() + pool.spill_free_blocks.size(),
             "a pool's free bins hold blocks that are not free blocks of its segments");
    for (const SlabClass& cls : pool.classes) {
      std::size_t empty = 0;
      for (const Slab* s : cls.available) empty += s->used == 0 ? 1 : 0;
      c.expect(empty == cls.empty, "a size class counts ", cls.empty, " empty slabs, has ", empty);
    }
  });
  // Every live allocation sits in an allocated block or an allocated slot of a slab.
  std::unordered_map<const Slab*, std::uint32_t> slab_live;
  live_.for_each([&](const LiveEntry& e) {
    if (e.owner.is_slab()) {
      const Slab* slab = e.owner.slab();
      const std::uintptr_t offset = e.key - slab->base();
      c.expect(e.key >= slab->base() && offset % slab->object_size == 0 &&
                   offset / slab->object_size < slab->capacity,
               "live pointer ", e.key, " is not an object of its slab");
      ++slab_live[slab];
      t.allocated += slab->object_size;
    } else {
      const Block* b = e.owner.block();
      c.expect(b->addr == e.key && b->state == Block::State::allocated, "live pointer ", e.key,
               " does not match an allocated block");
      t.allocated += static_cast<std::int64_t>(b->size);
    }
    c.expect(e.requested > 0, "live pointer ", e.key, " has requested size 0");
    c.expect(e.owner.has_stream_uses() == deferred_.has_stream_uses(e.key),
             "live pointer ", e.key, " stream-use flag disagrees with the stream-use table");
    ++t.allocations;
    t.requested += static_cast<std::int64_t>(e.requested);
  });
  deferred_.for_each([&](const PendingFree& p) {
    if (p.owner.is_slab()) {
      const Slab* slab = p.owner.slab();
      ++slab_live[slab];
      t.pending_bytes += slab->object_size;
    } else {
      const Block* b = p.owner.block();
      c.expect(b->state == Block::State::pending, "pending free at ", p.addr,
               " is not a pending block");
      t.pending_bytes += static_cast<std::int64_t>(b->size);
    }
    ++t.pending;
  });
  for (const auto& [slab, n] : slab_live) {
    c.expect(slab->used == n, "slab at ", slab->base(), " counts ", slab->used,
             " used objects but ", n, " are live or pending");
  }
  std::int64_t listed = 0;
  const auto& host_idle = physical_.host_idle_list();
  for (const PhysicalPages::IdleList* list : {&physical_.device_idle_list(), &host_idle}) {
    std::uint64_t last_epoch = 0;
    std::size_t in_list = 0;
    for (const PhysicalPage* p = list->head; p != nullptr && c.ok(); p = p->idle_next) {
      c.expect(p->owner == nullptr, "a physical page in the idle list has an owner");
      c.expect(p->chunk == nullptr, "a chunk's page is in an idle list");
      c.expect(p->host == (list == &host_idle), "a physical page is in the wrong idle list");
      c.expect(p->idle_since > last_epoch, "the idle list is out of order");
      last_epoch = p->idle_since;
      ++in_list;
    }
    c.expect(in_list == list->count, "an idle list counts ", list->count, " pages, holds ",
             in_list);
    listed += static_cast<std::int64_t>(in_list);
  }
  for (const PhysicalChunk* chunk : physical_.idle_chunks()) {
    c.expect(chunk->idle == chunk->count(), "a listed idle chunk counts ", chunk->idle,
             " idle pages of ", chunk->count());
    listed += static_cast<std::int64_t>(chunk->count());
  }
  std::int64_t host_pages = 0;
  std::int64_t mappings = 0, idle = 0;
  const std::vector<PhysicalPage*>& physical = physical_.all();
  for (std::size_t i = 0; i < physical.size() && c.ok(); ++i) {
    const PhysicalPage* p = physical[i];
    c.expect(p->index == i, "physical page ", i, " has a stale index");
    c.expect(p->owner == nullptr || p->owner->phys == p, "physical page ", i,
             " is owned by a page it is not mapped at");
    for (const Page* m : p->mappings) {
      c.expect(m->phys == p, "physical page ", i, " lists a mapping that points elsewhere");
      c.expect(m == p->owner || m->users == 0, "physical page ", i,
               " is mapped at a used page that does not own it");
    }
    if (p->chunk != nullptr && p->slot == 0) check_chunk(c, *p->chunk, physical_, page_size_);
    mappings += static_cast<std::int64_t>(p->mappings.size());
    if (p->owner == nullptr) ++idle;
    if (p->host) {
      ++host_pages;
      if (p->owner != nullptr) t.host_active += static_cast<std::int64_t>(page_size_);
    }
  }
  c.expect(listed == idle, "idle physical pages: ", idle, " without owner, ", listed,
           " listed");
  // The device's runs: in epoch order without interleaving, as many pages as segments hold.
  std::size_t in_runs = 0;
  std::uint64_t next_epoch = 0;
  for (const ParkedRun* r = physical_.parked().oldest(); r != nullptr && c.ok(); r = r->newer) {
    c.expect(r->epoch >= next_epoch, "parked runs are out of epoch order");
    const auto found = r->segment->parked.find(r->first);
    c.expect(found != r->segment->parked.end() && &found->second == r,
             "a listed parked run is not its segment's");
    c.expect(r->newer != nullptr || r == physical_.parked().newest(), "the newest run is wrong");
    next_epoch = r->epoch + r->count;
    in_runs += r->count;
  }
  c.expect(in_runs == physical_.parked().count() && in_runs == t.parked_pages, "parked pages: ",
           physical_.parked().count(), " counted, ", in_runs, " in the list of runs, ",
           t.parked_pages, " in segments");
  c.expect(std::size_t(host_pages) == physical_.host_count(), "host pages: ", host_pages,
           " found, ", physical_.host_count(), " counted");
  c.expect(mappings == t.mapped_pages, "physical pages list ", mappings,
           " mappings, segments have ", t.mapped_pages, " mapped pages");
  const auto page = static_cast<std::int64_t>(page_size_);
  const auto device_pages = static_cast<std::int64_t>(physical.size()) - host_pages;
  t.reserved += device_pages * page;
  t.segments += device_pages;
  t.host_reserved += host_pages * page;
  const Stats& s = ledger_.stats();
  c.expect(s.mapped_bytes.current == t.mapped_pages * page, "mapped_bytes ",
           s.mapped_bytes.current, " != mapped pages ", t.mapped_pages * page);
  c.expect(s.reserved_bytes.current == t.reserved, "reserved_bytes ", s.reserved_bytes.current,
           " != segments and pages ", t.reserved);
  c.expect(s.reserved_count.current == t.segments, "reserved_count disagrees with segments");
  // Kept blocks are in no bin and are not live: each must be one FastFrees holds.
  std::int64_t kept = 0;
  fast_.for_each([&](const Block* b) {
    c.expect(b->state == Block::State::fast && live_.find(b->addr) == nullptr, "kept block at ",
             b->addr, " is not a freed block");
    ++kept;
  });
  c.expect(kept == t.fast_blocks, "FastFrees keeps ", kept, " blocks, segments hold ",
           t.fast_blocks);
  c.expect(s.cached_count.current == t.free_blocks, "cached_count ", s.cached_count.current,
           " != free blocks ", t.free_blocks);
  c.expect(s.slab_bytes.current == t.slab_bytes && s.slab_count.current == t.slabs,
           "slab stats disagree with slab blocks");
  c.expect(s.allocated_bytes.current == t.allocated, "allocated_bytes ",
           s.allocated_bytes.current, " != live ", t.allocated);
  c.expect(s.allocated_count.current == t.allocations, "allocated_count disagrees with live");
  c.expect(s.requested_bytes.current == t.requested, "requested_bytes disagrees with live");
  c.expect(s.active_bytes.current == t.allocated + t.pending_bytes &&
               s.active_count.current == t.allocations + t.pending,
           "active stats disagree with live + pending");
  c.expect(s.host_reserved_bytes.current == t.host_reserved, "host_reserved_bytes ",
           s.host_reserved_bytes.current, " != host pages and segments ", t.host_reserved);
  c.expect(s.host_active_bytes.current == t.host_active, "host_active_bytes ",
           s.host_active_bytes.current, " != host memory in use ", t.host_active);
  c.expect(s.dropped_bytes.current == t.dropped, "dropped_bytes ", s.dropped_bytes.current,
           " != dropped pages of paused regions ", t.dropped);
  c.expect(s.cached_bytes.current == s.reserved_bytes.current + s.host_reserved_bytes.current +
                                         s.dropped_bytes.current - s.active_bytes.current,
           "cached_bytes != reserved + host_reserved + dropped - active");
  return c.problem();
}

}  // namespace cudalloc
