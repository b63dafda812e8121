// DeviceAllocator's private pools (private_pools.h): routing, release and inspection; and
// the two other questions PyTorch's allocator interface asks of the core: the largest free
// block (cacheInfo) and a segment's IPC handle (shareIpcHandle).
#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/device_allocator.h"
#include "core/log.h"

namespace cudalloc {

Error DeviceAllocator::allocate_private(std::size_t size, StreamHandle stream, PoolId id,
                                        std::uintptr_t* addr, Owner* owner) {
  if (private_.use_count(id) == 0) {
    return fail(Error::invalid_value,
                "device %d: allocation routed to private pool %llu, which %s", ordinal_,
                static_cast<unsigned long long>(id),
                private_.known(id) ? "was released" : "was never created");
  }
  const RegionId region = regions_.region_of(id);
  if (region != kNoRegion && regions_.paused(region)) {
    return fail(Error::invalid_value, "device %d: allocation in region \"%s\", which is paused",
                ordinal_, RegionTags::name(region).c_str());
  }
  StreamPool& pool = pools_.get(stream, id);
  pool.region = region;
  const Request request{size, Growth::may_grow, Tier::device};
  Block* block = nullptr;
  Error err = blocks_.allocate(pool, request, BlockUse::allocation, &block);
  if (err == Error::out_of_memory) {
    // Releasing the cache synchronizes the device, which would end a capture of `stream`
    // with an error: then the request fails instead (empty the cache before capturing).
    bool capturing = false;
    if (device_.stream_capturing(ordinal_, stream, &capturing) != device::Status::ok) {
      capturing = true;  // unknown: do not risk the capture
    }
    if (!capturing) {
      release_cached_memory();
      err = blocks_.allocate(pool, request, BlockUse::allocation, &block);
      if (err == Error::ok) ledger_.retry();
    }
  }
  if (err == Error::out_of_memory) return out_of_memory(size, stream);
  if (err != Error::ok) return err;
  *addr = block->addr;
  *owner = Owner::of(block);
  return Error::ok;
}

Error DeviceAllocator::allocate_owned_by_capture(std::size_t size, StreamHandle stream,
                                                 void** ptr) {
  std::uint64_t capture = 0;
  // The legacy default stream is never captured: no driver call on the common path.
  if (stream == 0 || device_.capture_id(ordinal_, stream, &capture) != device::Status::ok ||
      capture == 0) {
    return allocate(size, stream, ptr);
  }
  const PoolId pool = kCapturePools | capture;
  const Error created = metadata_guard("allocate_owned_by_capture", ordinal_, [&] {
    std::lock_guard lock(lock_);
    if (private_.known(pool)) return Error::ok;
    tag_new_pool(pool);
    private_.retain(pool);  // never released: nobody will say when the graph is gone
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log().warn("device {}: allocations during a CUDA graph capture without private-pool "
                 "calls (PyTorch's pluggable allocator): each capture's memory stays reserved "
                 "for the life of the process; the PyTorch adapter releases it with the graph",
                 ordinal_);
    }
    return Error::ok;
  });
  if (created != Error::ok) return created;
  return allocate(size, stream, ptr, pool);
}

Error DeviceAllocator::create_private_pool(PoolId id) {
  if (id == kSharedPool) {
    return fail(Error::invalid_value, "device %d: private pool id 0 names the shared pools",
                ordinal_);
  }
  return metadata_guard("create_private_pool", ordinal_, [&] {
    std::lock_guard lock(lock_);
    if (!private_.known(id)) tag_new_pool(id);
    private_.retain(id);
    return Error::ok;
  });
}

Error DeviceAllocator::release_private_pool(PoolId id) {
  return metadata_guard("release_private_pool", ordinal_, [&] {
    std::lock_guard lock(lock_);
    if (private_.use_count(id) == 0) {
      return fail(Error::invalid_value, "device %d: release of private pool %llu, which %s",
                  ordinal_, static_cast<unsigned long long>(id),
                  private_.known(id) ? "was already released" : "was never created");
    }
    if (!private_.release(id)) return Error::ok;  // other users remain
    std::vector<StreamPool*> mine;
    pools_.for_each([&](StreamPool& pool) {
      if (pool.private_id == id) mine.push_back(&pool);
    });
    bool any_free = false;
    for (StreamPool* pool : mine) {
      for (const Segment* seg : pool->segments) any_free = any_free || seg->wholly_free();
    }
    // Graph launches still queued may use the pool's memory: wait for them once. If that
    // fails the segments stay in the released pool (out of everyone's reach) until a later
    // free returns them.
    if (any_free && sync_.synchronize_device()) {
      for (StreamPool* pool : mine) return_released_segments(*pool);
    }
    forget_if_empty(id);
    if (settings_.validate) check_after_operation("release_private_pool");
    return Error::ok;
  });
}

void DeviceAllocator::return_released_segments(StreamPool& pool) {
  // Called at release (after a device synchronization) and whenever a block of a released
  // pool is freed: work that used the segment's other blocks was queued before the release,
  // so the synchronization at release covers it.
  StreamPool& shared = pools_.get(pool.stream);
  std::vector<Segment*> free_segments;
  for (Segment* seg : pool.segments) {
    // A region's held segments never join the shared pools: empty_cache returns them.
    if (seg->wholly_free() && !seg->held) free_segments.push_back(seg);
  }
  for (Segment* seg : free_segments) blocks_.adopt_segment(seg, shared);
  if (pool.segments.empty()) {
    const PoolId id = pool.private_id;
    pools_.erase(pool);
    forget_if_empty(id);
  }
}

void DeviceAllocator::forget_if_empty(PoolId id) {
  if (!private_.released(id)) return;
  bool holds_memory = false;
  pools_.for_each([&](const StreamPool& pool) {
    holds_memory = holds_memory || (pool.private_id == id && !pool.segments.empty());
  });
  if (holds_memory) return;
  std::vector<StreamPool*> empty;
  pools_.for_each([&](StreamPool& pool) {
    if (pool.private_id == id) empty.push_back(&pool);
  });
  for (StreamPool* pool : empty) pools_.erase(*pool);
  regions_.remove_pool(id);
  private_.forget(id);
}

int DeviceAllocator::private_pool_use_count(PoolId id) const {
  std::lock_guard lock(lock_);
  return private_.use_count(id);
}

Error DeviceAllocator::private_pool_allocations(PoolId id,
                                                std::vector<std::uintptr_t>* out) const {
  return metadata_guard("private_pool_allocations", ordinal_, [&] {
    std::lock_guard lock(lock_);
    out->clear();
    live_.for_each([&](const LiveEntry& e) {
      if (!e.owner.is_slab() && e.owner.block()->segment->pool->private_id == id) {
        out->push_back(e.key);
      }
    });
    std::sort(out->begin(), out->end());
    return Error::ok;
  });
}

std::size_t DeviceAllocator::largest_free_block() {
  std::lock_guard lock(lock_);
  settle_fast_frees();
  std::size_t plain = 0;
  std::size_t paged_block = 0;
  pools_.for_each([&](const StreamPool& pool) {
    if (pool.is_private()) return;
    for (const Segment* seg : pool.segments) {
      if (seg->spill || seg->pinned_host()) continue;
      std::size_t& largest = seg->paged() ? paged_block : plain;
      for (const Block* b = seg->first; b != nullptr; b = b->next) {
        if (b->state == Block::State::free) largest = std::max(largest, b->size);
      }
    }
  });
  // A free block of a paged segment needs physical pages under it: idle ones serve without
  // new device memory, so no more than they hold.
  const std::size_t idle = physical_.device_idle() * page_size_;
  return std::max(plain, std::min(paged_block, idle));
}

Error DeviceAllocator::checkpoint_private_pool(PoolId id, std::vector<PoolAllocation>* out) const {
  return metadata_guard("checkpoint_private_pool", ordinal_, [&] {
    std::lock_guard lock(lock_);
    out->clear();
    live_.for_each([&](const LiveEntry& e) {
      if (!e.owner.is_slab() && e.owner.block()->segment->pool->private_id == id) {
        out->push_back(PoolAllocation{e.key, e.owner.rounded_size(), e.requested});
      }
    });
    std::sort(out->begin(), out->end(),
              [](const PoolAllocation& a, const PoolAllocation& b) { return a.addr < b.addr; });
    return Error::ok;
  });
}

Segment* DeviceAllocator::private_segment_of(PoolId id, std::uintptr_t addr,
                                             std::size_t size) const {
  Segment* found = nullptr;
  pools_.for_each([&](const StreamPool& pool) {
    if (pool.private_id != id) return;
    for (Segment* seg : pool.segments) {
      if (addr >= seg->base && size <= seg->size && addr - seg->base <= seg->size - size) {
        found = seg;
      }
    }
  });
  return found;
}

Error DeviceAllocator::restore_private_pool(PoolId id,
                                            const std::vector<PoolAllocation>& checkpoint,
                                            std::vector<std::uintptr_t>* freed) {
  return metadata_guard("restore_private_pool", ordinal_, [&] {
    std::lock_guard lock(lock_);
    if (private_.use_count(id) == 0) {
      return fail(Error::invalid_value, "device %d: restore of private pool %llu, which is not "
                  "in use", ordinal_, static_cast<unsigned long long>(id));
    }
    if (regions_.paused(regions_.region_of(id))) {
      return fail(Error::invalid_value, "device %d: restore of private pool %llu, whose region "
                  "is paused: resume it first", ordinal_, static_cast<unsigned long long>(id));
    }
    // Checked before anything changes: each allocation lies in one of the pool's segments,
    // in address order, without overlap (all of the pool is free once its live ones go).
    std::vector<Segment*> homes;
    for (std::size_t i = 0; i < checkpoint.size(); ++i) {
      const PoolAllocation& a = checkpoint[i];
      Segment* seg = a.size == 0 ? nullptr : private_segment_of(id, a.addr, a.size);
      if (seg == nullptr || (i > 0 && checkpoint[i - 1].addr + checkpoint[i - 1].size > a.addr)) {
        return fail(Error::invalid_value, "device %d: checkpoint of private pool %llu does not "
                    "match its segments at %#zx", ordinal_,
                    static_cast<unsigned long long>(id), static_cast<std::size_t>(a.addr));
      }
      homes.push_back(seg);
    }
    std::vector<LiveEntry> live;
    live_.for_each([&](const LiveEntry& e) {
      if (!e.owner.is_slab() && e.owner.block()->segment->pool->private_id == id) live.push_back(e);
    });
    freed->clear();
    for (const LiveEntry& e : live) {
      live_.erase(live_.find(e.key));
      deferred_.forget_uses(e.key);  // nothing queued uses the memory (the caller's promise)
      ledger_.free_requested(e.key, e.owner.rounded_size(), e.requested, e.owner.stream());
      complete_free(e.owner.untagged(), e.key);
      freed->push_back(e.key);
    }
    for (std::size_t i = 0; i < checkpoint.size(); ++i) {
      const PoolAllocation& a = checkpoint[i];
      Block* block = nullptr;
      if (blocks_.allocate_at(*homes[i], a.addr, a.size, &block) != Error::ok) {
        return fail(Error::internal, "device %d: restoring %#zx in private pool %llu failed",
                    ordinal_, static_cast<std::size_t>(a.addr),
                    static_cast<unsigned long long>(id));
      }
      block->requested = a.requested;
      const Owner owner = Owner::of(block);
      live_.insert(LiveEntry{a.addr, owner, a.requested});
      ledger_.handed_out(a.addr, owner.rounded_size(), a.requested, owner.stream());
    }
    if (settings_.validate) check_after_operation("restore_private_pool");
    return Error::ok;
  });
}

}  // namespace cudalloc
