#include "core/free_bins.h"

#include <bit>

namespace cudalloc {

static_assert(FreeBins::kWords <= 64, "the summary word must cover every bitmap word");

int FreeBins::bin_of(std::size_t size) {
  if (size < (std::size_t{1} << kMinShift)) return 0;
  const int top = 63 - std::countl_zero(size);  // position of the highest set bit
  const int sub = static_cast<int>((size >> (top - kSubBits)) & ((1 << kSubBits) - 1));
  const int bin = ((top - kMinShift) << kSubBits) + sub;
  return bin < kBins ? bin : kBins - 1;
}

void FreeBins::insert(Block* block) {
  const int b = bin_of(block->size);
  block->bin_prev = nullptr;
  block->bin_next = heads_[b];
  if (heads_[b] != nullptr) heads_[b]->bin_prev = block;
  heads_[b] = block;
  words_[b >> 6] |= std::uint64_t{1} << (b & 63);
  summary_ |= std::uint64_t{1} << (b >> 6);
  ++count_;
}

void FreeBins::erase(Block* block) {
  const int b = bin_of(block->size);
  if (block->bin_prev != nullptr) {
    block->bin_prev->bin_next = block->bin_next;
  } else {
    heads_[b] = block->bin_next;
  }
  if (block->bin_next != nullptr) block->bin_next->bin_prev = block->bin_prev;
  block->bin_prev = block->bin_next = nullptr;
  if (heads_[b] == nullptr) {
    words_[b >> 6] &= ~(std::uint64_t{1} << (b & 63));
    if (words_[b >> 6] == 0) summary_ &= ~(std::uint64_t{1} << (b >> 6));
  }
  --count_;
}

bool FreeBins::contains(const Block* block) const {
  for (const Block* x = heads_[bin_of(block->size)]; x != nullptr; x = x->bin_next) {
    if (x == block) return true;
  }
  return false;
}

Block* FreeBins::smallest(Block* head, std::size_t at_least) {
  Block* best = nullptr;
  for (Block* x = head; x != nullptr; x = x->bin_next) {
    if (x->size < at_least) continue;
    if (best == nullptr || x->size < best->size || (x->size == best->size && x->addr < best->addr)) {
      best = x;
    }
  }
  return best;
}

int FreeBins::next_nonempty(int bin) const {
  if (bin >= kBins) return -1;
  int word = bin >> 6;
  std::uint64_t bits = words_[word] & (~std::uint64_t{0} << (bin & 63));
  if (bits == 0) {
    const std::uint64_t later = word + 1 < 64 ? summary_ & (~std::uint64_t{0} << (word + 1)) : 0;
    if (later == 0) return -1;
    word = std::countr_zero(later);
    bits = words_[word];
  }
  return (word << 6) + std::countr_zero(bits);
}

Block* FreeBins::best_fit(std::size_t size) const {
  const int own = bin_of(size);
  if (Block* b = smallest(heads_[own], size)) return b;
  const int next = next_nonempty(own + 1);
  return next < 0 ? nullptr : smallest(heads_[next], 0);
}

}  // namespace cudalloc
