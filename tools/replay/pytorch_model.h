// PytorchModel: PyTorch's native CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// default settings) as a model, to replay a trace under PyTorch's rules:
//   - sizes round up to 512 B; requests up to 1 MiB use the small pool, others the large
//   - a new segment is 2 MiB (small pool), 20 MiB (requests under 10 MiB) or the request
//     rounded up to 2 MiB
//   - best fit among the free blocks of the same pool and stream, (stream, size, address)
//   - a block splits when the rest is at least 512 B (small pool) or above 1 MiB (large)
//   - freed blocks merge with free neighbours of the same segment
//   - out of memory: every wholly free segment is released, then one retry
// Segments get increasing addresses, as fresh device memory would.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace cudalloc::replay {

class PytorchModel {
 public:
  explicit PytorchModel(std::uint64_t capacity) : capacity_(capacity) {}
  ~PytorchModel();
  PytorchModel(const PytorchModel&) = delete;
  PytorchModel& operator=(const PytorchModel&) = delete;

  // Returns false when the request does not fit even after releasing the cache.
  bool allocate(std::uint64_t size, std::uint64_t stream, void** handle);
  void free(void* handle);

  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t peak_reserved() const { return peak_reserved_; }
  std::uint64_t segment_allocs() const { return segment_allocs_; }
  std::uint64_t segment_frees() const { return segment_frees_; }

 private:
  struct Block {
    std::uint64_t stream;
    std::uint64_t size;
    std::uint64_t addr;
    bool small;
    bool allocated = false;
    Block* prev = nullptr;
    Block* next = nullptr;
  };
  struct Order {
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->addr < b->addr;
    }
  };
  using Pool = std::set<Block*, Order>;

  Pool& pool(bool small) { return small ? small_ : large_; }
  Block* find_free(bool small, std::uint64_t stream, std::uint64_t size);
  Block* new_segment(bool small, std::uint64_t stream, std::uint64_t size);
  void release_free_segments();

  std::uint64_t capacity_;
  Pool small_, large_;
  std::vector<Block*> heads_;  // first block of every segment (merges never remove it)
  std::uint64_t next_addr_ = std::uint64_t{1} << 40;
  std::uint64_t reserved_ = 0, peak_reserved_ = 0, segment_allocs_ = 0, segment_frees_ = 0;
};

}  // namespace cudalloc::replay
