// Moving live allocations between device and host memory without changing their address.
//
// In paged mode an allocation's address is a virtual range; what backs it is a physical page
// per granule, on the device or (the host tier) on the host. A move gives each page a new
// physical page of the other location and copies the bytes:
//   1. take the new physical pages (idle ones first) and map them at staging addresses;
//   2. queue the copies page -> staging on the caller's stream, after the work queued there
//      and on the allocation's own stream (order_after_stream);
//   3. wait on the host for that stream: the copies and every earlier use are done;
//   4. per page: unmap the old backing, map the new one at the page, grant access; the old
//      physical page becomes idle (reusable by later requests) and keeps its other mappings;
//   5. unmap the staging addresses.
// Step 4 changes the backing under the allocation's address, which is why nothing may use the
// allocation during the call: a kernel running then could write the old backing after the
// copy. Everything queued before the call is done by step 3; anything queued after the call
// returns sees the new mapping.
//
// Failure handling keeps the allocation valid: before step 4 nothing has changed; in step 4
// a page whose new mapping fails is mapped back to its old physical page, which still holds
// the bytes. Pages already moved stay moved, so an allocation may lie partly on each side.
#include <algorithm>

#include "core/device_allocator.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {
Error DeviceAllocator::offload(void* ptr, StreamHandle stream) {
  return move_allocation(ptr, stream, true);
}

Error DeviceAllocator::prefetch(void* ptr, StreamHandle stream) {
  return move_allocation(ptr, stream, false);
}

Error DeviceAllocator::span_of(const void* ptr, AllocationSpan* out) const {
  const auto key = reinterpret_cast<std::uintptr_t>(ptr);
  const LiveEntry* entry = key == 0 ? nullptr : live_.find(key);
  if (entry == nullptr) {
    return fail(Error::invalid_pointer, "device %d: %p is not a live allocation of cudalloc",
                ordinal_, ptr);
  }
  const std::uintptr_t owner = entry->owner & ~kTagMask;
  out->segment = (entry->owner & kSlabTag) ? reinterpret_cast<const Slab*>(owner)->block->segment
                                           : reinterpret_cast<const Block*>(owner)->segment;
  out->addr = key;
  out->size = rounded_size(entry->owner);
  return Error::ok;
}

Error DeviceAllocator::move_allocation(void* ptr, StreamHandle stream, bool to_host) {
  std::lock_guard lock(lock_);
  AllocationSpan span;
  if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
  const auto [seg, addr, size] = span;
  if (!seg->paged()) {
    return fail(Error::not_supported,
                "device %d: %p cannot move: only allocations in paged segments (vmm) can, and "
                "this one is in %s", ordinal_, ptr,
                seg->pinned ? "pinned host memory" : "a plain segment");
  }
  const auto [first, last] = seg->pages_under(addr, size, page_size_);
  std::vector<Page*> pages;
  for (std::size_t i = first; i <= last; ++i) pages.push_back(&seg->pages[i]);
  const Error err = move_pages(std::move(pages), to_host, stream);
  if (settings_.validate) check_after_operation(to_host ? "offload" : "prefetch");
  return err;
}

Error DeviceAllocator::move_pages(std::vector<Page*> pages, bool to_host, StreamHandle stream) {
  std::erase_if(pages, [&](const Page* p) { return p->phys->host == to_host; });
  if (pages.empty()) return Error::ok;
  const StreamHandle own = pages.front()->segment->pool->stream;
  if (own != stream) order_after_stream(own, stream);
  for (std::size_t at = 0; at < pages.size(); at += kStagingPages) {
    const std::size_t end = std::min(pages.size(), at + kStagingPages);
    const std::vector<Page*> batch(pages.begin() + static_cast<std::ptrdiff_t>(at),
                                   pages.begin() + static_cast<std::ptrdiff_t>(end));
    if (const Error err = move_batch(batch, to_host, stream); err != Error::ok) return err;
  }
  return Error::ok;
}

namespace {

// The end of the run of pages with consecutive addresses that starts at `first`.
std::size_t run_end(const std::vector<Page*>& pages, std::size_t first) {
  std::size_t end = first + 1;
  while (end < pages.size() && pages[end]->segment == pages[first]->segment &&
         pages[end] - pages[first] == static_cast<std::ptrdiff_t>(end - first)) {
    ++end;
  }
  return end;
}

}  // namespace

Error DeviceAllocator::move_batch(const std::vector<Page*>& pages, bool to_host,
                                  StreamHandle stream) {
  // 1. New backing: host pages within host_limit, or device pages within the cap.
  std::vector<PhysicalPage*> fresh;
  std::vector<char> done(pages.size(), 0);
  auto give_back = [&] {
    for (std::size_t k = 0; k < fresh.size(); ++k) {
      if (!done[k]) idle_push(*fresh[k]);
    }
  };
  for (std::size_t k = 0; k < pages.size(); ++k) {
    PhysicalPage* phys = nullptr;
    const Error err = to_host ? acquire_host_page(&phys) : acquire_physical(false, false, &phys);
    if (err != Error::ok) {
      give_back();
      if (err != Error::out_of_memory) return err;
      if (to_host && !host_pages_supported_) {
        return fail(Error::not_supported,
                    "device %d: the driver cannot create host-located pages to move to", ordinal_);
      }
      return fail(Error::out_of_memory, "device %d: no %s memory to move %zu pages to (%s)",
                  ordinal_, to_host ? "host" : "device", pages.size(),
                  to_host ? "host_limit or the host is full" : "the device budget is full");
    }
    fresh.push_back(phys);
  }
  // 2-3. Copy into the new pages, then wait for the copies and everything before them.
  std::size_t staged = 0;
  std::vector<std::uintptr_t> targets(pages.size());
  Error err = prepare_targets(fresh, stream, targets, &staged);
  if (err == Error::ok) err = copy_pages(pages, targets, stream);
  if (err == Error::ok) err = wait_for_stream(stream);
  // 4. Swap the backing, run by run.
  for (std::size_t k = 0; err == Error::ok && k < pages.size();) {
    const std::size_t end = run_end(pages, k);
    err = swap_run(pages, fresh, k, end, done);
    k = end;
  }
  unstage(staged);
  give_back();
  std::int64_t moved = 0;
  for (char d : done) moved += d;
  (to_host ? stats_.page_offloads : stats_.page_prefetches).increase(moved);
  return err;
}

Error DeviceAllocator::prepare_targets(const std::vector<PhysicalPage*>& fresh,
                                       StreamHandle stream, std::vector<std::uintptr_t>& targets,
                                       std::size_t* staged) {
  // A new page may have been used by another stream until recently (an idle page): the copy
  // into it comes after that work.
  std::vector<StreamHandle> ordered;
  for (PhysicalPage* phys : fresh) {
    if (phys->last_pool == nullptr || phys->last_pool->stream == stream) continue;
    if (std::find(ordered.begin(), ordered.end(), phys->last_pool->stream) != ordered.end()) {
      continue;
    }
    ordered.push_back(phys->last_pool->stream);
    order_after_stream(phys->last_pool->stream, stream);
  }
  // Where each is written: a host page's home mapping, a mapping an idle device page keeps at
  // an address nobody uses, or else a staging slot.
  std::vector<std::size_t> need_staging;
  for (std::size_t k = 0; k < fresh.size(); ++k) {
    targets[k] = fresh[k]->home;
    for (const Page* m : fresh[k]->mappings) {
      if (targets[k] == 0 && m->accessible) targets[k] = page_address(*m);
    }
    if (targets[k] == 0) need_staging.push_back(k);
  }
  if (need_staging.empty()) return Error::ok;
  std::vector<PhysicalPage*> to_stage;
  for (std::size_t k : need_staging) to_stage.push_back(fresh[k]);
  if (const Error err = stage_batch(to_stage, staged); err != Error::ok) return err;
  for (std::size_t i = 0; i < need_staging.size(); ++i) {
    targets[need_staging[i]] = staging_va_ + i * page_size_;
  }
  return Error::ok;
}

Error DeviceAllocator::copy_pages(const std::vector<Page*>& pages,
                                  const std::vector<std::uintptr_t>& targets,
                                  StreamHandle stream) {
  // Consecutive pages whose targets are consecutive too are one copy.
  for (std::size_t k = 0; k < pages.size();) {
    std::size_t end = k + 1;
    while (end < pages.size() &&
           page_address(*pages[end]) == page_address(*pages[end - 1]) + page_size_ &&
           targets[end] == targets[end - 1] + page_size_) {
      ++end;
    }
    const auto status = device_.copy(ordinal_, targets[k], page_address(*pages[k]),
                                     (end - k) * page_size_, stream);
    if (status != device::Status::ok) {
      return fail(Error::device_error, "device %d: copying pages for a move failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
    k = end;
  }
  return Error::ok;
}

Error DeviceAllocator::stage_batch(const std::vector<PhysicalPage*>& fresh, std::size_t* staged) {
  if (staging_va_ == 0) {
    const auto status = device_.reserve(ordinal_, kStagingPages * page_size_, &staging_va_);
    if (status != device::Status::ok) {
      staging_va_ = 0;
      return fail(Error::device_error, "device %d: reserving staging addresses failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
  }
  for (*staged = 0; *staged < fresh.size(); ++*staged) {
    const std::uintptr_t va = staging_va_ + *staged * page_size_;
    const auto status = device_.map(va, page_size_, fresh[*staged]->handle, 0);
    if (status != device::Status::ok) {
      return fail(Error::device_error, "device %d: mapping a staging page failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
  }
  if (!grant_range(staging_va_, fresh.size())) {
    return fail(Error::device_error, "device %d: granting access to staging pages failed: %s",
                ordinal_, device_.last_failure());
  }
  return Error::ok;
}

void DeviceAllocator::map_home(PhysicalPage& phys) {
  // Without a home the page is written through a staging slot: slower, never wrong.
  if (free_homes_.empty()) {
    std::uintptr_t chunk = 0;
    if (device_.reserve(ordinal_, kHomeChunkPages * page_size_, &chunk) != device::Status::ok) {
      return;
    }
    home_chunks_.push_back(chunk);
    for (std::size_t i = kHomeChunkPages; i-- > 0;) free_homes_.push_back(chunk + i * page_size_);
  }
  const std::uintptr_t va = free_homes_.back();
  if (device_.map(va, page_size_, phys.handle, 0) != device::Status::ok) return;
  if (device_.set_access(ordinal_, va, page_size_) != device::Status::ok) {
    if (device_.unmap(va, page_size_) != device::Status::ok) {
      free_homes_.pop_back();
      stray_pages_.push_back(va);
    }
    return;
  }
  free_homes_.pop_back();
  phys.home = va;
}

void DeviceAllocator::unmap_home(PhysicalPage& phys) {
  if (phys.home == 0) return;
  // A slot that cannot be unmapped is not used again (release_stray_mappings retries it).
  if (device_.unmap(phys.home, page_size_) == device::Status::ok) {
    free_homes_.push_back(phys.home);
  } else {
    stray_pages_.push_back(phys.home);
  }
  phys.home = 0;
}

bool DeviceAllocator::grant_range(std::uintptr_t va, std::size_t count) {
  if (device_.set_access(ordinal_, va, count * page_size_) == device::Status::ok) return true;
  for (std::size_t k = 0; k < count; ++k) {
    if (device_.set_access(ordinal_, va + k * page_size_, page_size_) != device::Status::ok) {
      return false;
    }
  }
  return true;
}

void DeviceAllocator::unstage(std::size_t staged) {
  bool stuck = false;
  for (std::size_t k = 0; k < staged; ++k) {
    const std::uintptr_t va = staging_va_ + k * page_size_;
    if (device_.unmap(va, page_size_) != device::Status::ok) {
      log().warn("device {}: unmapping a staging page failed: {}", ordinal_,
                 device_.last_failure());
      stray_pages_.push_back(va);
      stuck = true;
    }
  }
  // A slot that stays mapped cannot be mapped over: retire the range (a new one is reserved
  // next time); release_stray_mappings() retries the unmaps and then returns the range.
  if (stuck) {
    stray_ranges_.push_back(staging_va_);
    staging_va_ = 0;
  }
}

void DeviceAllocator::release_stray_mappings() {
  std::erase_if(stray_pages_, [&](std::uintptr_t va) {
    return device_.unmap(va, page_size_) == device::Status::ok;
  });
  std::erase_if(stray_ranges_, [&](std::uintptr_t range) {
    const std::uintptr_t end = range + kStagingPages * page_size_;
    for (std::uintptr_t va : stray_pages_) {
      if (va >= range && va < end) return false;  // still mapped inside
    }
    return device_.unreserve(range, kStagingPages * page_size_) == device::Status::ok;
  });
}

Error DeviceAllocator::swap_run(const std::vector<Page*>& pages,
                                const std::vector<PhysicalPage*>& fresh, std::size_t first,
                                std::size_t last, std::vector<char>& done) {
  Error err = Error::ok;
  std::vector<PhysicalPage*> old(last - first);
  std::size_t attached = first;
  for (; attached < last; ++attached) {
    Page& page = *pages[attached];
    PhysicalPage& was = *page.phys;
    if (err = unmap_page(page); err != Error::ok) break;  // still on its old page
    clear_owner(was);
    idle_push(was);
    old[attached - first] = &was;
    if (err = attach_physical(page, *fresh[attached]); err != Error::ok) {
      idle_remove(was);
      if (map_physical(page, was) != Error::ok) {
        err = fail(Error::device_error,
                   "device %d: a page at %#zx lost its backing: moving it failed and mapping "
                   "it back failed too (%s)", ordinal_,
                   static_cast<std::size_t>(page_address(page)), device_.last_failure());
        idle_push(was);
        break;
      }
      set_owner(was, &page);
      break;
    }
    set_owner(*fresh[attached], &page);
    fresh[attached]->last_pool = page.segment->pool;
    done[attached] = 1;
  }
  if (attached == first) return err;
  // One access grant for the run; page by page if that fails, undoing pages without access.
  const std::uintptr_t va = page_address(*pages[first]);
  if (device_.set_access(ordinal_, va, (attached - first) * page_size_) == device::Status::ok) {
    for (std::size_t k = first; k < attached; ++k) pages[k]->accessible = true;
    return err;
  }
  for (std::size_t k = first; k < attached; ++k) {
    if (grant_access(*pages[k]) == Error::ok) continue;
    err = undo_swap(*pages[k], *fresh[k], *old[k - first]);
    done[k] = pages[k]->phys == fresh[k] ? 1 : 0;  // 1 only if even the undo failed
    if (err == Error::ok) err = fail(Error::device_error, "device %d: %s", ordinal_,
                                     "granting access to a moved page failed");
  }
  return err;
}

Error DeviceAllocator::undo_swap(Page& page, PhysicalPage& fresh, PhysicalPage& old) {
  // The page is mapped to `fresh` without access; `old` is idle and still holds the bytes.
  if (unmap_page(page) == Error::ok) {
    clear_owner(fresh);
    idle_remove(old);
    if (map_physical(page, old) == Error::ok) {
      set_owner(old, &page);
      return Error::ok;
    }
    idle_push(old);
  }
  return fail(Error::device_error,
              "device %d: a page at %#zx lost its backing: granting access after a move failed "
              "and restoring it failed too (%s)", ordinal_,
              static_cast<std::size_t>(page_address(page)), device_.last_failure());
}

Error DeviceAllocator::wait_for_stream(StreamHandle stream, bool* whole_device) {
  EventHandle event = 0;
  const bool waited = take_event(&event) == Error::ok &&
                      device_.event_record(ordinal_, event, stream) == device::Status::ok &&
                      device_.event_synchronize(event) == device::Status::ok;
  if (event != 0) give_event(event);
  if (waited) return Error::ok;
  // A destroyed stream or an event error: wait for the whole device instead.
  if (whole_device != nullptr) *whole_device = true;
  if (device_.synchronize(ordinal_) == device::Status::ok) return Error::ok;
  return fail(Error::device_error, "device %d: waiting for a stream failed: %s", ordinal_,
              device_.last_failure());
}

Error DeviceAllocator::promote() {
  std::lock_guard lock(lock_);
  return promote_locked();
}

Error DeviceAllocator::promote_locked() {
  if (!paged() || stats_.host_active_bytes.current == 0) return Error::ok;
  for (auto& [stream, pool] : pools_) {
    for (Segment* seg : pool->segments) {
      std::vector<Page*> pages;
      for (Page& page : seg->pages) {
        if (page.users > 0 && page.phys->host) pages.push_back(&page);
      }
      if (pages.empty()) continue;
      const Error err = move_pages(std::move(pages), false, pool->stream);
      // Out of device room: what moved stays moved, the rest stays on the host.
      if (err != Error::ok) return err == Error::out_of_memory ? Error::ok : err;
    }
  }
  return Error::ok;
}

void DeviceAllocator::maybe_promote() {
  if (!paged()) return;
  const std::size_t budget = reserve_cap() != 0 ? reserve_cap() : device_total_;
  const std::size_t device_owned =
      (physical_pages_.size() - host_pages_ - device_idle_.count) * page_size_;
  const auto host_owned = static_cast<std::size_t>(stats_.host_active_bytes.current);
  if (budget == 0 ||
      static_cast<double>(device_owned + host_owned) >
          settings_.promote * static_cast<double>(budget)) {
    return;
  }
  if (promote_locked() != Error::ok) log().warn("device {}: {}", ordinal_, last_error_message());
}

Error DeviceAllocator::residency(const void* ptr, std::size_t* device_bytes,
                                 std::size_t* host_bytes) const {
  std::lock_guard lock(lock_);
  AllocationSpan span;
  if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
  const auto [seg, addr, size] = span;
  *device_bytes = *host_bytes = 0;
  if (!seg->paged()) {
    (seg->pinned ? *host_bytes : *device_bytes) = size;
    return Error::ok;
  }
  const auto [first, last] = seg->pages_under(addr, size, page_size_);
  for (std::size_t i = first; i <= last; ++i) {
    const std::uintptr_t start = seg->base + i * page_size_;
    const std::size_t lo = std::max(start, addr);
    const std::size_t hi = std::min(start + page_size_, addr + size);
    (seg->pages[i].phys->host ? *host_bytes : *device_bytes) += hi - lo;
  }
  return Error::ok;
}

}  // namespace cudalloc
