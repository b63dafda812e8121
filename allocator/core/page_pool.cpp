// Paged segments: fragmentation control through virtual memory.
//
// In paged mode each stream's pool places its blocks (best fit, split, coalesce, exactly as in
// plain segments) in a large virtual range reserved once. Only the granules ("pages") that
// lie under a non-free block are backed by physical memory, so memory is reserved for what is
// in use, not for the holes between. Physical pages belong to the device, not to a range.
//
// A physical page may stay mapped at every virtual page it has served, but serves one at a
// time. When a page gets its first user it needs a physical page of its own:
//   - the one already mapped there, when no other page uses it now: no driver call. A step
//     that repeats the last one's sizes lands on the same addresses and maps nothing;
//   - else (the page is unmapped, or its physical page serves another page, which unmaps it
//     first) an idle physical page or new memory, mapped there in addition to wherever it is
//     mapped already. Idle pages are preferred once they exceed page_slack of reserved memory
//     (or the cap or the device leaves no room); see acquire_physical for which one. A page
//     that has lost its physical page to another page kChronicConflicts times gets new
//     memory (within a quarter of page_slack in all): such pages remap every step otherwise.
// So a physical page is shared by addresses whose uses do not overlap in time, and memory
// tracks the peak of pages in use while the steady state needs no mapping calls.
//
// Ordering rules.
//   - Reusing a physical page on the stream that used it last needs nothing: later work on a
//     stream runs after earlier work. For another stream, that stream waits on the GPU for an
//     event recorded on the last one (order_after_stream).
//   - cuMemUnmap does not wait for work that still uses the range. A page's mapping is removed
//     only after the host has waited for the work queued on the page's stream up to the time
//     the page lost its last user (or for the device, in empty_cache).
#include "core/device_allocator.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {
namespace {

// Virtual range reserved per paged segment when the device's size is unknown.
constexpr std::size_t kDefaultRange = 64 * GiB;

}  // namespace

Error DeviceAllocator::new_paged_segment(StreamPool& pool, std::size_t size, Segment** out) {
  // One range the size of the device serves every request of the stream; a pool gets another
  // only when its range has no hole big enough for a request.
  const std::size_t range =
      round_up(std::max(size, device_total_ != 0 ? device_total_ : kDefaultRange), page_size_);
  std::uintptr_t va = 0;
  const auto status = device_.reserve(ordinal_, range, &va);
  if (status != device::Status::ok) {
    const Error err =
        status == device::Status::out_of_memory ? Error::out_of_memory : Error::device_error;
    return fail(err, "device %d: reserving %s of address space failed: %s %s",
                ordinal_, format_bytes(range).c_str(), device::status_name(status),
                device_.last_failure());
  }
  Segment* seg = add_segment(pool, va, range);
  seg->pages.resize(range / page_size_);
  for (Page& p : seg->pages) p.segment = seg;
  *out = seg;
  return Error::ok;
}

std::uintptr_t DeviceAllocator::page_address(const Page& page) const {
  const Segment& seg = *page.segment;
  return seg.base + static_cast<std::size_t>(&page - seg.pages.data()) * page_size_;
}

Error DeviceAllocator::use_pages(Segment* seg, std::uintptr_t addr, std::size_t size) {
  const auto [first, last] = seg->pages_under(addr, size, page_size_);
  for (std::size_t i = first; i <= last; ++i) {
    Page& page = seg->pages[i];
    if (page.users == 0) {
      if (const Error err = claim_page(page); err != Error::ok) {
        for (std::size_t j = first; j < i; ++j) drop_page_user(seg->pages[j]);
        return err;
      }
    }
    ++page.users;
  }
  return Error::ok;
}

void DeviceAllocator::unuse_pages(Segment* seg, std::uintptr_t addr, std::size_t size) {
  const auto [first, last] = seg->pages_under(addr, size, page_size_);
  for (std::size_t i = first; i <= last; ++i) drop_page_user(seg->pages[i]);
}

void DeviceAllocator::drop_page_user(Page& page) {
  if (--page.users != 0) return;
  page.idle_since = ++page_epoch_;
  PhysicalPage& phys = *page.phys;
  clear_owner(phys);
  phys.last_pool = page.segment->pool;
  idle_push(phys);
}

void DeviceAllocator::set_owner(PhysicalPage& phys, Page* page) {
  phys.owner = page;
  if (phys.host) stats_.host_active_bytes.increase(static_cast<std::int64_t>(page_size_));
}

void DeviceAllocator::clear_owner(PhysicalPage& phys) {
  phys.owner = nullptr;
  if (phys.host) stats_.host_active_bytes.decrease(static_cast<std::int64_t>(page_size_));
}

Error DeviceAllocator::claim_page(Page& page) {
  PhysicalPage* phys = page.phys;
  if (phys != nullptr && phys->owner == nullptr && phys->host && spill_ == Spill::off) {
    if (const Error err = replace_host_page(page, &phys); err != Error::ok) return err;
  } else if (phys != nullptr && phys->owner == nullptr) {
    if (!page.accessible) {  // a mapping whose access grant failed earlier
      if (const Error err = grant_access(page); err != Error::ok) return err;
    }
    idle_remove(*phys);
  } else {
    // Unmapped, or mapped to a physical page that now serves another page.
    const bool conflict = phys != nullptr;
    if (conflict) {
      if (const Error err = unmap_page(page); err != Error::ok) return err;
      if (page.conflicts < 255) ++page.conflicts;
    }
    const bool chronic = conflict && page.conflicts >= kChronicConflicts;
    if (const Error err = acquire_physical(conflict, chronic, &phys); err != Error::ok) return err;
    if (const Error err = map_physical(page, *phys); err != Error::ok) {
      idle_push(*phys);
      return err;
    }
  }
  StreamPool* pool = page.segment->pool;
  if (phys->last_pool != nullptr && phys->last_pool != pool) {
    order_after_stream(phys->last_pool->stream, pool->stream);
  }
  set_owner(*phys, &page);
  phys->last_pool = pool;
  return Error::ok;
}

Error DeviceAllocator::replace_host_page(Page& page, PhysicalPage** out) {
  // Device memory first: when there is none, the host page stays mapped here for the spill
  // that follows, which then reuses it without a driver call (a workload that spills the
  // same addresses every step maps nothing in the steady state).
  PhysicalPage* phys = nullptr;
  if (const Error err = acquire_physical(false, false, &phys); err != Error::ok) return err;
  Error err = unmap_page(page);  // the host page stays idle, for the next spill
  if (err == Error::ok) err = map_physical(page, *phys);
  if (err != Error::ok) {
    idle_push(*phys);
    return err;
  }
  *out = phys;
  return Error::ok;
}

Error DeviceAllocator::acquire_physical(bool conflict, bool chronic, PhysicalPage** out) {
  const double slack = settings_.page_slack * static_cast<double>(stats_.reserved_bytes.current);
  // While device-ordered frees wait for a fence, new memory is not taken (allocate_locked).
  bool prefer_idle =
      !may_grow_ || static_cast<double>(device_idle_.count * page_size_) > slack;
  // A page that keeps losing its physical page is part of a cycle in which more pages are in
  // use than there is memory for: new memory ends the cycle, within a quarter of the slack.
  const bool grow_chronic =
      chronic && static_cast<double>(chronic_pages_ * page_size_) <= kChronicShare * slack;
  if (grow_chronic) prefer_idle = !may_grow_;
  // Which idle page: a page mapped nowhere yet takes the one idle longest, whose old
  // addresses a repeating workload is least likely to want back soon after a short pause; a
  // page whose physical page was taken (a conflict, typical of a repeating workload's cycle)
  // takes the one idle shortest, whose old address comes round last in the cycle.
  auto take_idle = [&] {
    *out = conflict ? device_idle_.tail : device_idle_.head;
    idle_remove(**out);
    return Error::ok;
  };
  if (device_idle_.head != nullptr && prefer_idle) return take_idle();
  Error err = may_grow_ ? create_page(device::Location::device, out) : Error::out_of_memory;
  if (err == Error::ok && grow_chronic) ++chronic_pages_;
  if (err == Error::out_of_memory && device_idle_.head != nullptr) return take_idle();
  // No device room while spilling: the host tier.
  if (err == Error::out_of_memory && spill_ == Spill::host_pages) err = acquire_host_page(out);
  return err;
}

Error DeviceAllocator::acquire_host_page(PhysicalPage** out) {
  if (host_idle_.head != nullptr) {
    *out = host_idle_.head;
    idle_remove(**out);
    return Error::ok;
  }
  return create_page(device::Location::host, out);
}

Error DeviceAllocator::create_page(device::Location where, PhysicalPage** out) {
  const bool host = where == device::Location::host;
  if (host) {
    const auto held = static_cast<std::size_t>(stats_.host_reserved_bytes.current);
    if (!host_pages_supported_) return Error::out_of_memory;
    if (settings_.host_limit != 0 && held + page_size_ > settings_.host_limit) {
      return Error::out_of_memory;
    }
  } else {
    const std::size_t cap = reserve_cap();
    const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
    if (cap != 0 && reserved + page_size_ > cap) return Error::out_of_memory;
  }
  device::PhysicalHandle handle = 0;
  const auto status = device_.create_physical(ordinal_, page_size_, where, &handle);
  if (status == device::Status::out_of_memory) return Error::out_of_memory;
  if (host && (status == device::Status::not_supported ||
               status == device::Status::invalid_value)) {
    // The driver cannot place physical memory on the host: spill to pinned memory instead.
    log().info("device {}: host-located pages are not supported ({}); the host tier uses "
               "pinned host memory", ordinal_, device_.last_failure());
    host_pages_supported_ = false;
    return Error::out_of_memory;
  }
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: creating a physical page failed: %s %s",
                ordinal_, device::status_name(status), device_.last_failure());
  }
  auto* phys = new PhysicalPage;
  phys->handle = handle;
  phys->host = host;
  phys->index = physical_pages_.size();
  physical_pages_.push_back(phys);
  const auto bytes = static_cast<std::int64_t>(page_size_);
  if (host) {
    ++host_pages_;
    stats_.host_reserved_bytes.increase(bytes);
    map_home(*phys);
  } else {
    stats_.reserved_bytes.increase(bytes);
    stats_.reserved_count.count();
    stats_.device_allocs.count();
  }
  stats_.cached_bytes.increase(bytes);
  *out = phys;
  return Error::ok;
}

bool DeviceAllocator::release_physical_page(PhysicalPage* phys) {
  if (device_.release_physical(phys->handle) != device::Status::ok) {
    log().warn("device {}: releasing a physical page failed: {}; kept for the next try",
               ordinal_, device_.last_failure());
    return false;
  }
  idle_remove(*phys);
  PhysicalPage* moved = physical_pages_.back();
  physical_pages_[phys->index] = moved;
  moved->index = phys->index;
  physical_pages_.pop_back();
  const auto bytes = static_cast<std::int64_t>(page_size_);
  if (phys->host) {
    --host_pages_;
    stats_.host_reserved_bytes.decrease(bytes);
    unmap_home(*phys);
  } else {
    stats_.reserved_bytes.decrease(bytes);
    stats_.reserved_count.decrease(1);
    stats_.device_frees.count();
  }
  stats_.cached_bytes.decrease(bytes);
  delete phys;
  return true;
}

Error DeviceAllocator::map_physical(Page& page, PhysicalPage& phys) {
  if (const Error err = attach_physical(page, phys); err != Error::ok) return err;
  const Error err = grant_access(page);
  // Without access the mapping is useless: undo it (if that fails too, it stays recorded,
  // without access, for a later claim to grant or empty_cache to remove).
  if (err != Error::ok) unmap_page(page);
  return err;
}

Error DeviceAllocator::attach_physical(Page& page, PhysicalPage& phys) {
  const std::uintptr_t va = page_address(page);
  const auto status = device_.map(va, page_size_, phys.handle, 0);
  if (status != device::Status::ok) {
    if (status == device::Status::out_of_memory) return Error::out_of_memory;
    return fail(Error::device_error, "device %d: mapping a page at %#zx failed: %s %s", ordinal_,
                static_cast<std::size_t>(va), device::status_name(status), device_.last_failure());
  }
  page.phys = &phys;
  page.accessible = false;
  phys.mappings.push_back(&page);
  stats_.mapped_bytes.increase(static_cast<std::int64_t>(page_size_));
  stats_.page_maps.count();
  if (trace_.enabled()) {
    trace_.record(TraceAction::segment_map, va, page_size_, page.segment->pool->stream);
  }
  return Error::ok;
}

Error DeviceAllocator::grant_access(Page& page) {
  const std::uintptr_t va = page_address(page);
  const auto status = device_.set_access(ordinal_, va, page_size_);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: granting access to a page at %#zx failed: %s %s",
                ordinal_, static_cast<std::size_t>(va), device::status_name(status),
                device_.last_failure());
  }
  page.accessible = true;
  return Error::ok;
}

Error DeviceAllocator::unmap_page(Page& page) {
  StreamPool& pool = *page.segment->pool;
  const std::uintptr_t va = page_address(page);
  const auto status = wait_until_settled(pool, page.idle_since)
                          ? device_.unmap(va, page_size_)
                          : device::Status::device_error;
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: unmapping a page at %#zx failed: %s %s",
                ordinal_, static_cast<std::size_t>(va), device::status_name(status),
                device_.last_failure());
  }
  std::erase(page.phys->mappings, &page);
  page.phys = nullptr;
  page.accessible = false;
  stats_.mapped_bytes.decrease(static_cast<std::int64_t>(page_size_));
  stats_.page_unmaps.count();
  if (trace_.enabled()) trace_.record(TraceAction::segment_unmap, va, page_size_, pool.stream);
  return Error::ok;
}

bool DeviceAllocator::wait_until_settled(StreamPool& pool, std::uint64_t epoch) {
  if (pool.settled_epoch >= epoch) return true;
  const std::uint64_t now = page_epoch_;
  stats_.page_waits.count();
  bool whole_device = false;
  if (wait_for_stream(pool.stream, &whole_device) != Error::ok) return false;
  if (!whole_device) {
    pool.settled_epoch = now;
    return true;
  }
  for (auto& [stream, p] : pools_) p->settled_epoch = now;
  return true;
}

void DeviceAllocator::idle_push(PhysicalPage& phys) {
  IdleList& list = idle_of(phys);
  phys.idle_since = ++page_epoch_;
  phys.idle_next = nullptr;
  phys.idle_prev = list.tail;
  if (list.tail != nullptr) {
    list.tail->idle_next = &phys;
  } else {
    list.head = &phys;
  }
  list.tail = &phys;
  ++list.count;
}

void DeviceAllocator::idle_remove(PhysicalPage& phys) {
  IdleList& list = idle_of(phys);
  if (phys.idle_prev != nullptr) {
    phys.idle_prev->idle_next = phys.idle_next;
  } else {
    list.head = phys.idle_next;
  }
  if (phys.idle_next != nullptr) {
    phys.idle_next->idle_prev = phys.idle_prev;
  } else {
    list.tail = phys.idle_prev;
  }
  phys.idle_prev = phys.idle_next = nullptr;
  --list.count;
}

std::size_t DeviceAllocator::release_cached_pages() {
  if (device_idle_.count + host_idle_.count == 0 && stats_.mapped_bytes.current == 0 &&
      stray_pages_.empty() && stray_ranges_.empty()) {
    return 0;
  }
  // Pages without users may still be used by queued work: wait for all of it once.
  if (device_.synchronize(ordinal_) != device::Status::ok) {
    log().warn("device {}: synchronize failed; idle pages are kept", ordinal_);
    return 0;
  }
  for (auto& [stream, pool] : pools_) pool->settled_epoch = page_epoch_;
  release_stray_mappings();
  for (auto& [stream, pool] : pools_) {
    for (Segment* seg : pool->segments) {
      for (Page& page : seg->pages) {
        if (page.phys != nullptr && page.users == 0 && unmap_page(page) != Error::ok) {
          log().warn("device {}: {}", ordinal_, last_error_message());
        }
      }
    }
  }
  std::size_t released = 0;
  for (PhysicalPage* phys = device_idle_.head; phys != nullptr;) {
    PhysicalPage* next = phys->idle_next;
    if (phys->mappings.empty() && release_physical_page(phys)) released += page_size_;
    phys = next;
  }
  for (PhysicalPage* phys = host_idle_.head; phys != nullptr;) {
    PhysicalPage* next = phys->idle_next;
    if (phys->mappings.empty()) release_physical_page(phys);  // host memory: not counted
    phys = next;
  }
  chronic_pages_ = 0;  // the memory they were counted against is gone or idle
  return released;
}

void DeviceAllocator::drop_paged_segment(Segment* seg) {
  for (Page& page : seg->pages) {
    if (page.phys != nullptr) device_.unmap(page_address(page), page_size_);
  }
  device_.unreserve(seg->base, seg->size);
}

}  // namespace cudalloc
