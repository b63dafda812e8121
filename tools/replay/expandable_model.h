// ExpandableModel: PyTorch's caching allocator with expandable segments
// (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; c10/cuda/CUDACachingAllocator.cpp,
// ExpandableSegment and the expandable paths of DeviceCachingAllocator) as a model, to replay
// a trace under those rules:
//   - sizes round up to 512 B; requests up to 1 MiB use the small pool, others the large
//   - a segment is address space for 9/8 of the device's memory (the capacity), of one
//     stream and pool, mapped in pages of the pool's granularity: 2 MiB (small pool) or
//     20 MiB (large); segments get increasing, page-aligned addresses
//   - best fit among the mapped free blocks of the same pool and stream, (stream, size,
//     address), except that a block whose unmapped neighbour makes it reach further is passed
//     over while the next fitting block reaches less far (get_free_block's expandable_size)
//   - no free block fits: the lowest-addressed unmapped range of the stream's segments in the
//     pool that, with the free blocks beside it (a free block just before it included), has
//     room for the request is mapped, page by page, as much as the request needs: a free block
//     at the end of a segment is extended rather than a new block mapped beside it. No such
//     range: a new segment (find_expandable_block, map_block)
//   - a block splits whenever the rest is at least 512 B, in both pools (should_split)
//   - freed blocks merge with free mapped neighbours; freed memory stays mapped
//   - out of memory (a page to map would exceed the capacity): in every free block, the pages
//     wholly inside it are unmapped (release_cached_blocks, unmap_block); a segment left
//     wholly unmapped is released; then one retry
// Reserved = mapped bytes. segment_allocs() counts map calls (each maps one or more pages
// and is one SEGMENT_MAP in PyTorch's trace), segment_frees() unmap calls; page_maps() and
// page_unmaps() count the pages.
#pragma once

#include "replay/block_model.h"

namespace cudalloc::replay {

class ExpandableModel final : public BlockModel {
 public:
  explicit ExpandableModel(std::uint64_t capacity) : BlockModel(capacity) {}

  std::uint64_t page_maps() const { return page_maps_; }
  std::uint64_t page_unmaps() const { return page_unmaps_; }
  static std::uint64_t page_size(bool small) { return small ? kSmallBuffer : kLargeBuffer; }

 private:
  struct ByAddress {
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      return a->addr < b->addr;
    }
  };
  using Unmapped = std::set<Block*, ByAddress>;  // unmapped ranges of every segment

  Pool::iterator fit(bool small, std::uint64_t stream, std::uint64_t size) override;
  Block* grow(bool small, std::uint64_t stream, std::uint64_t size) override;
  void release_cache() override;
  std::uint64_t min_rest(bool) const override { return kMinBlock; }

  Unmapped& unmapped(bool small) { return small ? small_unmapped_ : large_unmapped_; }
  // The block at which `size` bytes of free or unmapped blocks begin, lowest address first
  // (a new segment when none has room).
  Block* find_room(bool small, std::uint64_t stream, std::uint64_t size);
  // Maps the pages under the first `size` bytes of the unmapped block `block`; the mapped
  // part, merged with its free neighbours, joins the pool and is returned. nullptr (nothing
  // changed) when the pages do not fit in the capacity.
  Block* map(Block* block, std::uint64_t size);
  // Unmaps the pages wholly inside the free block `block` (in its pool).
  void unmap_free_pages(Block* block);

  Unmapped small_unmapped_, large_unmapped_;
  std::uint64_t page_maps_ = 0, page_unmaps_ = 0;
};

}  // namespace cudalloc::replay
