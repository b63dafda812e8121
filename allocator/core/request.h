// The explicit description of one allocation request as it travels down the pools, and the
// small enums that replace boolean parameters.
//
// A request's mode is a parameter, never a member of the allocator: callees read it from here,
// so nothing has to be restored when a step fails half way.
#pragma once

#include <cstddef>

namespace cudalloc {

// Whether a request may take new device memory or must be served from what is cached without
// any driver call (the first try while device-ordered frees wait for a fence: in paged mode
// only pages still mapped where they are needed serve, so that the try never remaps).
enum class Growth { may_grow, cache_only };

// Which memory serves the request:
//   device         device memory within the budget
//   host_pages     the host tier with host-located physical pages (paged mode): device pages
//                  first, host pages for the rest
//   host_segments  the host tier with pinned host segments (no paging, or no host pages)
enum class Tier { device, host_pages, host_segments };

struct Request {
  std::size_t size = 0;
  Growth growth = Growth::may_grow;
  Tier tier = Tier::device;

  bool may_grow() const { return growth == Growth::may_grow; }
  bool spilling() const { return tier != Tier::device; }
};

// What a block of the block pool is for: a caller's allocation, or a slab of small objects.
enum class BlockUse { allocation, slab };

// Whether a check of pending work may block the host.
enum class Wait { poll, block };

}  // namespace cudalloc
