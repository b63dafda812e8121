// The data structures of one device's pools. All of them are host-side metadata: device
// memory is never read or written by the allocator.
//
//   Segment   device memory from one device malloc, or (paged) a reserved virtual range whose
//             pages are mapped on demand; owned by one stream's pool
//   Page      one granule of a paged segment: mapped to a physical page or not
//   Block     a piece of a segment, in address order with its neighbours; free, allocated
//             (a large allocation), pending (freed, waiting for events) or a slab
//   Slab      a block carved into equal objects of one size class
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/page_table.h"
#include "device/device.h"

namespace cudalloc {

using device::EventHandle;
using device::StreamHandle;

struct StreamPool;
struct Segment;
struct Slab;

struct Block {
  // fast: freed, kept whole for a same-size allocation on its stream (fast_frees.h).
  enum class State : std::uint8_t { free, allocated, pending, slab, fast };

  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // for allocated / pending blocks
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address-order neighbours within the segment
  Block* next = nullptr;
  State state = State::free;
  Slab* slab = nullptr;  // when state == slab
  Block* bin_prev = nullptr;  // neighbours in a FreeBins list while free
  Block* bin_next = nullptr;
};

// Paged segments (page_pool.cpp). A Page is one granule of a segment's virtual range; a
// PhysicalPage is one granule of physical memory. A physical page may be mapped at several
// virtual pages at once, but serves at most one of them at a time: its `owner`, the one
// virtual page over which non-free blocks lie. Invariants:
//   - a Page with users (non-free blocks overlapping it) is mapped, and owns its physical page;
//   - a PhysicalPage without owner is idle and sits in the device's idle list, in the order
//     it became idle; its mappings are pages without users;
//   - page->phys == q exactly when page is in q->mappings.
struct PhysicalPage;

// All-zero is a page never used (page_table.h): the table is created lazily zeroed.
struct Page {
  Segment* segment = nullptr;    // set when the page is first claimed
  PhysicalPage* phys = nullptr;  // the physical page mapped here, or nullptr
  std::uint32_t users = 0;
  bool accessible = false;       // set_access succeeded for the current mapping
  std::uint8_t conflicts = 0;    // times its physical page went to another page (max 255)
  std::uint64_t idle_since = 0;  // the page epoch at which its users last dropped to 0
};

struct PhysicalChunk;

struct PhysicalPage {
  device::PhysicalHandle handle = 0;  // a chunk's pages share the chunk's handle
  bool host = false;  // host-located (the host tier), else device memory
  std::uintptr_t home = 0;  // host pages: an accessible mapping outside every segment, or 0
  Page* owner = nullptr;
  StreamPool* last_pool = nullptr;  // the pool whose stream used it last
  std::vector<Page*> mappings;
  std::uint64_t idle_since = 0;
  std::size_t index = 0;  // position in the device's list of physical pages
  // Exported for another process (PhysicalPages::share): a POSIX file descriptor kept open
  // until the page is released, -1 while never shared. A shared page never moves to other
  // memory under a live allocation (Migrator::move refuses).
  int shared_fd = -1;
  PhysicalPage* idle_prev = nullptr;
  PhysicalPage* idle_next = nullptr;
  // Set for a page of a chunk (below): its position in it. Such a page is never in an idle
  // list and never mapped alone.
  PhysicalChunk* chunk = nullptr;
  std::uint32_t slot = 0;
};

// One physical allocation of several pages that moves as one piece (physical_pages.h,
// chunks): the driver maps an allocation only whole, and per page its calls cost 10-60 times
// what they cost for a 64 MiB allocation (docs/offload.md). Chunks serve held segments
// (regions) only: a new held segment's pages are held in device chunks (PageMapper::hold), and
// a region's bulk moves (bulk_move.cpp) move them chunk by chunk. A chunk is mapped whole at
// consecutive pages of one held segment (page slot k at the first page's address + k pages)
// or nowhere, and host chunks also at their home range.
struct PhysicalChunk {
  device::PhysicalHandle handle = 0;
  bool host = false;
  std::uintptr_t home = 0;           // host chunks: their whole range mapped with access, or 0
  std::vector<PhysicalPage*> pages;  // in slot order
  std::size_t idle = 0;              // pages without owner
  std::size_t vacated = 0;           // pages release_vacated was told of since it was taken
  std::size_t count() const { return pages.size(); }
  // No page of the chunk is mapped in a segment (its home aside).
  bool mapped_nowhere() const {
    for (const PhysicalPage* p : pages) {
      if (!p->mappings.empty()) return false;
    }
    return true;
  }
};

// A run of consecutive idle pages of one segment, parked by the free of the block that used
// them (parked_pages.h).
struct ParkedRun {
  Segment* segment = nullptr;
  std::size_t first = 0;     // index of its first page: its key in Segment::parked
  std::size_t count = 0;
  std::uint64_t epoch = 0;   // page first + i became idle at epoch + i
  ParkedRun* older = nullptr;  // neighbours in the device's list of runs, in epoch order
  ParkedRun* newer = nullptr;

  std::size_t last() const { return first + count - 1; }
};

struct Segment {
  // Chosen once, when the segment is created:
  //   plain        device memory from one device malloc
  //   paged        a reserved virtual range whose pages are mapped on demand (page_mapper.h)
  //   pinned_host  pinned host memory mapped for the device: the host tier without
  //                host-located pages; it never moves
  enum class Kind : std::uint8_t { plain, paged, pinned_host };

  std::uintptr_t base = 0;
  std::size_t size = 0;
  Kind kind = Kind::plain;
  // Serves spilled requests only (the host tier): its free blocks sit in the pool's spill bins,
  // out of reach of requests that fit the device, so that a workload spilling every step
  // finds its spilled pages where it left them. Paged or pinned_host.
  bool spill = false;
  // Paged and held by a region (regions.h): every page is mapped, with one user (the hold),
  // for the segment's life; blocks over it add no users. pause and resume alone change its
  // pages' backing. paused: the region is paused, and every page is either on a host page
  // (kept, one user) or unmapped without users (dropped).
  bool held = false;
  bool paused = false;
  StreamPool* pool = nullptr;
  Block* first = nullptr;
  // Paged segments: one entry per granule of [base, base + size); empty for the other kinds.
  PageTable<Page> pages;
  std::size_t mapped_pages = 0;  // pages with a physical page mapped
  std::size_t host_mapped = 0;   // of which to a host page (such segments do not park)
  std::map<std::size_t, ParkedRun> parked;  // runs of parked pages by first page

  bool paged() const { return kind == Kind::paged; }
  bool pinned_host() const { return kind == Kind::pinned_host; }
  // Indices of the first and last page under [addr, addr + size), size > 0 (paged only).
  struct PageSpan {
    std::size_t first;
    std::size_t last;
  };
  PageSpan pages_under(std::uintptr_t addr, std::size_t size, std::size_t page_size) const {
    return {(addr - base) / page_size, (addr + size - 1 - base) / page_size};
  }

  bool wholly_free() const {
    return first->state == Block::State::free && first->size == size;
  }
};

struct Slab {
  Block* block = nullptr;  // the memory
  StreamPool* pool = nullptr;
  int cls = 0;
  std::uint32_t object_size = 0;
  std::uint32_t capacity = 0;
  std::uint32_t used = 0;       // objects allocated or pending
  std::int32_t available_index = -1;  // position in SlabClass::available, -1 if full
  std::vector<std::uint32_t> free_slots;

  std::uintptr_t base() const { return block->addr; }
};

struct SlabClass {
  std::vector<Slab*> available;  // slabs with at least one free slot
  std::size_t empty = 0;         // how many of them are wholly empty
};

}  // namespace cudalloc
