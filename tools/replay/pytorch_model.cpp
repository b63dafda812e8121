#include "replay/pytorch_model.h"

#include <algorithm>

namespace cudalloc::replay {
namespace {

constexpr std::uint64_t kMinBlock = 512;
constexpr std::uint64_t kSmallSize = 1 << 20;
constexpr std::uint64_t kSmallBuffer = 2 << 20;
constexpr std::uint64_t kMinLargeAlloc = 10 << 20;
constexpr std::uint64_t kLargeBuffer = 20 << 20;
constexpr std::uint64_t kRoundLarge = 2 << 20;

std::uint64_t round_size(std::uint64_t size) {
  return size < kMinBlock ? kMinBlock : (size + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::uint64_t allocation_size(std::uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

}  // namespace

PytorchModel::~PytorchModel() {
  for (Block* b : heads_) {
    while (b != nullptr) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

PytorchModel::Block* PytorchModel::find_free(bool small, std::uint64_t stream,
                                             std::uint64_t size) {
  Block key{stream, size, 0, small};
  Pool& p = pool(small);
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  p.erase(it);
  return b;
}

PytorchModel::Block* PytorchModel::new_segment(bool small, std::uint64_t stream,
                                               std::uint64_t size) {
  const std::uint64_t bytes = allocation_size(size);
  if (reserved_ + bytes > capacity_) return nullptr;
  auto* b = new Block{stream, bytes, next_addr_, small};
  next_addr_ += bytes;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_allocs_;
  heads_.push_back(b);
  return b;
}

void PytorchModel::release_free_segments() {
  for (Pool* p : {&small_, &large_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      reserved_ -= b->size;
      ++segment_frees_;
      heads_.erase(std::find(heads_.begin(), heads_.end(), b));
      delete b;
      it = p->erase(it);
    }
  }
}

bool PytorchModel::allocate(std::uint64_t size, std::uint64_t stream, void** handle) {
  // Larger than the device: it can never fit. Near 2^64, rounding up would wrap to a small size.
  if (size > capacity_ || size > UINT64_MAX - kLargeBuffer) return false;
  size = round_size(size);
  const bool small = size <= kSmallSize;
  Block* block = find_free(small, stream, size);
  if (block == nullptr) block = new_segment(small, stream, size);
  if (block == nullptr) {
    release_free_segments();
    block = new_segment(small, stream, size);
    if (block == nullptr) return false;
  }
  const std::uint64_t rest = block->size - size;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    // The allocation takes the front; the remainder stays free after it.
    auto* remaining = new Block{stream, rest, block->addr + size, small};
    remaining->prev = block;
    remaining->next = block->next;
    if (block->next != nullptr) block->next->prev = remaining;
    block->next = remaining;
    block->size = size;
    pool(small).insert(remaining);
  }
  block->allocated = true;
  *handle = block;
  return true;
}

void PytorchModel::free(void* handle) {
  auto* block = static_cast<Block*>(handle);
  Pool& p = pool(block->small);
  block->allocated = false;
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    p.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    p.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  p.insert(block);
}

}  // namespace cudalloc::replay
