// Size classes for the slab pool: every request up to `slab_max` is rounded up to a class and
// served from a slab of that class.
//
// Classes are multiples of 256 bytes (so every object is 256-byte aligned inside a 512-byte
// aligned slab): 256, 512, 768, 1024, then up to eight evenly spaced classes per doubling
// (never closer than 256 bytes), which bounds the rounding waste at 12.5% above 2 KiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudalloc {

// How big a slab of each class is: at least `min_objects` objects, in whole `unit`s.
struct SlabShape {
  std::size_t unit;
  std::size_t min_objects;
};

class SizeClasses {
 public:
  static constexpr std::size_t kGranule = 256;
  static constexpr std::size_t kMaxSlabMax = std::size_t{1} << 20;
  // Plain segments: slabs of whole 2 MiB units. Paged segments: slabs share pages, so small
  // slabs bound what a partly used slab of each class holds.
  static constexpr SlabShape kPlainSlabs{std::size_t{2} << 20, 8};
  static constexpr SlabShape kPagedSlabs{std::size_t{64} << 10, 4};

  // slab_max is clamped to [kGranule, kMaxSlabMax] and rounded up to a class.
  explicit SizeClasses(std::size_t slab_max, SlabShape shape = kPlainSlabs);

  std::size_t slab_max() const { return sizes_.back(); }
  int count() const { return static_cast<int>(sizes_.size()); }
  std::size_t size_of(int cls) const { return sizes_[static_cast<std::size_t>(cls)]; }
  std::size_t slab_bytes(int cls) const { return slab_bytes_[static_cast<std::size_t>(cls)]; }
  // Class of a request of 1..slab_max() bytes.
  int class_of(std::size_t bytes) const {
    return lookup_[(bytes - 1) / kGranule];
  }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> slab_bytes_;
  std::vector<std::uint8_t> lookup_;  // (bytes - 1) / kGranule -> class
};

}  // namespace cudalloc
