#include "core/device_allocator.h"

#include <algorithm>
#include <mutex>

#include "core/log.h"
#include "util/units.h"

namespace cudalloc {

DeviceAllocator::DeviceAllocator(device::Device& device, int ordinal, const Settings& settings)
    : device_(device),
      ordinal_(ordinal),
      settings_(settings),
      page_size_(settings.vmm ? device.granularity(ordinal) : 0),
      classes_(settings.slab_max,
               page_size_ != 0 ? SizeClasses::kPagedSlabs : SizeClasses::kPlainSlabs),
      trace_(settings.trace) {
  std::size_t free_bytes = 0;
  if (device_.mem_info(ordinal_, &free_bytes, &device_total_) != device::Status::ok) {
    device_total_ = 0;
  }
}

DeviceAllocator::~DeviceAllocator() {
  // Only test code destroys allocators; the process-wide ones live until exit. Device memory
  // still in use by callers is returned with the segments: callers must not outlive us.
  std::lock_guard lock(lock_);
  drop_everything();
  for (Block* b : spare_blocks_) delete b;
}

void DeviceAllocator::drop_everything() {
  for (auto& [stream, pool] : pools_) {
    for (Segment* seg : pool->segments) {
      for (Block* b = seg->first; b != nullptr;) {
        Block* next = b->next;
        delete b->slab;
        delete b;
        b = next;
      }
      if (seg->paged()) {
        drop_paged_segment(seg);
      } else if (seg->pinned) {
        device_.host_free(reinterpret_cast<void*>(seg->base));
      } else {
        device_.free(ordinal_, reinterpret_cast<void*>(seg->base));
      }
      delete seg;
    }
  }
  release_stray_mappings();
  stray_pages_.clear();
  stray_ranges_.clear();
  for (PhysicalPage* phys : physical_pages_) {
    if (phys->home != 0) device_.unmap(phys->home, page_size_);
    device_.release_physical(phys->handle);
    delete phys;
  }
  physical_pages_.clear();
  for (std::uintptr_t chunk : home_chunks_) device_.unreserve(chunk, kHomeChunkPages * page_size_);
  home_chunks_.clear();
  free_homes_.clear();
  chronic_pages_ = 0;
  if (staging_va_ != 0) device_.unreserve(staging_va_, page_size_ * kStagingPages);
  device_idle_ = IdleList{};
  host_idle_ = IdleList{};
  host_pages_ = 0;
  staging_va_ = 0;
  pools_.clear();
  last_pool_ = nullptr;
  for (EventHandle e : idle_events_) device_.event_destroy(e);
  idle_events_.clear();
  for (PendingFree& p : pending_) {
    for (EventHandle e : p.events) device_.event_destroy(e);
  }
  pending_.clear();
  unfenced_.clear();
  live_ = LiveMap();
  stream_uses_.clear();
}

Error DeviceAllocator::reset() {
  std::lock_guard lock(lock_);
  device_.synchronize(ordinal_);
  const auto released = stats_.reserved_count.current;
  drop_everything();
  // Every gauge drops to zero; peaks, totals and event counters keep their history.
  for (Stat* gauge : {&stats_.allocated_bytes, &stats_.allocated_count, &stats_.requested_bytes,
                      &stats_.active_bytes, &stats_.active_count, &stats_.reserved_bytes,
                      &stats_.reserved_count, &stats_.cached_bytes, &stats_.cached_count,
                      &stats_.slab_bytes, &stats_.slab_count, &stats_.mapped_bytes,
                      &stats_.host_reserved_bytes, &stats_.host_active_bytes}) {
    gauge->current = 0;
  }
  stats_.device_frees.increase(released);
  return Error::ok;
}

StreamPool& DeviceAllocator::pool_for(StreamHandle stream) {
  if (last_pool_ != nullptr && last_pool_->stream == stream) return *last_pool_;
  auto& slot = pools_[stream];
  if (!slot) {
    slot = std::make_unique<StreamPool>();
    slot->stream = stream;
    slot->classes.resize(static_cast<std::size_t>(classes_.count()));
  }
  last_pool_ = slot.get();
  return *slot;
}

Error DeviceAllocator::allocate(std::size_t size, StreamHandle stream, void** ptr) {
  *ptr = nullptr;
  if (size == 0) return Error::ok;
  std::lock_guard lock(lock_);
  if (size > kMaxRequest || (device_total_ != 0 && size > device_total_)) {
    stats_.ooms.count();
    if (trace_.enabled()) trace_.record(TraceAction::oom, 0, size, stream);
    return fail(Error::out_of_memory,
                "cannot allocate %zu bytes on device %d: larger than the device (%zu bytes)",
                size, ordinal_, device_total_);
  }
  if (!pending_.empty()) process_pending(false);
  std::uintptr_t addr = 0;
  std::uintptr_t owner = 0;
  const auto device_allocs_before = stats_.device_allocs.total;
  Error err = allocate_locked(size, stream, &addr, &owner);
  if (err != Error::ok) return err;
  if (stats_.device_allocs.total == device_allocs_before) stats_.cache_hits.count();
  record_allocation(addr, owner, size);
  if (trace_.enabled()) trace_.record(TraceAction::alloc, addr, rounded_size(owner), stream);
  *ptr = reinterpret_cast<void*>(addr);
  if (settings_.validate) check_after_operation("allocate");
  return Error::ok;
}

Error DeviceAllocator::try_allocate(StreamPool& pool, std::size_t size, std::uintptr_t* addr,
                                    std::uintptr_t* owner) {
  // Spilled requests get blocks of spill segments, small ones too: a slab there would serve
  // later requests that fit the device from the host tier.
  if (size <= classes_.slab_max() && spill_ == Spill::off) {
    Slab* slab = nullptr;
    const Error err = allocate_small(pool, size, addr, &slab);
    *owner = reinterpret_cast<std::uintptr_t>(slab) | kSlabTag;
    return err;
  }
  Block* block = nullptr;
  const Error err = allocate_large(pool, size, false, &block);
  if (err == Error::ok) {
    *addr = block->addr;
    *owner = reinterpret_cast<std::uintptr_t>(block);
  }
  return err;
}

Error DeviceAllocator::allocate_locked(std::size_t size, StreamHandle stream,
                                       std::uintptr_t* addr, std::uintptr_t* owner) {
  StreamPool& pool = pool_for(stream);
  if (!unfenced_.empty()) {
    // Memory freed in device order is reused (behind a fence) before new memory is taken.
    may_grow_ = false;
    const Error cached = try_allocate(pool, size, addr, owner);
    may_grow_ = true;
    if (cached != Error::out_of_memory) return cached;
    fence_device_ordered_frees();
  }
  Error err = try_allocate(pool, size, addr, owner);
  if (err != Error::out_of_memory) return err;
  // OOM path: return every unused segment, then try once more.
  release_cached_memory();
  err = try_allocate(pool, size, addr, owner);
  if (err == Error::ok) stats_.alloc_retries.count();
  if (err == Error::out_of_memory && settings_.offload == Offload::host) {
    err = spill(pool, size, addr, owner);
  }
  if (err == Error::out_of_memory) return out_of_memory(size, pool.stream);
  return err;
}

Error DeviceAllocator::out_of_memory(std::size_t size, StreamHandle stream) {
  stats_.ooms.count();
  if (trace_.enabled()) trace_.record(TraceAction::oom, 0, size, stream);
  const std::size_t cap = reserve_cap();
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  device_.mem_info(ordinal_, &free_bytes, &total);
  std::string host_tier;
  if (settings_.offload == Offload::host) {
    host_tier = "; host tier " +
                format_bytes(static_cast<std::size_t>(stats_.host_reserved_bytes.current)) +
                " held, host_limit " +
                (settings_.host_limit == 0 ? std::string("none")
                                           : format_bytes(settings_.host_limit));
  }
  fail(Error::out_of_memory,
       "out of memory: cannot allocate %s on device %d (stream %#zx): %s allocated, %s reserved "
       "(%s of it cached and free in pieces too small), cap %s, device free %s of %s%s",
       format_bytes(size).c_str(), ordinal_, static_cast<std::size_t>(stream),
       format_bytes(static_cast<std::size_t>(stats_.allocated_bytes.current)).c_str(),
       format_bytes(static_cast<std::size_t>(stats_.reserved_bytes.current)).c_str(),
       format_bytes(static_cast<std::size_t>(stats_.cached_bytes.current)).c_str(),
       cap == 0 ? "none" : format_bytes(cap).c_str(), format_bytes(free_bytes).c_str(),
       format_bytes(total).c_str(), host_tier.c_str());
  log().warn("{}", last_error_message());
  return Error::out_of_memory;
}

void DeviceAllocator::record_allocation(std::uintptr_t addr, std::uintptr_t owner,
                                        std::size_t requested) {
  live_.insert(LiveEntry{addr, owner, requested});
  const auto rounded = static_cast<std::int64_t>(rounded_size(owner));
  stats_.allocated_bytes.increase(rounded);
  stats_.allocated_count.count();
  stats_.requested_bytes.increase(static_cast<std::int64_t>(requested));
  stats_.active_bytes.increase(rounded);
  stats_.active_count.count();
  stats_.cached_bytes.decrease(rounded);
}

Error DeviceAllocator::deallocate(void* ptr, FreeOrder order) {
  if (ptr == nullptr) return Error::ok;
  std::lock_guard lock(lock_);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  LiveEntry* entry = live_.find(addr);
  if (entry == nullptr) {
    return fail(Error::invalid_pointer,
                "free of %p on device %d: not an allocation of cudalloc that is still live "
                "(double free, foreign or interior pointer)", ptr, ordinal_);
  }
  const LiveEntry e = *entry;
  live_.erase(entry);
  const std::size_t rounded = rounded_size(e.owner);
  if (trace_.enabled()) {
    trace_.record(TraceAction::free_requested, addr, rounded, stream_of(e.owner));
  }
  stats_.allocated_bytes.decrease(static_cast<std::int64_t>(rounded));
  stats_.allocated_count.decrease(1);
  stats_.requested_bytes.decrease(static_cast<std::int64_t>(e.requested));
  Error err = Error::ok;
  if (order == FreeOrder::device) {
    stream_uses_.erase(addr);  // the fence covers every stream
    defer_until_device_idle(e);
  } else if (e.owner & kHasStreamUses) {
    auto uses = stream_uses_.extract(addr);
    err = defer_free(e, stream_of(e.owner), uses.mapped());
  } else {
    complete_free(e.owner, addr, e.requested);
  }
  if (settings_.promote > 0 && stats_.host_active_bytes.current > 0) maybe_promote();
  if (settings_.validate) check_after_operation("free");
  return err;
}

void DeviceAllocator::complete_free(std::uintptr_t owner, std::uintptr_t addr,
                                    std::size_t /*requested*/) {
  const std::size_t rounded = rounded_size(owner);
  if (trace_.enabled()) {
    trace_.record(TraceAction::free_completed, addr, rounded, stream_of(owner));
  }
  if (owner & kSlabTag) {
    free_small(reinterpret_cast<Slab*>(owner & ~kTagMask), addr);
  } else {
    free_block(reinterpret_cast<Block*>(owner & ~kTagMask));
  }
  stats_.active_bytes.decrease(static_cast<std::int64_t>(rounded));
  stats_.active_count.decrease(1);
  stats_.cached_bytes.increase(static_cast<std::int64_t>(rounded));
}

Error DeviceAllocator::record_stream(void* ptr, StreamHandle stream) {
  std::lock_guard lock(lock_);
  LiveEntry* entry = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (entry == nullptr) {
    return fail(Error::invalid_pointer,
                "record_stream of %p on device %d: not a live allocation of cudalloc", ptr,
                ordinal_);
  }
  if (stream == stream_of(entry->owner)) return Error::ok;  // stream order covers it
  auto& uses = stream_uses_[entry->key];
  for (StreamHandle s : uses) {
    if (s == stream) return Error::ok;
  }
  uses.push_back(stream);
  entry->owner |= kHasStreamUses;
  return Error::ok;
}

Error DeviceAllocator::empty_cache() {
  std::lock_guard lock(lock_);
  release_cached_memory();
  release_cached_pages();
  if (settings_.validate) check_after_operation("empty_cache");
  return Error::ok;
}

Error DeviceAllocator::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return fail(Error::invalid_value, "memory fraction %g is not in (0, 1]", fraction);
  }
  std::lock_guard lock(lock_);
  settings_.fraction = fraction;
  return Error::ok;
}

Error DeviceAllocator::set_memory_limit(std::size_t bytes) {
  std::lock_guard lock(lock_);
  settings_.limit = bytes;
  return Error::ok;
}

void DeviceAllocator::register_stream(StreamHandle stream) {
  std::lock_guard lock(lock_);
  if (std::find(fence_streams_.begin(), fence_streams_.end(), stream) != fence_streams_.end()) {
    return;
  }
  // Memory already reused may have been freed while older work still used it: the new
  // stream starts after all of that work.
  order_streams_after_now({stream});
  fence_streams_.push_back(stream);
}

void DeviceAllocator::unregister_stream(StreamHandle stream) {
  std::lock_guard lock(lock_);
  std::erase(fence_streams_, stream);
}

Error DeviceAllocator::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t device_free = 0, device_total = 0;
  const auto status = device_.mem_info(ordinal_, &device_free, &device_total);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: memory info failed: %s", ordinal_,
                device::status_name(status));
  }
  std::lock_guard lock(lock_);
  const auto active = static_cast<std::size_t>(stats_.active_bytes.current);
  const auto cached = static_cast<std::size_t>(stats_.cached_bytes.current);
  std::size_t free = device_free + cached;
  std::size_t total = device_total;
  if (const std::size_t cap = reserve_cap(); cap != 0 && cap < total) {
    total = cap;
    free = std::min(free, cap > active ? cap - active : 0);
  }
  *free_bytes = std::min(free, total);
  *total_bytes = total;
  return Error::ok;
}

std::size_t DeviceAllocator::reserve_cap() const {
  std::size_t cap = settings_.limit;
  if (settings_.fraction < 1.0 && device_total_ != 0) {
    const auto by_fraction =
        static_cast<std::size_t>(settings_.fraction * static_cast<double>(device_total_));
    if (cap == 0 || by_fraction < cap) cap = by_fraction;
  }
  return cap;
}

Stats DeviceAllocator::stats() const {
  std::lock_guard lock(lock_);
  return stats_;
}

void DeviceAllocator::reset_peak_stats() {
  std::lock_guard lock(lock_);
  stats_.for_each_mutable([](std::string_view, Stat& s) { s.reset_peak(); });
}

bool DeviceAllocator::owns(const void* ptr) const {
  std::lock_guard lock(lock_);
  return live_.find(reinterpret_cast<std::uintptr_t>(ptr)) != nullptr;
}

void DeviceAllocator::release_cached_memory() {
  process_pending(true);
  complete_device_ordered_frees();
  release_empty_slabs();
  release_free_segments(false);
  release_free_segments(true);
}

void DeviceAllocator::check_after_operation(const char* operation) {
  const std::string problem = validate_locked();
  if (!problem.empty()) log().error("invariant broken after {}: {}", operation, problem);
}

std::string DeviceAllocator::validate() const {
  std::lock_guard lock(lock_);
  return validate_locked();
}

}  // namespace cudalloc
