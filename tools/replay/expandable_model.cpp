#include "replay/expandable_model.h"

#include <algorithm>
#include <iterator>

namespace cudalloc::replay {
namespace {

// Address space is sized from the capacity; bounded so that fresh addresses never wrap.
constexpr std::uint64_t kMaxSpaceBase = std::uint64_t{1} << 52;

std::uint64_t round_to(std::uint64_t value, std::uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

BlockModel::Pool::iterator ExpandableModel::fit(bool small, std::uint64_t stream,
                                                std::uint64_t size) {
  Pool& p = pool(small);
  auto it = first_fit(small, stream, size);
  if (it == p.end()) return it;
  // How far a block could grow: itself and the unmapped range after it.
  auto reach = [](const Block* b) {
    return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
  };
  for (auto next = std::next(it);
       next != p.end() && (*next)->stream == stream && reach(*next) < reach(*it); ++next) {
    it = next;
  }
  return it;
}

BlockModel::Block* ExpandableModel::find_room(bool small, std::uint64_t stream,
                                              std::uint64_t size) {
  auto has_room = [size](const Block* b) {
    std::uint64_t bytes = 0;
    for (; b != nullptr && !b->allocated && bytes < size; b = b->next) bytes += b->size;
    return bytes >= size;
  };
  Unmapped& u = unmapped(small);
  Block key{stream, 0, 0, small};
  for (auto it = u.lower_bound(&key); it != u.end() && (*it)->stream == stream; ++it) {
    Block* candidate = *it;
    if (candidate->prev != nullptr && !candidate->prev->allocated) candidate = candidate->prev;
    if (has_room(candidate)) return candidate;
  }
  const std::uint64_t page = page_size(small);
  const std::uint64_t base = std::min(capacity_, kMaxSpaceBase);
  Block* segment = new_segment(small, stream, round_to(base + base / 8, page), false, page);
  u.insert(segment);
  return segment;
}

BlockModel::Block* ExpandableModel::map(Block* block, std::uint64_t size) {
  const std::uint64_t page = page_size(block->small);
  const std::uint64_t bytes = round_to(size, page);
  if (!reserve(bytes)) return nullptr;
  Unmapped& u = unmapped(block->small);
  u.erase(block);
  if (bytes < block->size) u.insert(split(block, bytes));
  block->mapped = true;
  ++segment_allocs_;
  page_maps_ += bytes / page;
  block = coalesce(block);
  pool(block->small).insert(block);
  return block;
}

BlockModel::Block* ExpandableModel::grow(bool small, std::uint64_t stream, std::uint64_t size) {
  Block* block = find_room(small, stream, size);
  if (!block->mapped) block = map(block, std::min(block->size, size));
  // A free block followed by unmapped space (and, after an unmap, more free blocks): each
  // unmapped range is mapped in turn, as much as is still missing, and merges into it.
  while (block != nullptr && block->size < size) {
    block = map(block->next, std::min(size - block->size, block->next->size));
  }
  if (block != nullptr) pool(small).erase(block);
  return block;
}

void ExpandableModel::unmap_free_pages(Block* block) {
  const std::uint64_t page = page_size(block->small);
  const std::uint64_t first = round_to(block->addr, page);
  const std::uint64_t last = (block->addr + block->size) / page * page;
  if (first >= last) return;
  Pool& p = pool(block->small);
  p.erase(block);
  Block* hole = block;
  if (first > block->addr) {
    hole = split(block, first - block->addr);
    p.insert(block);
  }
  if (last - first < hole->size) p.insert(split(hole, last - first));
  hole->mapped = false;
  unreserve(last - first);
  ++segment_frees_;
  page_unmaps_ += (last - first) / page;
  Unmapped& u = unmapped(hole->small);
  if (hole->prev != nullptr && !hole->prev->mapped) {
    hole = hole->prev;
    u.erase(hole);
    absorb_next(hole);
  }
  if (hole->next != nullptr && !hole->next->mapped) {
    u.erase(hole->next);
    absorb_next(hole);
  }
  if (hole->prev == nullptr && hole->next == nullptr) {
    drop_segment(hole);  // wholly unmapped: the segment is released
  } else {
    u.insert(hole);
  }
}

void ExpandableModel::release_cache() {
  for (const bool small : {false, true}) {  // the large pool first, as PyTorch does
    const std::vector<Block*> free_blocks(pool(small).begin(), pool(small).end());
    for (Block* b : free_blocks) unmap_free_pages(b);
  }
}

}  // namespace cudalloc::replay
