#include "replay/block_model.h"

#include <algorithm>

namespace cudalloc::replay {

BlockModel::~BlockModel() {
  for (Block* b : heads_) {
    while (b != nullptr) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

bool BlockModel::allocate(std::uint64_t size, std::uint64_t stream, void** handle) {
  // Larger than the device: it can never fit, but PyTorch learns that from the driver, and
  // releases its cache before the retry fails too. Checked before rounding, which would wrap
  // near 2^64 to a small size.
  if (size > capacity_ || size > UINT64_MAX - kLargeBuffer) {
    release_cache();
    return false;
  }
  size = size < kMinBlock ? kMinBlock : (size + kMinBlock - 1) / kMinBlock * kMinBlock;
  const bool small = size <= kSmallSize;
  Block* block = take_free(small, stream, size);
  if (block == nullptr) block = grow(small, stream, size);
  if (block == nullptr) {
    release_cache();
    block = grow(small, stream, size);
    if (block == nullptr) return false;
  }
  if (block->size - size >= min_rest(small)) pool(small).insert(split(block, size));
  block->allocated = true;
  *handle = block;
  return true;
}

void BlockModel::free(void* handle) {
  auto* block = static_cast<Block*>(handle);
  block->allocated = false;
  block = coalesce(block);
  pool(block->small).insert(block);
}

BlockModel::Pool::iterator BlockModel::first_fit(bool small, std::uint64_t stream,
                                                 std::uint64_t size) {
  Block key{stream, size, 0, small};
  Pool& p = pool(small);
  auto it = p.lower_bound(&key);
  return it != p.end() && (*it)->stream == stream ? it : p.end();
}

BlockModel::Pool::iterator BlockModel::fit(bool small, std::uint64_t stream, std::uint64_t size) {
  return first_fit(small, stream, size);
}

BlockModel::Block* BlockModel::take_free(bool small, std::uint64_t stream, std::uint64_t size) {
  Pool& p = pool(small);
  auto it = fit(small, stream, size);
  if (it == p.end()) return nullptr;
  Block* b = *it;
  p.erase(it);
  return b;
}

BlockModel::Block* BlockModel::split(Block* block, std::uint64_t front) {
  auto* rest = new Block{block->stream, block->size - front, block->addr + front, block->small,
                         block->allocated, block->mapped, block, block->next};
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = front;
  return rest;
}

void BlockModel::absorb_next(Block* block) {
  Block* next = block->next;
  block->size += next->size;
  block->next = next->next;
  if (next->next != nullptr) next->next->prev = block;
  delete next;
}

BlockModel::Block* BlockModel::coalesce(Block* block) {
  auto mergeable = [](const Block* b) { return b != nullptr && !b->allocated && b->mapped; };
  Pool& p = pool(block->small);
  if (mergeable(block->prev)) {
    block = block->prev;
    p.erase(block);
    absorb_next(block);
  }
  if (mergeable(block->next)) {
    p.erase(block->next);
    absorb_next(block);
  }
  return block;
}

BlockModel::Block* BlockModel::new_segment(bool small, std::uint64_t stream, std::uint64_t size,
                                           bool mapped, std::uint64_t align) {
  const std::uint64_t addr = (next_addr_ + align - 1) / align * align;
  auto* b = new Block{stream, size, addr, small, false, mapped};
  next_addr_ = addr + size;
  heads_.push_back(b);
  return b;
}

void BlockModel::drop_segment(Block* head) {
  heads_.erase(std::find(heads_.begin(), heads_.end(), head));
  delete head;
}

bool BlockModel::reserve(std::uint64_t bytes) {
  if (bytes > capacity_ - reserved_) return false;
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return true;
}

}  // namespace cudalloc::replay
