// BlockModel: what PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp) does the
// same way with and without expandable segments, as the base of the replay's two models of it
// (PytorchModel, ExpandableModel):
//   - sizes round up to 512 B; requests up to 1 MiB use the small pool, others the large
//   - a pool's free blocks are ordered by (stream, size, address); best fit is the first one
//     of the request's stream at least as large (a model may refine the choice: fit())
//   - when no free block fits, the model gets new memory (grow()); when that fails it
//     releases what its rules allow (release_cache()) and tries once more
//   - an allocation takes the front of its block; the rest stays free after it when it is at
//     least the model's min_rest()
//   - a freed block merges with its free, mapped neighbours of the same segment
// A segment is a chain of blocks (prev / next) over contiguous addresses. Its first block is
// never deleted (a merge keeps the lower block, a split the front), so it names the segment.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace cudalloc::replay {

class BlockModel {
 public:
  BlockModel(const BlockModel&) = delete;
  BlockModel& operator=(const BlockModel&) = delete;

  // Returns false when the request does not fit even after releasing the cache (released
  // also for a request larger than the device).
  bool allocate(std::uint64_t size, std::uint64_t stream, void** handle);
  // `handle`: from allocate, not freed since.
  void free(void* handle);

  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t peak_reserved() const { return peak_reserved_; }
  // Calls to the driver that obtained / returned device memory (the model says which).
  std::uint64_t segment_allocs() const { return segment_allocs_; }
  std::uint64_t segment_frees() const { return segment_frees_; }

 protected:
  static constexpr std::uint64_t kMinBlock = 512;
  static constexpr std::uint64_t kSmallSize = 1 << 20;
  static constexpr std::uint64_t kSmallBuffer = 2 << 20;
  static constexpr std::uint64_t kLargeBuffer = 20 << 20;

  struct Block {
    std::uint64_t stream;
    std::uint64_t size;
    std::uint64_t addr;
    bool small;
    bool allocated = false;
    bool mapped = true;  // false: address space of an expandable segment without memory
    Block* prev = nullptr;
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->addr < b->addr;
    }
  };
  using Pool = std::set<Block*, BySize>;  // free, mapped blocks

  explicit BlockModel(std::uint64_t capacity) : capacity_(capacity) {}
  virtual ~BlockModel();

  Pool& pool(bool small) { return small ? small_ : large_; }
  // The first free block of `stream` in the pool with at least `size` bytes, or end().
  Pool::iterator first_fit(bool small, std::uint64_t stream, std::uint64_t size);
  // Cuts `block` after its first `front` bytes; the rest, returned, is a new block after it
  // with the same state. Neither is added to or removed from any set.
  static Block* split(Block* block, std::uint64_t front);
  // `block` absorbs its next block, which is deleted; the caller has taken it out of its set.
  static void absorb_next(Block* block);
  // `block` (mapped, free, in no set) merged with its free mapped neighbours, which leave
  // their pool: the surviving block, in no set.
  Block* coalesce(Block* block);
  // A new segment of one free block of `size` bytes at the next fresh address that is a
  // multiple of `align`, in no set.
  Block* new_segment(bool small, std::uint64_t stream, std::uint64_t size, bool mapped,
                     std::uint64_t align);
  // Deletes a segment that is a single block (already out of its set).
  void drop_segment(Block* head);
  // Accounts `bytes` of new device memory: false, and nothing changes, past the capacity.
  bool reserve(std::uint64_t bytes);
  void unreserve(std::uint64_t bytes) { reserved_ -= bytes; }

  const std::uint64_t capacity_;
  std::uint64_t segment_allocs_ = 0, segment_frees_ = 0;

 private:
  // The free block the model picks for `size` bytes on `stream`, taken out of its pool, or
  // nullptr. Default: first_fit.
  virtual Pool::iterator fit(bool small, std::uint64_t stream, std::uint64_t size);
  // New memory holding a free block of at least `size` bytes, in no set, or nullptr.
  virtual Block* grow(bool small, std::uint64_t stream, std::uint64_t size) = 0;
  // Out of memory: gives back to the driver what the model's rules release.
  virtual void release_cache() = 0;
  // The smallest remainder split off a block of pool `small` as a free block of its own.
  virtual std::uint64_t min_rest(bool small) const = 0;
  Block* take_free(bool small, std::uint64_t stream, std::uint64_t size);

  Pool small_, large_;
  std::vector<Block*> heads_;  // the first block of every segment
  std::uint64_t next_addr_ = std::uint64_t{1} << 40;
  std::uint64_t reserved_ = 0, peak_reserved_ = 0;
};

}  // namespace cudalloc::replay
