#include "core/block_pool.h"

#include <algorithm>

#include "core/log.h"
#include "util/units.h"

namespace cudalloc {
namespace {

constexpr std::size_t kSmallSegment = 2 * MiB;

}  // namespace

BlockPool::~BlockPool() {
  for (Block* b : spare_blocks_) delete b;
}

Error BlockPool::allocate(StreamPool& pool, const Request& request, BlockUse use, Block** out) {
  const std::size_t rounded = round_up(request.size, kBlockRound);
  Block* block = take_free_block(pool, rounded, request);
  if (block != nullptr && request.tier == Tier::host_segments && block->segment->paged()) {
    // A paged spill segment from before the driver refused host-located pages: not usable.
    insert_free(pool, block);
    block = nullptr;
  }
  // A private pool neither takes nor gives segments while it has users (private_pools.h).
  if (block == nullptr && !request.spilling() && !pool.is_private()) {
    block = steal_segment(pool, rounded);
  }
  if (block == nullptr && !request.may_grow()) return Error::out_of_memory;
  if (block == nullptr) {
    if (const Error err = new_segment(pool, rounded, request, use, &block); err != Error::ok) {
      return err;
    }
  }
  split(pool, block, rounded);
  Segment& seg = *block->segment;
  if (seg.pinned_host()) ledger_.host_in_use(block->size);
  if (seg.paged() && !seg.held) {
    if (const Error err = mapper_->use(seg, block->addr, block->size, request); err != Error::ok) {
      merge_free(block);
      return err;
    }
  }
  block->state = Block::State::allocated;
  *out = block;
  return Error::ok;
}

void BlockPool::insert_free(StreamPool& pool, Block* block) {
  pool.bins_for(*block->segment).insert(block);
  ledger_.free_block_added();
}

void BlockPool::erase_free(StreamPool& pool, Block* block) {
  pool.bins_for(*block->segment).erase(block);
  ledger_.free_block_removed();
}

Block* BlockPool::take_free_block(StreamPool& pool, std::size_t size, const Request& request) {
  // Spill segments serve only spilled requests, and spilled requests only come from them.
  FreeBins& bins = request.spilling() ? pool.spill_free_blocks : pool.free_blocks;
  Block* block = bins.best_fit(size);
  if (block != nullptr) erase_free(pool, block);
  return block;
}

Block* BlockPool::new_block() {
  if (spare_blocks_.empty()) return new Block;
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block{};
  return b;
}

Block* BlockPool::steal_segment(StreamPool& pool, std::size_t size) {
  Segment* best = nullptr;
  pools_.for_each([&](StreamPool& other) {
    if (&other == &pool || other.is_private()) return;
    for (Segment* seg : other.segments) {
      // Paged segments never move: their idle pages do (page_mapper.h).
      if (seg->kind == Segment::Kind::plain && seg->size >= size && seg->wholly_free() &&
          (best == nullptr || seg->size < best->size)) {
        best = seg;
      }
    }
  });
  if (best == nullptr) return nullptr;
  sync_.order_after(best->pool->stream, pool.stream);
  StreamPool& donor = *best->pool;
  erase_free(donor, best->first);
  donor.segments.erase(std::find(donor.segments.begin(), donor.segments.end(), best));
  best->pool = &pool;
  pool.segments.push_back(best);
  ledger_.stream_steal();
  return best->first;
}

std::size_t BlockPool::segment_size_for(std::size_t size, BlockUse use) const {
  // Slabs get segments of their own size; requests up to 1 MiB share 2 MiB segments, up to
  // half a large segment share large segments, and larger ones get their own.
  if (use == BlockUse::slab) return round_up(size, kSmallSegment);
  if (size <= kSmallSegment / 2) return kSmallSegment;
  if (size <= settings_.large_segment / 2) return round_up(settings_.large_segment, kSmallSegment);
  return round_up(size, kSmallSegment);
}

Error BlockPool::new_segment(StreamPool& pool, std::size_t size, const Request& request,
                             BlockUse use, Block** out) {
  if (request.tier == Tier::host_segments) return new_host_segment(pool, size, out);
  // Private pools keep memory that never moves: plain segments, or held ones for a region.
  if (mapper_ != nullptr && pool.region != kNoRegion) {
    return new_held_segment(pool, size, request, out);
  }
  if (mapper_ != nullptr && !pool.is_private()) return new_paged_segment(pool, size, request, out);
  return new_plain_segment(pool, size, use, out);
}

Error BlockPool::new_plain_segment(StreamPool& pool, std::size_t size, BlockUse use,
                                   Block** out) {
  const auto reserved = static_cast<std::size_t>(ledger_.stats().reserved_bytes.current);
  std::size_t bytes = segment_size_for(size, use);
  const std::size_t minimum = round_up(size, kSmallSegment);
  // A shared segment is a convenience: fall back to the minimum when it does not fit.
  if (!budget_.device_allows(reserved, bytes)) bytes = minimum;
  if (!budget_.device_allows(reserved, bytes)) return Error::out_of_memory;
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
  Segment* seg = add_segment(pool, reinterpret_cast<std::uintptr_t>(ptr), bytes,
                             Segment::Kind::plain, false);
  ledger_.reserved(device::Location::device, seg->base, bytes, pool.stream);
  *out = seg->first;
  return Error::ok;
}

Error BlockPool::new_paged_segment(StreamPool& pool, std::size_t size, const Request& request,
                                   Block** out) {
  std::uintptr_t va = 0;
  std::size_t bytes = 0;
  if (const Error err = mapper_->reserve_range(pool, size, &va, &bytes); err != Error::ok) {
    return err;
  }
  // spill is set before split() puts the rest in the spill bins.
  Segment* seg = add_segment(pool, va, bytes, Segment::Kind::paged, request.spilling());
  mapper_->init_pages(*seg);
  *out = seg->first;
  return Error::ok;
}

Error BlockPool::new_held_segment(StreamPool& pool, std::size_t size, const Request& request,
                                  Block** out) {
  const std::size_t bytes =
      round_up(segment_size_for(size, BlockUse::allocation), mapper_->page_size());
  std::uintptr_t va = 0;
  const auto status = device_.reserve(ordinal_, bytes, &va);
  if (status != device::Status::ok) {
    const Error err =
        status == device::Status::out_of_memory ? Error::out_of_memory : Error::device_error;
    return fail(err, "device %d: reserving %s of address space failed: %s %s", ordinal_,
                format_bytes(bytes).c_str(), device::status_name(status),
                device_.last_failure());
  }
  Segment* seg = add_segment(pool, va, bytes, Segment::Kind::paged, false);
  mapper_->init_pages(*seg);
  seg->held = true;
  // The hold: every page gets its one user now, mapped and accessible until pause or release.
  if (const Error err = mapper_->hold(*seg, request); err != Error::ok) {
    pool.segments.pop_back();
    recycle_block(seg->first);
    delete seg;
    device_.unreserve(va, bytes);
    return err;
  }
  *out = seg->first;
  return Error::ok;
}

Error BlockPool::new_host_segment(StreamPool& pool, std::size_t size, Block** out) {
  const std::size_t bytes = round_up(size, 2 * MiB);
  const auto held = static_cast<std::size_t>(ledger_.stats().host_reserved_bytes.current);
  if (!budget_.host_allows(held, bytes)) return Error::out_of_memory;
  void* ptr = nullptr;
  const auto status = device_.host_alloc(ordinal_, bytes, &ptr);
  if (status == device::Status::out_of_memory) return Error::out_of_memory;
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: allocating %s of pinned host memory failed: %s %s",
                ordinal_, format_bytes(bytes).c_str(), device::status_name(status),
                device_.last_failure());
  }
  Segment* seg = add_segment(pool, reinterpret_cast<std::uintptr_t>(ptr), bytes,
                             Segment::Kind::pinned_host, true);
  ledger_.reserved(device::Location::host, seg->base, bytes, pool.stream);
  *out = seg->first;
  return Error::ok;
}

Segment* BlockPool::add_segment(StreamPool& pool, std::uintptr_t base, std::size_t bytes,
                                Segment::Kind kind, bool spill) {
  auto* seg = new Segment;
  seg->base = base;
  seg->size = bytes;
  seg->kind = kind;
  seg->spill = spill;
  seg->pool = &pool;
  seg->first = new_block();
  seg->first->addr = base;
  seg->first->size = bytes;
  seg->first->segment = seg;
  pool.segments.push_back(seg);
  return seg;
}

void BlockPool::split(StreamPool& pool, Block* block, std::size_t size) {
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

Error BlockPool::allocate_at(Segment& seg, std::uintptr_t addr, std::size_t size, Block** out) {
  Block* block = seg.first;
  while (block != nullptr && block->addr + block->size <= addr) block = block->next;
  if ((seg.kind != Segment::Kind::plain && !seg.held) || block == nullptr ||
      block->state != Block::State::free || block->addr > addr ||
      block->addr + block->size < addr + size || size % kBlockRound != 0 ||
      (addr - block->addr) % kBlockRound != 0) {
    return Error::invalid_value;
  }
  StreamPool& pool = *seg.pool;
  erase_free(pool, block);
  if (block->addr < addr) {  // the part before stays free
    split(pool, block, addr - block->addr);
    Block* rest = block->next;
    insert_free(pool, block);
    erase_free(pool, rest);
    block = rest;
  }
  split(pool, block, size);
  block->state = Block::State::allocated;
  *out = block;
  return Error::ok;
}

void BlockPool::free(Block* block) {
  Segment& seg = *block->segment;
  if (seg.paged() && !seg.held) mapper_->unuse(seg, block->addr, block->size);
  if (seg.pinned_host()) ledger_.host_unused(block->size);
  block->state = Block::State::free;
  block->requested = 0;
  merge_free(block);
}

void BlockPool::merge_free(Block* block) {
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

device::Status BlockPool::free_segment_memory(const Segment& seg) {
  auto* base = reinterpret_cast<void*>(seg.base);
  return seg.pinned_host() ? device_.host_free(base) : device_.free(ordinal_, base);
}

void BlockPool::delete_segment(StreamPool& pool, Segment* seg) {
  erase_free(pool, seg->first);
  recycle_block(seg->first);
  delete seg;
}

std::size_t BlockPool::release_free_segments(Segment::Kind kind) {
  // Private pools keep their memory while they have users; released ones give theirs to the
  // shared pools (adopt_segment).
  auto releasable = [&](const Segment* seg) {
    return seg->kind == kind && seg->wholly_free() && !seg->pool->is_private();
  };
  bool any = false;
  pools_.for_each([&](StreamPool& pool) {
    for (Segment* seg : pool.segments) any = any || releasable(seg);
  });
  if (!any) return 0;
  // Work queued before the frees may still use the memory: wait for all of it.
  if (!sync_.synchronize_device()) {
    log().warn("device {}: synchronize failed; cached segments are kept", ordinal_);
    return 0;
  }
  const auto where =
      kind == Segment::Kind::pinned_host ? device::Location::host : device::Location::device;
  std::size_t released = 0;
  pools_.for_each([&](StreamPool& pool) {
    std::erase_if(pool.segments, [&](Segment* seg) {
      if (!releasable(seg) || free_segment_memory(*seg) != device::Status::ok) return false;
      ledger_.released(where, seg->base, seg->size, pool.stream);
      released += seg->size;
      delete_segment(pool, seg);
      return true;
    });
  });
  return released;
}

void BlockPool::adopt_segment(Segment* seg, StreamPool& to) {
  StreamPool& from = *seg->pool;
  erase_free(from, seg->first);
  from.segments.erase(std::find(from.segments.begin(), from.segments.end(), seg));
  seg->pool = &to;
  to.segments.push_back(seg);
  insert_free(to, seg->first);
}

void BlockPool::release_free_ranges(StreamPool* only) {
  if (mapper_ == nullptr) return;
  std::vector<StreamPool*> empty_pools;
  pools_.for_each([&](StreamPool& pool) {
    if (only != nullptr && &pool != only) return;
    if (pool.is_private()) return;  // its segments are plain; private_pools.h owns its life
    std::erase_if(pool.segments, [&](Segment* seg) {
      if (!seg->paged() || !seg->wholly_free() || !mapper_->unmapped(*seg)) return false;
      mapper_->drop(*seg);
      delete_segment(pool, seg);
      return true;
    });
    if (pool.segments.empty()) empty_pools.push_back(&pool);
  });
  for (StreamPool* pool : empty_pools) {
    mapper_->forget_pool(*pool);
    pools_.erase(*pool);
  }
}

void BlockPool::drop_segment(StreamPool& pool, Segment* seg) {
  pool.segments.erase(std::find(pool.segments.begin(), pool.segments.end(), seg));
  mapper_->drop(*seg);
  delete_segment(pool, seg);
}

void BlockPool::drop_everything() {
  pools_.for_each([&](StreamPool& pool) {
    for (Segment* seg : pool.segments) {
      for (Block* b = seg->first; b != nullptr;) {
        Block* next = b->next;
        delete b->slab;
        delete b;
        b = next;
      }
      if (seg->paged()) {
        mapper_->drop(*seg);
      } else {
        free_segment_memory(*seg);
      }
      delete seg;
    }
    pool.segments.clear();
  });
}

}  // namespace cudalloc
