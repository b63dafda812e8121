#include "replay/pytorch_model.h"

namespace cudalloc::replay {
namespace {

constexpr std::uint64_t kMinLargeAlloc = 10 << 20;
constexpr std::uint64_t kRoundLarge = 2 << 20;

}  // namespace

std::uint64_t PytorchModel::segment_size(std::uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

BlockModel::Block* PytorchModel::grow(bool small, std::uint64_t stream, std::uint64_t size) {
  const std::uint64_t bytes = segment_size(size);
  if (!reserve(bytes)) return nullptr;
  ++segment_allocs_;
  return new_segment(small, stream, bytes, true, 1);
}

void PytorchModel::release_cache() {
  for (const bool small : {true, false}) {
    Pool& p = pool(small);
    for (auto it = p.begin(); it != p.end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      it = p.erase(it);
      unreserve(b->size);
      ++segment_frees_;
      drop_segment(b);
    }
  }
}

}  // namespace cudalloc::replay
