// The data structures of one device's pools. All of them are host-side metadata: device
// memory is never read or written by the allocator.
//
//   Segment   device memory from one device malloc; owned by one stream's pool
//   Block     a piece of a segment, in address order with its neighbours; free, allocated
//             (a large allocation), pending (freed, waiting for events) or a slab
//   Slab      a block carved into equal objects of one size class
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/device.h"

namespace cudalloc {

using device::EventHandle;
using device::StreamHandle;

struct StreamPool;
struct Segment;
struct Slab;

struct Block {
  enum class State : std::uint8_t { free, allocated, pending, slab };

  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // for allocated / pending blocks
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address-order neighbours within the segment
  Block* next = nullptr;
  State state = State::free;
  Slab* slab = nullptr;  // when state == slab
  Block* bin_prev = nullptr;  // neighbours in a FreeBins list while free
  Block* bin_next = nullptr;
};

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  StreamPool* pool = nullptr;
  Block* first = nullptr;

  bool wholly_free() const {
    return first->state == Block::State::free && first->size == size;
  }
};

struct Slab {
  Block* block = nullptr;  // the memory
  StreamPool* pool = nullptr;
  int cls = 0;
  std::uint32_t object_size = 0;
  std::uint32_t capacity = 0;
  std::uint32_t used = 0;       // objects allocated or pending
  std::int32_t available_index = -1;  // position in SlabClass::available, -1 if full
  std::vector<std::uint32_t> free_slots;

  std::uintptr_t base() const { return block->addr; }
};

struct SlabClass {
  std::vector<Slab*> available;  // slabs with at least one free slot
  std::size_t empty = 0;         // how many of them are wholly empty
};

// A free waiting for work on other streams (record_stream) before its memory is reusable.
struct PendingFree {
  std::uintptr_t owner = 0;  // tagged like LiveEntry::owner
  std::uintptr_t addr = 0;
  std::size_t requested = 0;
  std::vector<EventHandle> events;
};

}  // namespace cudalloc
