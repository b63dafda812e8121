// StreamPool: the free blocks and slabs that one stream may reuse without synchronization.
#pragma once

#include <vector>

#include "core/free_bins.h"
#include "core/pool_types.h"

namespace cudalloc {

struct StreamPool {
  StreamHandle stream = 0;
  FreeBins free_blocks;
  FreeBins spill_free_blocks;  // free blocks of spill segments (Segment::spill)
  std::vector<SlabClass> classes;
  std::vector<Segment*> segments;
  // Pages of this pool that became idle at or before this page epoch are no longer used by
  // any queued work on `stream` (the host has waited for the stream since).
  std::uint64_t settled_epoch = 0;
};

}  // namespace cudalloc
