// The block pool: requests above slab_max (and the slabs themselves) are best-fit blocks of
// segments, split on allocation and coalesced with free neighbours on free.
//
// Search order for a request on stream T:
//   1. the best-fitting free block of T's pool (no synchronization needed);
//   2. a wholly free segment of another stream's pool, moved to T after an event recorded on
//      its stream now has completed or T has been made to wait on it;
//   3. a new segment from the device, within the reserve cap.
// In paged mode step 2 never applies and step 3 reserves a virtual range; the pages under a
// block are mapped when it is allocated (page_pool.cpp).
#include <algorithm>

#include "core/device_allocator.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {
namespace {

constexpr std::size_t kSmallSegment = 2 * MiB;

}  // namespace

Error DeviceAllocator::allocate_large(StreamPool& pool, std::size_t size, bool slab,
                                      Block** out) {
  const std::size_t rounded = round_up(size, kBlockRound);
  Block* block = take_free_block(pool, rounded);
  if (block != nullptr && spill_ == Spill::host_segments && block->segment->paged()) {
    // A paged spill segment from before the driver refused host-located pages: not usable.
    insert_free(pool, block);
    block = nullptr;
  }
  if (block == nullptr && spill_ == Spill::off) block = steal_segment(pool, rounded);
  if (block == nullptr && !may_grow_) return Error::out_of_memory;
  if (block == nullptr) {
    const Error err = new_segment(pool, rounded, slab, &block);
    if (err != Error::ok) return err;
  }
  split(pool, block, rounded);
  if (block->segment->pinned) {
    stats_.host_active_bytes.increase(static_cast<std::int64_t>(block->size));
  }
  if (block->segment->paged()) {
    const Error err = use_pages(block->segment, block->addr, block->size);
    if (err != Error::ok) {
      merge_free(block);
      return err;
    }
  }
  block->state = Block::State::allocated;
  *out = block;
  return Error::ok;
}

void DeviceAllocator::insert_free(StreamPool& pool, Block* block) {
  (block->segment->spill ? pool.spill_free_blocks : pool.free_blocks).insert(block);
  stats_.cached_count.count();
}

void DeviceAllocator::erase_free(StreamPool& pool, Block* block) {
  (block->segment->spill ? pool.spill_free_blocks : pool.free_blocks).erase(block);
  stats_.cached_count.decrease(1);
}

Block* DeviceAllocator::take_free_block(StreamPool& pool, std::size_t size) {
  // Spill segments serve only spilled requests, and spilled requests only come from them.
  FreeBins& bins = spill_ != Spill::off ? pool.spill_free_blocks : pool.free_blocks;
  Block* block = bins.best_fit(size);
  if (block != nullptr) erase_free(pool, block);
  return block;
}

Block* DeviceAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block;
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block{};
  return b;
}

void DeviceAllocator::recycle_block(Block* block) { spare_blocks_.push_back(block); }

Block* DeviceAllocator::steal_segment(StreamPool& pool, std::size_t size) {
  Segment* best = nullptr;
  for (auto& [stream, other] : pools_) {
    if (other.get() == &pool) continue;
    for (Segment* seg : other->segments) {
      // Paged segments never move: their idle pages do (page_pool.cpp).
      if (!seg->paged() && !seg->pinned && seg->size >= size && seg->wholly_free() &&
          (best == nullptr || seg->size < best->size)) {
        best = seg;
      }
    }
  }
  if (best == nullptr) return nullptr;
  order_after_stream(best->pool->stream, pool.stream);
  StreamPool& donor = *best->pool;
  erase_free(donor, best->first);
  donor.segments.erase(std::find(donor.segments.begin(), donor.segments.end(), best));
  best->pool = &pool;
  pool.segments.push_back(best);
  stats_.stream_steals.count();
  return best->first;
}

void DeviceAllocator::order_after_stream(StreamHandle earlier, StreamHandle later) {
  // The event is recorded now, after all work queued on `earlier` so far, which includes
  // every use of memory freed on it (frees happen after their uses are queued).
  EventHandle event = 0;
  if (take_event(&event) == Error::ok) {
    const auto recorded = device_.event_record(ordinal_, event, earlier);
    if (recorded == device::Status::ok) {
      const auto done = device_.event_query(event);
      const bool ordered =
          done == device::Status::ok ||
          (done == device::Status::not_ready &&
           device_.stream_wait_event(ordinal_, later, event) == device::Status::ok);
      give_event(event);
      if (ordered) return;
    } else {
      give_event(event);
    }
  }
  // Without a usable event (a destroyed stream, a device error) wait for the whole device.
  log().debug("device {}: ordering streams through a device synchronization", ordinal_);
  device_.synchronize(ordinal_);
}

std::size_t DeviceAllocator::segment_size_for(std::size_t size, bool slab) const {
  // Slabs get segments of their own size; requests up to 1 MiB share 2 MiB segments, up to
  // half a large segment share large segments, and larger ones get their own.
  if (slab) return round_up(size, kSmallSegment);
  if (size <= kSmallSegment / 2) return kSmallSegment;
  if (size <= settings_.large_segment / 2) return round_up(settings_.large_segment, kSmallSegment);
  return round_up(size, kSmallSegment);
}

Error DeviceAllocator::new_segment(StreamPool& pool, std::size_t size, bool slab, Block** out) {
  if (spill_ == Spill::host_segments) return new_host_segment(pool, size, out);
  if (paged()) {
    Segment* seg = nullptr;
    const Error err = new_paged_segment(pool, size, &seg);
    if (err != Error::ok) return err;
    seg->spill = spill_ != Spill::off;  // before split() puts the rest in the spill bins
    *out = seg->first;
    return Error::ok;
  }
  const std::size_t cap = reserve_cap();
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  std::size_t bytes = segment_size_for(size, slab);
  const std::size_t minimum = round_up(size, kSmallSegment);
  // A shared segment is a convenience: fall back to the minimum when it does not fit.
  if (cap != 0 && reserved + bytes > cap) bytes = minimum;
  if (cap != 0 && reserved + bytes > cap) return Error::out_of_memory;
  void* ptr = nullptr;
  auto status = device_.malloc(ordinal_, bytes, &ptr);
  if (status == device::Status::out_of_memory && bytes > minimum) {
    bytes = minimum;
    status = device_.malloc(ordinal_, bytes, &ptr);
  }
  if (status == device::Status::out_of_memory) return Error::out_of_memory;
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: allocating a segment of %zu bytes failed: %s %s",
                ordinal_, bytes, device::status_name(status), device_.last_failure());
  }
  Segment* seg = add_segment(pool, reinterpret_cast<std::uintptr_t>(ptr), bytes);
  stats_.reserved_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.reserved_count.count();
  stats_.cached_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.device_allocs.count();
  if (trace_.enabled()) trace_.record(TraceAction::segment_alloc, seg->base, bytes, pool.stream);
  *out = seg->first;
  return Error::ok;
}

Segment* DeviceAllocator::add_segment(StreamPool& pool, std::uintptr_t base, std::size_t bytes) {
  auto* seg = new Segment;
  seg->base = base;
  seg->size = bytes;
  seg->pool = &pool;
  seg->first = new_block();
  seg->first->addr = base;
  seg->first->size = bytes;
  seg->first->segment = seg;
  pool.segments.push_back(seg);
  return seg;
}

void DeviceAllocator::split(StreamPool& pool, Block* block, std::size_t size) {
  if (block->size - size < kBlockRound) return;
  Block* rest = new_block();
  rest->addr = block->addr + size;
  rest->size = block->size - size;
  rest->segment = block->segment;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  insert_free(pool, rest);
}

void DeviceAllocator::free_block(Block* block) {
  if (block->segment->paged()) unuse_pages(block->segment, block->addr, block->size);
  if (block->segment->pinned) {
    stats_.host_active_bytes.decrease(static_cast<std::int64_t>(block->size));
  }
  block->state = Block::State::free;
  block->requested = 0;
  merge_free(block);
}

void DeviceAllocator::merge_free(Block* block) {
  StreamPool& pool = *block->segment->pool;
  if (Block* prev = block->prev; prev != nullptr && prev->state == Block::State::free) {
    erase_free(pool, prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    recycle_block(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->state == Block::State::free) {
    erase_free(pool, next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    recycle_block(next);
  }
  insert_free(pool, block);
}

std::size_t DeviceAllocator::release_free_segments(bool pinned) {
  // Plain segments from the device, or (pinned) the host tier's pinned host segments.
  auto releasable = [&](const Segment* seg) {
    return !seg->paged() && seg->pinned == pinned && seg->wholly_free();
  };
  bool any = false;
  for (auto& [stream, pool] : pools_) {
    for (Segment* seg : pool->segments) any = any || releasable(seg);
  }
  if (!any) return 0;
  // Work queued before the frees may still use the memory: wait for all of it.
  if (device_.synchronize(ordinal_) != device::Status::ok) {
    log().warn("device {}: synchronize failed; cached segments are kept", ordinal_);
    return 0;
  }
  std::size_t released = 0;
  for (auto& [stream, pool] : pools_) {
    auto& segs = pool->segments;
    for (auto it = segs.begin(); it != segs.end();) {
      Segment* seg = *it;
      auto* base = reinterpret_cast<void*>(seg->base);
      if (!releasable(seg) || (pinned ? device_.host_free(base) : device_.free(ordinal_, base)) !=
                                  device::Status::ok) {
        ++it;
        continue;
      }
      erase_free(*pool, seg->first);
      const auto bytes = static_cast<std::int64_t>(seg->size);
      if (pinned) {
        stats_.host_reserved_bytes.decrease(bytes);
      } else {
        stats_.reserved_bytes.decrease(bytes);
        stats_.reserved_count.decrease(1);
        stats_.device_frees.count();
      }
      stats_.cached_bytes.decrease(bytes);
      if (trace_.enabled()) {
        trace_.record(TraceAction::segment_free, seg->base, seg->size, pool->stream);
      }
      released += seg->size;
      recycle_block(seg->first);
      delete seg;
      it = segs.erase(it);
    }
  }
  return released;
}

}  // namespace cudalloc
