// PytorchModel: PyTorch's native CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// default settings) as a model, to replay a trace under PyTorch's rules:
//   - sizes round up to 512 B; requests up to 1 MiB use the small pool, others the large
//   - a new segment (one cudaMalloc) is 2 MiB (small pool), 20 MiB (requests under 10 MiB)
//     or the request rounded up to 2 MiB
//   - best fit among the free blocks of the same pool and stream, (stream, size, address)
//   - a block splits when the rest is at least 512 B (small pool) or above 1 MiB (large)
//   - freed blocks merge with free neighbours of the same segment
//   - out of memory: every wholly free segment is released, then one retry
// Segments get increasing addresses, as fresh device memory would. The block bookkeeping is
// BlockModel's, shared with ExpandableModel. segment_allocs() counts cudaMalloc calls,
// segment_frees() cudaFree calls.
#pragma once

#include "replay/block_model.h"

namespace cudalloc::replay {

class PytorchModel final : public BlockModel {
 public:
  explicit PytorchModel(std::uint64_t capacity) : BlockModel(capacity) {}

 private:
  // The size of the segment that a request of `size` bytes (rounded) gets.
  static std::uint64_t segment_size(std::uint64_t size);
  Block* grow(bool small, std::uint64_t stream, std::uint64_t size) override;
  void release_cache() override;
  std::uint64_t min_rest(bool small) const override { return small ? kMinBlock : kSmallSize + 1; }
};

}  // namespace cudalloc::replay
