// Owner: what a live or pending allocation belongs to, a Block (a large allocation) or a Slab
// (a small one), in one word so that a LiveMap entry stays small.
//
// Representation (private to this header): the pointer with its two low bits used as tags;
// Block and Slab are at least 8-byte aligned, so those bits are always free.
//   bit 0  the owner is a Slab (else a Block)
//   bit 1  other streams used the allocation (record_stream): DeferredFrees holds their list
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/stream_pool.h"

namespace cudalloc {

class Owner {
 public:
  Owner() = default;
  static Owner of(Block* block) { return Owner(reinterpret_cast<std::uintptr_t>(block)); }
  static Owner of(Slab* slab) { return Owner(reinterpret_cast<std::uintptr_t>(slab) | kSlab); }

  bool empty() const { return (bits_ & ~kMask) == 0; }
  bool is_slab() const { return (bits_ & kSlab) != 0; }
  Slab* slab() const { return reinterpret_cast<Slab*>(bits_ & ~kMask); }
  Block* block() const { return reinterpret_cast<Block*>(bits_ & ~kMask); }

  bool has_stream_uses() const { return (bits_ & kStreamUses) != 0; }
  Owner with_stream_uses() const { return Owner(bits_ | kStreamUses); }
  // The same owner without the stream-use tag (what pending frees and the pools see).
  Owner untagged() const { return Owner(bits_ & ~kStreamUses); }

  // The allocation's rounded size, stream and segment.
  std::size_t rounded_size() const {
    return is_slab() ? slab()->object_size : block()->size;
  }
  StreamHandle stream() const {
    return is_slab() ? slab()->pool->stream : block()->segment->pool->stream;
  }
  Segment* segment() const { return is_slab() ? slab()->block->segment : block()->segment; }

  bool operator==(const Owner& other) const = default;

 private:
  static constexpr std::uintptr_t kSlab = 1;
  static constexpr std::uintptr_t kStreamUses = 2;
  static constexpr std::uintptr_t kMask = 3;
  explicit Owner(std::uintptr_t bits) : bits_(bits) {}

  std::uintptr_t bits_ = 0;
};

}  // namespace cudalloc
