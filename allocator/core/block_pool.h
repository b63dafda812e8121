// BlockPool: requests above slab_max (and the slabs themselves) are best-fit blocks of
// segments, split on allocation and coalesced with free neighbours on free.
//
// Search order for a request on stream T:
//   1. the best-fitting free block of T's pool (no synchronization needed);
//   2. (shared pools only) a wholly free plain segment of another stream's shared pool,
//      moved to T after an event recorded on its stream now has completed or T has been made
//      to wait on it;
//   3. a new segment within the budget: plain (device malloc), paged (a virtual range whose
//      pages page_mapper.h maps under blocks in use) or, for a spilled request without host
//      pages, pinned host memory. Private pools (private_pools.h) get plain ones, or, for a
//      region in paged mode, held ones (regions.h).
// Spilled requests (Request::tier) only use spill segments, whose free blocks sit in their
// own bins, and only they do. Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <cstddef>
#include <vector>

#include "core/budget.h"
#include "core/ledger.h"
#include "core/page_mapper.h"
#include "core/request.h"
#include "core/settings.h"
#include "core/stream_pool.h"
#include "core/stream_sync.h"

namespace cudalloc {

class BlockPool {
 public:
  static constexpr std::size_t kBlockRound = 512;

  BlockPool(device::Device& device, int ordinal, const Settings& settings, const Budget& budget,
            Ledger& ledger, StreamSync& sync, StreamPools& pools, PageMapper* mapper)
      : device_(device), ordinal_(ordinal), settings_(settings), budget_(budget),
        ledger_(ledger), sync_(sync), pools_(pools), mapper_(mapper) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // An allocated block of at least request.size bytes (rounded to kBlockRound) in `pool`.
  Error allocate(StreamPool& pool, const Request& request, BlockUse use, Block** out);
  // Returns an allocated (or slab, or pending) block to its pool's free blocks.
  void free(Block* block);
  // Allocates exactly [addr, addr + size) of the plain segment `seg` (a restored checkpoint,
  // private_pools.h): invalid_value unless one free block covers it. `size` is a block size
  // (a multiple of kBlockRound) and `addr` a block boundary of the checkpointed layout.
  Error allocate_at(Segment& seg, std::uintptr_t addr, std::size_t size, Block** out);
  // Returns every wholly free segment of `kind` (plain or pinned_host) to the driver after one
  // device synchronization; the bytes released.
  std::size_t release_free_segments(Segment::Kind kind);
  // Moves the wholly free plain segment `seg` to the pool `to`. The caller guarantees that no
  // queued work of its old pool's stream can still use it, or that `to` has the same stream.
  void adopt_segment(Segment* seg, StreamPool& to);
  // Returns every wholly free paged segment whose pages are all unmapped, of `only` (or of
  // every pool), and the pools left without segments: address space and host memory come
  // back. The caller guarantees that no queued work of those pools' streams is left (a device
  // synchronization, or a wait for the one stream).
  void release_free_ranges(StreamPool* only = nullptr);
  // Forgets the wholly free paged segment `seg` of `pool`, whose pages are all unmapped, and
  // returns its address range.
  void drop_segment(StreamPool& pool, Segment* seg);
  // Returns every segment to the driver and forgets all blocks (reset, destructor).
  void drop_everything();

 private:
  Block* take_free_block(StreamPool& pool, std::size_t size, const Request& request);
  Block* steal_segment(StreamPool& pool, std::size_t size);
  Error new_segment(StreamPool& pool, std::size_t size, const Request& request, BlockUse use,
                    Block** out);
  Error new_plain_segment(StreamPool& pool, std::size_t size, BlockUse use, Block** out);
  Error new_paged_segment(StreamPool& pool, std::size_t size, const Request& request,
                          Block** out);
  // A held segment of a region's pool (regions.h): a range of the segment size, every page
  // mapped at once.
  Error new_held_segment(StreamPool& pool, std::size_t size, const Request& request,
                         Block** out);
  Error new_host_segment(StreamPool& pool, std::size_t size, Block** out);
  std::size_t segment_size_for(std::size_t size, BlockUse use) const;
  // A new segment record over [base, base + bytes) in `pool`, one free block covering it.
  Segment* add_segment(StreamPool& pool, std::uintptr_t base, std::size_t bytes,
                       Segment::Kind kind, bool spill);
  void delete_segment(StreamPool& pool, Segment* seg);
  void insert_free(StreamPool& pool, Block* block);
  void erase_free(StreamPool& pool, Block* block);
  // Block records come from a free list: splitting and merging allocate nothing.
  Block* new_block();
  void recycle_block(Block* block) { spare_blocks_.push_back(block); }
  void split(StreamPool& pool, Block* block, std::size_t size);
  // Inserts a free block into its pool's free bins, merged with free neighbours.
  void merge_free(Block* block);
  device::Status free_segment_memory(const Segment& seg);

  device::Device& device_;
  const int ordinal_;
  const Settings& settings_;
  const Budget& budget_;
  Ledger& ledger_;
  StreamSync& sync_;
  StreamPools& pools_;
  PageMapper* mapper_;  // nullptr without paging
  std::vector<Block*> spare_blocks_;
};

}  // namespace cudalloc
