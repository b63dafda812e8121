// StreamPool: the free blocks and slabs that one stream may reuse without synchronization.
#pragma once

#include <vector>

#include "core/free_bins.h"
#include "core/pool_types.h"

namespace cudalloc {

struct StreamPool {
  StreamHandle stream = 0;
  FreeBins free_blocks;
  std::vector<SlabClass> classes;
  std::vector<Segment*> segments;
};

}  // namespace cudalloc
