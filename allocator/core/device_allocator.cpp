#include "core/device_allocator.h"

#include <algorithm>
#include <mutex>

#include "core/captures.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {

using device::Location;

std::size_t DeviceAllocator::paged_page_size(const Settings& settings, std::size_t granularity) {
  // No granularity: the device has no virtual memory management, so no paged segments.
  if (granularity == 0) return 0;
  return std::max(granularity, round_up(settings.page_size, granularity));
}

std::size_t DeviceAllocator::device_total_of(device::Device& device, int ordinal) {
  std::size_t free_bytes = 0, total = 0;
  return device.mem_info(ordinal, &free_bytes, &total) == device::Status::ok ? total : 0;
}

DeviceAllocator::DeviceAllocator(device::Device& device, int ordinal, const Settings& settings)
    : device_(device),
      ordinal_(ordinal),
      settings_(settings),
      page_size_(settings.vmm ? paged_page_size(settings, device.granularity(ordinal)) : 0),
      classes_(settings.slab_max,
               page_size_ != 0 ? SizeClasses::kPagedSlabs : SizeClasses::kPlainSlabs),
      budget_(settings_, device_total_of(device, ordinal)),
      ledger_(settings.trace),
      sync_(device, ordinal),
      pools_(classes_.count()),
      staging_(device, ordinal, page_size_),
      physical_(device, ordinal, page_size_, settings_, budget_, ledger_, staging_),
      mapper_(device, ordinal, page_size_, budget_, physical_, sync_, staging_, ledger_, pools_),
      imported_(device, ordinal),
      blocks_(device, ordinal, settings_, budget_, ledger_, sync_, pools_,
              page_size_ != 0 ? &mapper_ : nullptr),
      slabs_(classes_, settings_, blocks_, ledger_, pools_),
      migrator_(device, ordinal, settings_, budget_, physical_, mapper_, staging_, sync_, ledger_,
                pools_),
      deferred_(sync_, ledger_, *this, settings.streams) {}

DeviceAllocator::~DeviceAllocator() {
  // Only test code destroys allocators; the process-wide ones live until exit. Device memory
  // still in use by callers is returned with the segments: callers must not outlive us.
  std::lock_guard lock(lock_);
  drop_everything();
}

void DeviceAllocator::drop_everything() {
  fast_.forget();
  blocks_.drop_everything();
  staging_.forget_strays();
  physical_.drop_all();
  staging_.drop();
  pools_.clear();
  mapper_.forget_pools();
  deferred_.forget();
  sync_.destroy_idle_events();
  created_streams_.clear();
  private_.clear();
  regions_.clear();
  live_ = LiveMap();
}

Error DeviceAllocator::reset() {
  return metadata_guard("reset", ordinal_, [&] {
    std::lock_guard lock(lock_);
    sync_.synchronize_device();
    drop_everything();
    ledger_.forget_everything();
    return Error::ok;
  });
}

Error DeviceAllocator::allocate(std::size_t size, StreamHandle stream, void** ptr,
                                PoolId pool) {
  *ptr = nullptr;
  if (size == 0) return Error::ok;
  return metadata_guard("allocate", ordinal_, [&] {
    std::lock_guard lock(lock_);
    // The host tier can hold what the device cannot; without it, larger than the device fails
    // up front.
    const std::size_t total = budget_.device_total();
    const bool too_big = size > kMaxRequest ||
                         (settings_.offload == Offload::none && total != 0 && size > total);
    if (too_big) {
      count_out_of_memory(size, stream, nullptr);
      return fail(Error::out_of_memory,
                  "cannot allocate %zu bytes on device %d: larger than the device (%zu bytes)",
                  size, ordinal_, total);
    }
    if (deferred_.has_pending()) deferred_.poll(Wait::poll);
    deferred_.order_before_reuse();
    std::uintptr_t addr = 0;
    Owner owner;
    const auto device_allocs_before = ledger_.stats().device_allocs.total;
    if (pool == kSharedPool && RegionTags::current() != kNoRegion) pool = route_to_region(pool);
    if (pool != kSharedPool) settle_fast_frees();
    const Error err = pool == kSharedPool ? allocate_locked(size, stream, &addr, &owner)
                                          : allocate_private(size, stream, pool, &addr, &owner);
    if (err != Error::ok) return err;
    if (ledger_.stats().device_allocs.total == device_allocs_before) ledger_.cache_hit();
    live_.insert(LiveEntry{addr, owner, size});
    ledger_.handed_out(addr, owner.rounded_size(), size, stream);
    *ptr = reinterpret_cast<void*>(addr);
    if (settings_.validate) check_after_operation("allocate");
    return Error::ok;
  });
}

Error DeviceAllocator::try_allocate(StreamPool& pool, const Request& request,
                                    std::uintptr_t* addr, Owner* owner) {
  // Spilled requests get blocks of spill segments, small ones too: a slab there would serve
  // later requests that fit the device from the host tier.
  if (request.size <= classes_.slab_max() && !request.spilling()) {
    Slab* slab = nullptr;
    const Error err = slabs_.allocate(pool, request, addr, &slab);
    *owner = Owner::of(slab);
    return err;
  }
  Block* block = nullptr;
  const Error err = blocks_.allocate(pool, request, BlockUse::allocation, &block);
  if (err == Error::ok) {
    *addr = block->addr;
    *owner = Owner::of(block);
  }
  return err;
}

Error DeviceAllocator::allocate_locked(std::size_t size, StreamHandle stream,
                                       std::uintptr_t* addr, Owner* owner) {
  StreamPool& pool = pools_.get(stream);
  if (!fast_.empty()) {
    // A hit reuses a block freed on this stream as it is; anything else sees the pools as if
    // every kept block had been freed at once.
    if (Block* block = fast_.take(pool, round_up(size, kBlockRound)); block != nullptr) {
      *addr = block->addr;
      *owner = Owner::of(block);
      return Error::ok;
    }
    settle_fast_frees();
  }
  const Request request{size, Growth::may_grow, Tier::device};
  if (deferred_.has_unfenced()) {
    // Memory freed in device order is reused (behind a fence) before new memory is taken,
    // once enough of it waits to be worth a device synchronization.
    const Request cached{size, Growth::cache_only, Tier::device};
    if (const Error err = try_allocate(pool, cached, addr, owner); err != Error::out_of_memory) {
      return err;
    }
    // Not while a graph is being captured (captures.h): the fence would end the capture.
    if (fence_due() && !Captures::process().underway()) deferred_.fence();
  }
  Error err = try_allocate(pool, request, addr, owner);
  if (err != Error::out_of_memory) return err;
  // OOM path: return every unused segment, then try once more; releasing synchronizes the
  // device, which would end a capture underway, so then the request fails instead.
  if (Captures::process().underway()) return out_of_memory(size, pool.stream);
  release_cached_memory();
  err = try_allocate(pool, request, addr, owner);
  if (err == Error::ok) ledger_.retry();
  if (err == Error::out_of_memory && settings_.offload == Offload::host) {
    err = spill(pool, request, addr, owner);
  }
  if (err == Error::out_of_memory) return out_of_memory(size, pool.stream);
  return err;
}

void DeviceAllocator::before_capture() {
  std::lock_guard lock(lock_);
  deferred_.order_before_reuse();
}

bool DeviceAllocator::fence_due() const {
  // A GPU-side fence costs no host wait: always. A synchronization only past the slack.
  if (!deferred_.fence_synchronizes()) return true;
  const auto reserved = static_cast<std::size_t>(ledger_.stats().reserved_bytes.current);
  return deferred_.unfenced_bytes() >= std::max(kFenceSlack, reserved / 32);
}

Error DeviceAllocator::spill(StreamPool& pool, Request request, std::uintptr_t* addr,
                             Owner* owner) {
  // Spilled requests go to spill segments of one kind only: paged ones where host-located
  // pages can be created (known from the first one), pinned ones otherwise.
  if (paged()) physical_.probe_host();
  request.tier = paged() && physical_.host_supported() ? Tier::host_pages : Tier::host_segments;
  const Error err = try_allocate(pool, request, addr, owner);
  if (err == Error::ok) ledger_.spill();
  return err;
}

std::size_t DeviceAllocator::count_out_of_memory(std::size_t size, StreamHandle stream,
                                                 std::size_t* total) {
  ledger_.out_of_memory(size, stream);
  std::size_t free_bytes = 0, total_bytes = 0;
  const bool known = device_.mem_info(ordinal_, &free_bytes, &total_bytes) == device::Status::ok;
  note_out_of_memory(OutOfMemoryDetail{ordinal_, size, known, known ? free_bytes : 0});
  if (total != nullptr) *total = known ? total_bytes : 0;
  return known ? free_bytes : 0;
}

Error DeviceAllocator::out_of_memory(std::size_t size, StreamHandle stream) {
  std::size_t total = 0;
  const std::size_t free_bytes = count_out_of_memory(size, stream, &total);
  const Stats& s = ledger_.stats();
  const std::size_t cap = budget_.reserve_cap();
  const auto active = static_cast<std::size_t>(s.active_bytes.current);
  const std::size_t budget = budget_.device_budget();
  // Why: the request does not fit beside what is in use, or the cache holds enough but not
  // in one piece (and the device has no room for more).
  const char* why = budget != 0 && size > (budget > active ? budget - active : 0)
                        ? "more than the budget leaves beside the memory in use"
                        : "cached memory is free only in pieces too small, and the device has "
                          "no room for more";
  std::string host_tier;
  if (settings_.offload == Offload::host) {
    host_tier = "; host tier " +
                format_bytes(static_cast<std::size_t>(s.host_reserved_bytes.current)) +
                " held, host_limit " +
                (settings_.host_limit == 0 ? std::string("none")
                                           : format_bytes(settings_.host_limit));
  }
  fail(Error::out_of_memory,
       "out of memory: cannot allocate %s on device %d (stream %#zx): %s; %s allocated, %s "
       "reserved (%s cached), cap %s, device free %s of %s%s",
       format_bytes(size).c_str(), ordinal_, static_cast<std::size_t>(stream), why,
       format_bytes(static_cast<std::size_t>(s.allocated_bytes.current)).c_str(),
       format_bytes(static_cast<std::size_t>(s.reserved_bytes.current)).c_str(),
       format_bytes(static_cast<std::size_t>(s.cached_bytes.current)).c_str(),
       cap == 0 ? "none" : format_bytes(cap).c_str(), format_bytes(free_bytes).c_str(),
       format_bytes(total).c_str(), host_tier.c_str());
  log().warn("{}", last_error_message());
  return Error::out_of_memory;
}

Error DeviceAllocator::deallocate(void* ptr, FreeOrder order) {
  if (ptr == nullptr) return Error::ok;
  return metadata_guard("free", ordinal_, [&] {
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
    ledger_.free_requested(addr, e.owner.rounded_size(), e.requested, e.owner.stream());
    if (order == FreeOrder::device) {
      deferred_.free_in_device_order(e);
    } else if (e.owner.has_stream_uses()) {
      deferred_.free_in_stream_order(e);
    } else if (!keep_fast(e.owner, addr)) {
      complete_free(e.owner, addr);  // the cached path: reusable at once in stream order
    }
    if (settings_.promote > 0 && paged() && ledger_.stats().host_active_bytes.current > 0) {
      settle_fast_frees();
      migrator_.maybe_promote();
    }
    if (settings_.validate) check_after_operation("free");
    return Error::ok;
  });
}

bool DeviceAllocator::keep_fast(Owner owner, std::uintptr_t addr) {
  if (owner.is_slab()) return false;
  Block* block = owner.block();
  const Segment& seg = *block->segment;
  // Only where a free changes nothing but the block's own bins and pages: shared pools, on
  // device memory (a kept block never serves a request from the wrong tier).
  if (seg.pool->is_private() || seg.pool->region != kNoRegion || seg.spill ||
      seg.pinned_host() || seg.held || seg.host_mapped != 0) {
    return false;
  }
  ledger_.free_completed(addr, owner.rounded_size(), owner.stream());
  block->requested = 0;
  if (Block* out = fast_.keep(block); out != nullptr) blocks_.free(out);
  return true;
}

void DeviceAllocator::settle_fast_frees() {
  fast_.drain([&](Block* block) { blocks_.free(block); });
}

void DeviceAllocator::complete_free(Owner owner, std::uintptr_t addr) {
  ledger_.free_completed(addr, owner.rounded_size(), owner.stream());
  if (owner.is_slab()) {
    slabs_.free(owner.slab(), addr);
  } else {
    StreamPool& pool = *owner.block()->segment->pool;  // read before the block may merge
    blocks_.free(owner.block());
    if (pool.is_private() && private_.released(pool.private_id)) {
      return_released_segments(pool);
    }
  }
}

Error DeviceAllocator::record_stream(void* ptr, StreamHandle stream) {
  return metadata_guard("record_stream", ordinal_, [&] {
    std::lock_guard lock(lock_);
    LiveEntry* entry = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (entry == nullptr) {
      return fail(Error::invalid_pointer,
                  "record_stream of %p on device %d: not a live allocation of cudalloc", ptr,
                  ordinal_);
    }
    deferred_.note_use(*entry, stream);
    return Error::ok;
  });
}

Error DeviceAllocator::empty_cache() {
  return metadata_guard("empty_cache", ordinal_, [&] {
    std::lock_guard lock(lock_);
    settle_fast_frees();
    release_cached_memory();
    if (paged()) release_held_segments();
    if (paged() && mapper_.release_cached()) blocks_.release_free_ranges();
    ledger_.restart_high();  // the next phase's growth bound follows its own peak
    if (settings_.validate) check_after_operation("empty_cache");
    return Error::ok;
  });
}

void DeviceAllocator::release_cached_memory() {
  deferred_.poll(Wait::block);
  deferred_.complete_after_device_sync();
  slabs_.release_empty();
  blocks_.release_free_segments(Segment::Kind::plain);
  blocks_.release_free_segments(Segment::Kind::pinned_host);
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
  metadata_guard("register_stream", ordinal_, [&] {
    std::lock_guard lock(lock_);
    deferred_.register_stream(stream);
    if (std::find(created_streams_.begin(), created_streams_.end(), stream) ==
        created_streams_.end()) {
      created_streams_.push_back(stream);
    }
  });
}

void DeviceAllocator::unregister_stream(StreamHandle stream) {
  metadata_guard("unregister_stream", ordinal_, [&] {
    std::lock_guard lock(lock_);
    settle_fast_frees();
    deferred_.unregister_stream(stream);
    mapper_.forget_stream(stream);
    const auto it = std::find(created_streams_.begin(), created_streams_.end(), stream);
    if (it == created_streams_.end()) return;  // not one the program created
    created_streams_.erase(it);
    release_pool(stream);
  });
}

void DeviceAllocator::release_pool(StreamHandle stream) {
  StreamPool* pool = pools_.find(stream);
  if (pool == nullptr || !paged() || stream == 0) return;
  slabs_.release_empty(pool);
  for (const Segment* seg : pool->segments) {
    if (!seg->paged() || !seg->wholly_free()) return;  // memory in use, or not a range
  }
  // The stream is still valid here (it is destroyed after this call): wait for its work, so
  // that its idle pages can be unmapped and its pages' ordering forgotten.
  if (sync_.wait_for(stream) != Error::ok) return;
  mapper_.unpark_all();
  pool->settled_epoch = physical_.epoch();
  for (Segment* seg : pool->segments) {
    for (std::size_t i = 0; seg->mapped_pages != 0 && i < seg->pages.size(); ++i) {
      Page& page = seg->pages[i];
      if (page.phys != nullptr && mapper_.unmap(page) != Error::ok) return;
    }
  }
  blocks_.release_free_ranges(pool);
}

Error DeviceAllocator::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t device_free = 0, device_total = 0;
  const auto status = device_.mem_info(ordinal_, &device_free, &device_total);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: memory info failed: %s", ordinal_,
                device::status_name(status));
  }
  std::lock_guard lock(lock_);
  const Stats& s = ledger_.stats();
  const auto active = static_cast<std::size_t>(s.active_bytes.current);
  // Only the shared pools' device cache serves a program's requests: not idle host-tier
  // memory, not the free blocks of private pools and regions (whose segments serve only
  // them, and which lie on host pages or on none while a region is paused).
  const std::int64_t host_idle = s.host_reserved_bytes.current - s.host_active_bytes.current;
  std::int64_t private_free = 0;
  pools_.for_each([&](const StreamPool& pool) {
    if (!pool.is_private()) return;
    for (const Segment* seg : pool.segments) {
      for (const Block* b = seg->first; b != nullptr; b = b->next) {
        if (b->state == Block::State::free) private_free += static_cast<std::int64_t>(b->size);
      }
    }
  });
  const auto cached = static_cast<std::size_t>(std::max<std::int64_t>(
      0, s.cached_bytes.current - std::max<std::int64_t>(0, host_idle) - private_free));
  std::size_t free = device_free + cached;
  std::size_t total = device_total;
  if (const std::size_t cap = budget_.reserve_cap(); cap != 0 && cap < total) {
    total = cap;
    free = std::min(free, cap > active ? cap - active : 0);
  }
  *free_bytes = std::min(free, total);
  *total_bytes = total;
  return Error::ok;
}

Error DeviceAllocator::span_of(const void* ptr, AllocationSpan* out) const {
  const auto key = reinterpret_cast<std::uintptr_t>(ptr);
  const LiveEntry* entry = key == 0 ? nullptr : live_.find(key);
  if (entry == nullptr) {
    return fail(Error::invalid_pointer, "device %d: %p is not a live allocation of cudalloc",
                ordinal_, ptr);
  }
  *out = AllocationSpan{entry->owner.segment(), key, entry->owner.rounded_size()};
  return Error::ok;
}

Error DeviceAllocator::move(void* ptr, Location to, StreamHandle stream) {
  return metadata_guard(to == Location::host ? "offload" : "prefetch", ordinal_, [&] {
    std::lock_guard lock(lock_);
    settle_fast_frees();
    deferred_.order_before_reuse();  // a move may take memory freed in device order
    AllocationSpan span;
    if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
    if (span.segment->paused) {
      return fail(Error::invalid_value, "device %d: %p is in a paused region: resume it first",
                  ordinal_, ptr);
    }
    const Error err = migrator_.move(span, to, stream);
    if (settings_.validate) check_after_operation(to == Location::host ? "offload" : "prefetch");
    return err;
  });
}

Error DeviceAllocator::offload(void* ptr, StreamHandle stream) {
  return move(ptr, Location::host, stream);
}

Error DeviceAllocator::prefetch(void* ptr, StreamHandle stream) {
  return move(ptr, Location::device, stream);
}

Error DeviceAllocator::promote() {
  return metadata_guard("promote", ordinal_, [&] {
    std::lock_guard lock(lock_);
    settle_fast_frees();
    deferred_.order_before_reuse();  // promotion takes idle device pages
    return paged() ? migrator_.promote() : Error::ok;
  });
}

Error DeviceAllocator::residency(const void* ptr, std::size_t* device_bytes,
                                 std::size_t* host_bytes) const {
  std::lock_guard lock(lock_);
  AllocationSpan span;
  if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
  migrator_.residency(span, device_bytes, host_bytes);
  return Error::ok;
}

Stats DeviceAllocator::stats() const {
  std::lock_guard lock(lock_);
  Stats s = ledger_.stats();
  // Free blocks as PyTorch counts them (inactive_split): kept blocks merged (fast_frees.h).
  s.cached_count.current += fast_.merged_block_delta();
  s.cached_count.peak = std::max(s.cached_count.peak, s.cached_count.current);
  return s;
}

void DeviceAllocator::reset_peak_stats() {
  std::lock_guard lock(lock_);
  ledger_.reset_peaks();
}

bool DeviceAllocator::owns(const void* ptr) const {
  std::lock_guard lock(lock_);
  return live_.find(reinterpret_cast<std::uintptr_t>(ptr)) != nullptr;
}

void DeviceAllocator::check_after_operation(const char* operation) const {
  const std::string problem = validate_locked();
  if (!problem.empty()) log().error("invariant broken after {}: {}", operation, problem);
}

std::string DeviceAllocator::validate() const {
  std::lock_guard lock(lock_);
  return validate_locked();
}

}  // namespace cudalloc
