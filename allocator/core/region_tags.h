// RegionTags: the names of memory regions (sleep and wake, regions.h) and each thread's
// current one.
//
// A region is named by a tag, a short string chosen by the program ("weights", "kv_cache").
// Tags are interned once, process-wide, into small ids (RegionId, 1 and up; 0 is the
// untagged default region) that never change or go away, so every device agrees on them and
// an id can be kept anywhere without a lifetime question.
//
// Each thread has a stack of current regions (region_begin / region_end, nestable up to
// kMaxDepth): a new allocation of that thread that is not routed to a private pool goes to
// the innermost region, and a private pool (a CUDA graph's, a MemPool) created meanwhile
// belongs to it. The stack is a fixed array: reading the current region on the path of every
// allocation is one thread-local load, and nothing here allocates except interning a new tag.
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/errors.h"

namespace cudalloc {

using RegionId = std::uint32_t;
inline constexpr RegionId kNoRegion = 0;

class RegionTags {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr std::size_t kMaxTag = 255;
  static constexpr std::size_t kMaxRegions = 4096;

  // The id of `tag`, interned at the first call. invalid_value for an empty tag, one longer
  // than kMaxTag, or past kMaxRegions distinct tags.
  static Error intern(std::string_view tag, RegionId* id);
  // The id of a tag interned before, or kNoRegion.
  static RegionId find(std::string_view tag);
  // The tag of `id` ("" for kNoRegion or an unknown id).
  static std::string name(RegionId id);

  // The calling thread's innermost region, or kNoRegion.
  static RegionId current();
  // Enters `id` on the calling thread; invalid_value past kMaxDepth.
  static Error begin(RegionId id);
  // Leaves the innermost region; invalid_value when none is entered.
  static Error end();
};

}  // namespace cudalloc
