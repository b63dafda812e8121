#include "core/size_classes.h"

#include <algorithm>

#include "util/units.h"

namespace cudalloc {

SizeClasses::SizeClasses(std::size_t slab_max, SlabShape shape) {
  slab_max = std::clamp(slab_max, kGranule, kMaxSlabMax);
  for (std::size_t s = kGranule; s <= 1024; s += kGranule) sizes_.push_back(s);
  for (std::size_t base = 1024; sizes_.back() < slab_max; base *= 2) {
    const std::size_t step = std::max(kGranule, base / 8);
    for (std::size_t s = base + step; s <= 2 * base; s += step) sizes_.push_back(s);
  }
  // Drop classes above the first one that covers slab_max.
  const auto covering = std::lower_bound(sizes_.begin(), sizes_.end(), slab_max);
  sizes_.erase(covering + 1, sizes_.end());

  for (std::size_t s : sizes_) {
    slab_bytes_.push_back(std::max(shape.unit, round_up(shape.min_objects * s, shape.unit)));
  }
  lookup_.resize(sizes_.back() / kGranule);
  int cls = 0;
  for (std::size_t i = 0; i < lookup_.size(); ++i) {
    const std::size_t bytes = (i + 1) * kGranule;
    while (sizes_[static_cast<std::size_t>(cls)] < bytes) ++cls;
    lookup_[i] = static_cast<std::uint8_t>(cls);
  }
}

}  // namespace cudalloc
