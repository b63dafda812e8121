// FreeBins: the free blocks of one stream's pool, for exact best fit in near-constant time.
//
// Sizes (multiples of 512 B) fall into bins by their top five bits: the power of two and the
// next four bits, so each bin spans 1/16 of a doubling. A bin is an intrusive doubly linked
// list (insert and erase are O(1), no allocation), and a two-level bitmap finds the next
// non-empty bin. The best fit for a request is the smallest block of at least its size, lowest
// address first: the request's own bin is scanned for it, else the smallest block of the
// next non-empty bin (every block there fits) is taken. Bins are narrow, so scans are short.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/pool_types.h"

namespace cudalloc {

class FreeBins {
 public:
  static constexpr int kSubBits = 4;
  static constexpr int kMinShift = 9;   // 512 B
  static constexpr int kMaxShift = 52;  // beyond any device
  static constexpr int kBins = (kMaxShift - kMinShift + 1) << kSubBits;
  static constexpr int kWords = (kBins + 63) / 64;

  void insert(Block* block);
  void erase(Block* block);
  // The best-fitting block of at least `size` bytes (not removed), or nullptr.
  Block* best_fit(std::size_t size) const;
  std::size_t size() const { return count_; }
  bool contains(const Block* block) const;

  template <typename F>
  void for_each(F&& f) const {
    for (int b = 0; b < kBins; ++b) {
      for (Block* x = heads_[b]; x != nullptr; x = x->bin_next) f(x);
    }
  }

  static int bin_of(std::size_t size);

 private:
  static Block* smallest(Block* head, std::size_t at_least);
  int next_nonempty(int bin) const;  // first non-empty bin >= bin, or -1

  Block* heads_[kBins] = {};
  std::uint64_t words_[kWords] = {};  // bit per non-empty bin
  std::uint64_t summary_ = 0;         // bit per non-zero word (kWords <= 64)
  std::size_t count_ = 0;
};

}  // namespace cudalloc
