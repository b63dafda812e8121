// StreamPool: the free blocks and slabs that one stream may reuse without synchronization;
// StreamPools: every stream's pool of one device.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "core/free_bins.h"
#include "core/pool_types.h"

namespace cudalloc {

struct StreamPool {
  StreamHandle stream = 0;
  FreeBins free_blocks;
  FreeBins spill_free_blocks;  // free blocks of spill segments (Segment::spill)
  std::vector<SlabClass> classes;
  std::vector<Segment*> segments;
  // Pages of this pool that became idle at or before this page epoch are no longer used by
  // any queued work on `stream` (the host has waited for the stream since).
  std::uint64_t settled_epoch = 0;

  FreeBins& bins_for(const Segment& seg) { return seg.spill ? spill_free_blocks : free_blocks; }
  const FreeBins& bins_for(const Segment& seg) const {
    return seg.spill ? spill_free_blocks : free_blocks;
  }
};

class StreamPools {
 public:
  explicit StreamPools(int size_classes) : size_classes_(size_classes) {}

  // The pool of `stream`, created on first use.
  StreamPool& get(StreamHandle stream) {
    if (last_ != nullptr && last_->stream == stream) return *last_;
    auto& slot = pools_[stream];
    if (!slot) {
      slot = std::make_unique<StreamPool>();
      slot->stream = stream;
      slot->classes.resize(static_cast<std::size_t>(size_classes_));
    }
    last_ = slot.get();
    return *slot;
  }
  StreamPool* find(StreamHandle stream) {
    auto it = pools_.find(stream);
    return it == pools_.end() ? nullptr : it->second.get();
  }
  // Removes the pool of `stream`, which must hold no segment.
  void erase(StreamHandle stream) {
    if (last_ != nullptr && last_->stream == stream) last_ = nullptr;
    pools_.erase(stream);
  }
  template <typename F>
  void for_each(F&& f) {
    for (auto& [stream, pool] : pools_) f(*pool);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [stream, pool] : pools_) f(static_cast<const StreamPool&>(*pool));
  }
  std::size_t size() const { return pools_.size(); }
  void clear() {
    pools_.clear();
    last_ = nullptr;
  }

 private:
  int size_classes_;
  std::unordered_map<StreamHandle, std::unique_ptr<StreamPool>> pools_;
  StreamPool* last_ = nullptr;  // the most recently used pool: the common case
};

}  // namespace cudalloc
