// FastFrees: the last few blocks freed in stream order, kept whole for the next allocation of
// the same size on the same stream (deferred coalescing, as in dlmalloc's fast bins).
//
// A cached allocate+free pair of a block costs its merge with the free neighbours, the split
// that follows, and in paged segments the pages' users and the parked run (page_mapper.h):
// four bin operations and a run cut, per pair, whatever the size. A block kept here skips
// all of it: its pages keep their users (still mapped, accessible, owned), it stays out of
// the bins, and an allocation of exactly its size on its stream takes it back as it is.
//
// Why this is safe: a kept block is reused only by its own pool's stream, which is what a
// free in stream order allows at once anyway (the bins would hand it to that stream too);
// frees that wait for other streams or for a fence never come here.
//
// Why it does not change the policy: every allocation that is not a hit, and every other
// operation that changes or reports the pools' structure, first settles every kept block
// (the caller frees each for real, in the order they were kept), so best fit, page claims,
// releases and snapshots see the pools as if the blocks had been freed at once. The stats
// count a kept block's bytes as cached from the moment of its free, and the free blocks as
// they would be merged (merged_block_delta).
//
// Invariants (validate.cpp): a kept block has State::fast, is in no bin, is not live, and
// lies in a segment of a shared (not private, not region) pool that is neither a spill
// segment nor pinned host memory nor holds host pages; its pages count it as a user.
// Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <cstddef>

#include "core/pool_types.h"

namespace cudalloc {

class FastFrees {
 public:
  static constexpr int kSlots = 4;

  bool empty() const { return count_ == 0; }
  int count() const { return count_; }

  // Keeps `block` (State::fast). Returns the oldest block it pushed out, for the caller to
  // free for real, or nullptr.
  Block* keep(Block* block) {
    Block* out = nullptr;
    if (count_ == kSlots) {
      out = slots_[0];
      for (int i = 1; i < kSlots; ++i) slots_[i - 1] = slots_[i];
      --count_;
    }
    block->state = Block::State::fast;
    slots_[count_++] = block;
    return out;
  }

  // The newest kept block of `pool` of exactly `size` bytes, removed (State::allocated), or
  // nullptr.
  Block* take(const StreamPool& pool, std::size_t size) {
    for (int i = count_; i-- > 0;) {
      Block* b = slots_[i];
      if (b->size != size || b->segment->pool != &pool) continue;
      for (int j = i + 1; j < count_; ++j) slots_[j - 1] = slots_[j];
      --count_;
      b->state = Block::State::allocated;
      return b;
    }
    return nullptr;
  }

  // Removes every kept block, oldest first, and calls settle(block) for each (State::allocated
  // again, for the caller's free).
  template <typename Settle>
  void drain(Settle&& settle) {
    const int n = count_;
    Block* blocks[kSlots];
    for (int i = 0; i < n; ++i) blocks[i] = slots_[i];
    count_ = 0;
    for (int i = 0; i < n; ++i) {
      blocks[i]->state = Block::State::allocated;
      settle(blocks[i]);
    }
  }

  // Forgets every kept block (their segments are being destroyed: drop_everything).
  void forget() { count_ = 0; }

  // How many more free blocks the pools would count if every kept block were merged with its
  // free neighbours now: a maximal run of adjacent free and kept blocks is one block, and two
  // free blocks are never adjacent, so each kept block adds one, less one per neighbour it
  // would merge with (a kept next neighbour is counted once, from the block before it).
  std::int64_t merged_block_delta() const {
    std::int64_t delta = 0;
    for (int i = 0; i < count_; ++i) {
      const Block* b = slots_[i];
      delta += 1;
      if (b->prev != nullptr && b->prev->state == Block::State::free) delta -= 1;
      if (b->next != nullptr &&
          (b->next->state == Block::State::free || b->next->state == Block::State::fast)) {
        delta -= 1;
      }
    }
    return delta;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (int i = 0; i < count_; ++i) f(static_cast<const Block*>(slots_[i]));
  }

 private:
  Block* slots_[kSlots] = {};
  int count_ = 0;
};

}  // namespace cudalloc
