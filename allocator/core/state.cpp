// DeviceAllocator::state(): a copy of everything, for snapshots and inspection.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "core/device_allocator.h"

namespace cudalloc {
namespace {

struct SlotInfo {
  std::size_t requested;
  BlockState::Kind kind;
};

// Expands a slab block into its objects: one block per live or pending object, one free block
// per run of free slots (and for the unused tail).
void expand_slab(const Slab& slab, const std::unordered_map<std::uintptr_t, SlotInfo>& slots,
                 std::vector<BlockState>& out) {
  BlockState free_run;
  auto flush = [&] {
    if (free_run.size > 0) out.push_back(free_run);
    free_run = BlockState{};
  };
  for (std::uint32_t i = 0; i < slab.capacity; ++i) {
    const std::uintptr_t a = slab.base() + std::uintptr_t{i} * slab.object_size;
    auto it = slots.find(a);
    if (it == slots.end()) {
      if (free_run.size == 0) free_run.addr = a;
      free_run.size += slab.object_size;
      continue;
    }
    flush();
    out.push_back(BlockState{a, slab.object_size, it->second.requested, it->second.kind});
  }
  const std::size_t used = std::size_t{slab.capacity} * slab.object_size;
  if (used < slab.block->size) {
    if (free_run.size == 0) free_run.addr = slab.base() + used;
    free_run.size += slab.block->size - used;
  }
  flush();
}

// Whether a page of a paged segment is shown: pages in use, and for each idle physical page
// the address it was mapped at last (so that each physical page is shown once).
bool shown(const Page& page) {
  if (page.phys == nullptr) return false;
  if (page.users > 0) return true;
  return page.phys->owner == nullptr && page.phys->mappings.back() == &page;
}

// Appends the runs of pages [first, end) of `seg`, `page` bytes each, that agree on being
// mapped and on where: one entry per run, in one pass over the pages.
void append_page_runs(const Segment& seg, std::size_t first, std::size_t end, std::size_t page,
                      std::vector<PageRun>& out) {
  for (std::size_t k = first; k < end; ++k) {
    const PhysicalPage* phys = seg.pages[k].phys;
    const PageRun run{seg.base + k * page, page, phys != nullptr, phys != nullptr && phys->host};
    if (!out.empty() && out.back().mapped == run.mapped && out.back().host == run.host &&
        out.back().addr + out.back().size == run.addr) {
      out.back().size += page;
    } else {
      out.push_back(run);
    }
  }
}

// Appends one SegmentState per run of shown pages of `seg`, with the blocks over the run
// (free blocks clipped to it; blocks in use lie wholly within shown pages).
template <typename Describe>
void paged_segment_state(const Segment& seg, device::StreamHandle stream, Describe&& describe,
                         std::vector<SegmentState>& out) {
  const std::size_t page = seg.size / seg.pages.size();
  const Block* b = seg.first;
  for (std::size_t i = 0; i < seg.pages.size();) {
    if (!shown(seg.pages[i])) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < seg.pages.size() && shown(seg.pages[end])) ++end;
    SegmentState s;
    s.base = seg.base + i * page;
    s.size = (end - i) * page;
    s.stream = stream;
    s.paged = true;
    append_page_runs(seg, i, end, page, s.pages);
    for (const PageRun& run : s.pages) s.host_bytes += run.host ? run.size : 0;
    while (b->addr + b->size <= s.base) b = b->next;
    for (; b != nullptr && b->addr < s.base + s.size; b = b->next) {
      if (b->state != Block::State::free) {
        describe(b, s.blocks, s);
        continue;
      }
      const std::uintptr_t lo = std::max(b->addr, s.base);
      const std::uintptr_t hi = std::min(b->addr + b->size, s.base + s.size);
      s.blocks.push_back(BlockState{lo, hi - lo, 0, BlockState::Kind::free});
      if (b->addr + b->size > s.base + s.size) break;  // continues into the next run
    }
    out.push_back(std::move(s));
    i = end;
  }
}

}  // namespace

DeviceState DeviceAllocator::state() {
  std::lock_guard lock(lock_);
  settle_fast_frees();  // the picture the pools would show had every free been done at once
  DeviceState st;
  st.device = ordinal_;
  st.backend = device_.name();
  st.stats = ledger_.stats();
  st.settings = settings_;
  st.reserve_cap = budget_.reserve_cap();
  st.device_total = budget_.device_total();
  st.trace = ledger_.trace().events();
  st.trace_dropped = ledger_.trace().dropped();

  std::unordered_map<std::uintptr_t, SlotInfo> slab_objects;
  std::unordered_map<const Block*, std::size_t> block_requested;
  live_.for_each([&](const LiveEntry& e) {
    if (e.owner.is_slab()) {
      slab_objects[e.key] = SlotInfo{e.requested, BlockState::Kind::allocated};
    } else {
      block_requested[e.owner.block()] = e.requested;
    }
  });
  deferred_.for_each([&](const PendingFree& p) {
    if (p.owner.is_slab()) {
      slab_objects[p.addr] = SlotInfo{p.requested, BlockState::Kind::pending};
    } else {
      block_requested[p.owner.block()] = p.requested;
    }
  });
  auto describe = [&](const Block* b, std::vector<BlockState>& out, SegmentState& s) {
    if (b->state == Block::State::slab) {
      s.has_slabs = true;
      s.slabs.push_back(SlabState{b->addr, b->size, b->slab->object_size, b->slab->capacity,
                                  b->slab->used});
      expand_slab(*b->slab, slab_objects, out);
      return;
    }
    BlockState bs{b->addr, b->size, 0, BlockState::Kind::free};
    if (b->state != Block::State::free) {
      bs.kind = b->state == Block::State::pending ? BlockState::Kind::pending
                                                  : BlockState::Kind::allocated;
      auto it = block_requested.find(b);
      bs.requested = it == block_requested.end() ? b->size : it->second;
    }
    out.push_back(bs);
  };
  pools_.for_each([&](const StreamPool& pool) {
    for (const Segment* seg : pool.segments) {
      if (seg->paged() && !seg->held) {
        paged_segment_state(*seg, pool.stream, describe, st.segments);
        continue;
      }
      SegmentState s;
      s.base = seg->base;
      s.size = seg->size;
      s.stream = pool.stream;
      s.private_pool = pool.private_id;
      s.host_bytes = seg->pinned_host() ? seg->size : 0;
      s.region = RegionTags::name(regions_.region_of(pool.private_id));
      if (seg->held) {
        const std::size_t page = seg->size / seg->pages.size();
        s.paged = true;
        s.paused = seg->paused;
        s.host_bytes = seg->host_mapped * page;
        s.dropped_bytes = (seg->pages.size() - seg->mapped_pages) * page;
        append_page_runs(*seg, 0, seg->pages.size(), page, s.pages);
      }
      for (const Block* b = seg->first; b != nullptr; b = b->next) describe(b, s.blocks, s);
      st.segments.push_back(std::move(s));
    }
  });
  std::sort(st.segments.begin(), st.segments.end(),
            [](const SegmentState& a, const SegmentState& b) { return a.base < b.base; });
  for (const RegionId id : regions_.ids()) {
    RegionState r;
    r.tag = RegionTags::name(id);
    const Regions::Region* region = regions_.find(id);
    r.paused = region->state == Regions::State::paused;
    r.kept = r.paused && region->kept;
    for (const SegmentState& s : st.segments) {
      if (s.region != r.tag) continue;
      ++r.segments;
      r.host_bytes += s.host_bytes;
      r.dropped_bytes += s.dropped_bytes;
      r.device_bytes += s.size - s.host_bytes - s.dropped_bytes;
    }
    st.regions.push_back(std::move(r));
  }
  std::sort(st.regions.begin(), st.regions.end(),
            [](const RegionState& a, const RegionState& b) { return a.tag < b.tag; });
  return st;
}

}  // namespace cudalloc
