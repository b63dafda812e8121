// StreamPool: the free blocks and slabs that one stream may reuse without synchronization;
// StreamPools: every stream's pool of one device.
//
// Each stream has one shared pool (private_id 0) and, for every private pool it allocated
// from (private_pools.h: CUDA graphs, PyTorch's MemPool), one more. Memory of a private
// pool's StreamPool serves only requests routed to that private pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/free_bins.h"
#include "core/pool_types.h"
#include "core/region_tags.h"

namespace cudalloc {

// The id of a private pool; kSharedPool names the shared pools.
using PoolId = std::uint64_t;
inline constexpr PoolId kSharedPool = 0;

struct StreamPool {
  StreamHandle stream = 0;
  PoolId private_id = kSharedPool;
  // The region of its private pool (regions.h), or kNoRegion: in paged mode its segments are
  // held segments.
  RegionId region = kNoRegion;
  FreeBins free_blocks;
  FreeBins spill_free_blocks;  // free blocks of spill segments (Segment::spill)
  std::vector<SlabClass> classes;
  std::vector<Segment*> segments;
  // Pages of this pool that became idle at or before this page epoch are no longer used by
  // any queued work on `stream` (the host has waited for the stream since).
  std::uint64_t settled_epoch = 0;

  bool is_private() const { return private_id != kSharedPool; }
  FreeBins& bins_for(const Segment& seg) { return seg.spill ? spill_free_blocks : free_blocks; }
  const FreeBins& bins_for(const Segment& seg) const {
    return seg.spill ? spill_free_blocks : free_blocks;
  }
};

class StreamPools {
 public:
  explicit StreamPools(int size_classes) : size_classes_(size_classes) {}

  // The pool of `stream` within private pool `id` (kSharedPool: its shared pool), created on
  // first use.
  StreamPool& get(StreamHandle stream, PoolId id = kSharedPool) {
    if (last_ != nullptr && last_->stream == stream && last_->private_id == id) return *last_;
    auto& slot = pools_[Key{stream, id}];
    if (!slot) {
      slot = std::make_unique<StreamPool>();
      slot->stream = stream;
      slot->private_id = id;
      slot->classes.resize(static_cast<std::size_t>(size_classes_));
    }
    last_ = slot.get();
    return *slot;
  }
  StreamPool* find(StreamHandle stream, PoolId id = kSharedPool) {
    auto it = pools_.find(Key{stream, id});
    return it == pools_.end() ? nullptr : it->second.get();
  }
  // Removes `pool`, which must hold no segment.
  void erase(const StreamPool& pool) {
    if (last_ == &pool) last_ = nullptr;
    pools_.erase(Key{pool.stream, pool.private_id});
  }
  template <typename F>
  void for_each(F&& f) {
    for (auto& [key, pool] : pools_) f(*pool);
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [key, pool] : pools_) f(static_cast<const StreamPool&>(*pool));
  }
  std::size_t size() const { return pools_.size(); }
  void clear() {
    pools_.clear();
    last_ = nullptr;
  }

 private:
  struct Key {
    StreamHandle stream;
    PoolId id;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<StreamHandle>()(k.stream) ^ (std::hash<PoolId>()(k.id) * 0x9e3779b97f4a7c15ULL);
    }
  };
  int size_classes_;
  std::unordered_map<Key, std::unique_ptr<StreamPool>, KeyHash> pools_;
  StreamPool* last_ = nullptr;  // the most recently used pool: the common case
};

}  // namespace cudalloc
