// A copy of one device's allocator state, taken under its lock and then read without it
// (snapshots, inspect). Slabs appear in the schema's terms: each live object is an allocated
// block, each run of free slots one free block.
#pragma once

#include <string>
#include <vector>

#include "core/settings.h"
#include "core/stats.h"
#include "core/trace.h"

namespace cudalloc {

struct BlockState {
  enum class Kind { allocated, pending, free };
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  Kind kind = Kind::free;
};

struct SlabState {
  std::uintptr_t addr = 0;
  std::size_t bytes = 0;
  std::size_t object_size = 0;
  std::size_t capacity = 0;
  std::size_t used = 0;
};

// A run of consecutive pages of a paged segment in one state: mapped to a physical page or
// not, and where that page lies (host: a host-located page of the host tier).
struct PageRun {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  bool mapped = false;
  bool host = false;  // mapped runs only
};

struct SegmentState {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  device::StreamHandle stream = 0;
  std::uint64_t private_pool = 0;  // the private pool it belongs to (private_pools.h), or 0
  bool has_slabs = false;
  // A run of mapped pages of a paged segment (one SegmentState per run, so that segment sizes
  // add up to the physical memory mapped, each physical page counted once).
  bool paged = false;
  // Bytes of it in host memory (the host tier): host-located pages, or a whole host segment.
  std::size_t host_bytes = 0;
  // A region's held segment (regions.h), shown whole: its tag, whether it is paused, and the
  // bytes of it that are dropped (no memory behind them until resume).
  std::string region;
  bool paused = false;
  std::size_t dropped_bytes = 0;
  std::vector<BlockState> blocks;  // address order, covering the segment
  // Paged segments only (empty otherwise): runs covering the segment in address order, no
  // two neighbours in the same state. A run of pages in use is mapped throughout (it is cut
  // where a page is not), so only a region's segment has unmapped runs: its dropped pages.
  std::vector<PageRun> pages;
  std::vector<SlabState> slabs;
};

// A region (regions.h) as one device holds it.
struct RegionState {
  std::string tag;
  bool paused = false;
  bool kept = false;  // paused with its bytes on the host
  std::size_t device_bytes = 0;
  std::size_t host_bytes = 0;
  std::size_t dropped_bytes = 0;
  std::size_t segments = 0;
};

struct DeviceState {
  int device = 0;
  std::string backend;
  Stats stats;
  Settings settings;
  std::size_t reserve_cap = 0;  // 0: none
  std::size_t device_total = 0;
  std::vector<SegmentState> segments;  // address order
  std::vector<RegionState> regions;     // by tag
  std::vector<TraceEvent> trace;
  std::uint64_t trace_dropped = 0;
};

}  // namespace cudalloc
