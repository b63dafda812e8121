#include "core/migrator.h"

#include <algorithm>

#include "core/log.h"

namespace cudalloc {

using device::Location;

namespace {

bool on(const PhysicalPage& phys, Location where) { return phys.host == (where == Location::host); }

}  // namespace

std::size_t Migrator::run_end(const std::vector<Page*>& pages, std::size_t first) {
  std::size_t end = first + 1;
  while (end < pages.size() && pages[end]->segment == pages[first]->segment &&
         pages[end] - pages[first] == static_cast<std::ptrdiff_t>(end - first)) {
    ++end;
  }
  return end;
}

Error Migrator::move(const AllocationSpan& span, Location to, StreamHandle stream) {
  const Segment& seg = *span.segment;
  if (!seg.paged()) {
    return fail(Error::not_supported,
                "device %d: %#zx cannot move: only allocations in paged segments (vmm) can, "
                "and this one is in %s", ordinal_, static_cast<std::size_t>(span.addr),
                seg.pinned_host() ? "pinned host memory" : "a plain segment");
  }
  const auto [first, last] = seg.pages_under(span.addr, span.size, mapper_.page_size());
  std::vector<Page*> pages;
  for (std::size_t i = first; i <= last; ++i) {
    Page& page = span.segment->pages[i];
    // Another process maps the physical page itself: a move would leave it with the old
    // memory while this one sees the new.
    if (page.phys != nullptr && page.phys->shared_fd >= 0 && !on(*page.phys, to)) {
      return fail(Error::not_supported,
                  "device %d: %#zx cannot move: its memory is shared with another process "
                  "(CUDA IPC)", ordinal_, static_cast<std::size_t>(span.addr));
    }
    pages.push_back(&page);
  }
  return move_pages(std::move(pages), to, stream);
}

Error Migrator::move_pages(std::vector<Page*> pages, Location to, StreamHandle stream,
                           Extent extent, std::vector<PhysicalPage*>* vacated) {
  std::erase_if(pages, [&](const Page* p) { return on(*p->phys, to); });
  if (pages.empty()) return Error::ok;
  // A chunk's pages map only together (pool_types.h): they move in bulk moves only.
  if (std::any_of(pages.begin(), pages.end(), [](const Page* p) { return p->phys->chunk; })) {
    return fail(Error::not_supported,
                "device %d: memory at %#zx cannot move alone: it is in a region's memory, "
                "which moves with pause and resume", ordinal_,
                static_cast<std::size_t>(mapper_.address_of(*pages.front())));
  }
  const StreamHandle own = pages.front()->segment->pool->stream;
  if (own != stream) sync_.order_after(own, stream);
  for (std::size_t at = 0; at < pages.size(); at += Staging::kStagingPages) {
    const std::size_t end = std::min(pages.size(), at + Staging::kStagingPages);
    const std::vector<Page*> batch(pages.begin() + static_cast<std::ptrdiff_t>(at),
                                   pages.begin() + static_cast<std::ptrdiff_t>(end));
    if (const Error err = move_batch(batch, to, stream, extent, vacated); err != Error::ok) {
      return err;
    }
  }
  return Error::ok;
}

Error Migrator::acquire_targets(std::size_t count, Location to, Extent extent,
                                std::vector<PhysicalPage*>& fresh) {
  // Host pages within host_limit, or device pages within the cap.
  for (std::size_t k = 0; k < count; ++k) {
    PhysicalPage* phys = nullptr;
    const Error err = to == Location::host
                          ? physical_.acquire_host(&phys)
                          : physical_.acquire(Claim::fresh, Request{}, &phys);
    if (err == Error::ok) {
      fresh.push_back(phys);
      continue;
    }
    if (err == Error::out_of_memory && extent == Extent::what_fits && !fresh.empty()) {
      return Error::ok;  // the caller moves as many pages as it got
    }
    for (PhysicalPage* p : fresh) physical_.make_idle(*p);
    fresh.clear();
    if (err != Error::out_of_memory) return err;
    if (to == Location::host && !physical_.host_supported()) {
      return fail(Error::not_supported,
                  "device %d: the driver cannot create host-located pages to move to", ordinal_);
    }
    return fail(Error::out_of_memory, "device %d: no %s memory to move %zu pages to (%s)",
                ordinal_, to == Location::host ? "host" : "device", count,
                to == Location::host ? "host_limit or the host is full"
                                     : "the device budget is full");
  }
  return Error::ok;
}

Error Migrator::move_batch(std::vector<Page*> pages, Location to, StreamHandle stream,
                          Extent extent, std::vector<PhysicalPage*>* vacated) {
  // 1. New backing (with what_fits perhaps for the first pages only: the rest stay).
  std::vector<PhysicalPage*> fresh;
  if (const Error err = acquire_targets(pages.size(), to, extent, fresh); err != Error::ok) {
    return err;
  }
  const bool short_of_room = fresh.size() < pages.size();
  pages.resize(fresh.size());
  // 2-3. Copy into the new pages, then wait for the copies and everything before them.
  std::vector<char> done(pages.size(), 0);
  std::size_t staged = 0;
  std::vector<std::uintptr_t> targets(pages.size());
  Error err = prepare_targets(fresh, stream, targets, &staged);
  if (err == Error::ok) err = copy_pages(pages, targets, stream);
  if (err == Error::ok) err = sync_.wait_for(stream);
  // 4. Swap the backing, run by run.
  std::vector<PhysicalPage*> before(pages.size());
  for (std::size_t k = 0; k < pages.size(); ++k) before[k] = pages[k]->phys;
  for (std::size_t k = 0; err == Error::ok && k < pages.size();) {
    const std::size_t end = run_end(pages, k);
    err = swap_run(pages, fresh, k, end, done);
    k = end;
  }
  staging_.unstage(staged);
  std::size_t moved = 0;
  for (std::size_t k = 0; k < fresh.size(); ++k) {
    if (done[k]) {
      ++moved;
      if (vacated != nullptr) vacated->push_back(before[k]);
    } else {
      physical_.make_idle(*fresh[k]);
    }
  }
  ledger_.pages_moved(to, moved);
  if (err == Error::ok && short_of_room) {
    return fail(Error::out_of_memory, "device %d: no room for every page", ordinal_);
  }
  return err;
}

Error Migrator::prepare_targets(const std::vector<PhysicalPage*>& fresh, StreamHandle stream,
                                std::vector<std::uintptr_t>& targets, std::size_t* staged) {
  // A new page may have been used by another stream until recently (an idle page): the copy
  // into it comes after that work.
  order_after_last_users(fresh, stream);
  // Where each is written: a host page's home mapping, a mapping an idle device page keeps at
  // an address nobody uses, or else a staging slot.
  std::vector<PhysicalPage*> to_stage;
  std::vector<std::size_t> staged_at;
  for (std::size_t k = 0; k < fresh.size(); ++k) {
    targets[k] = fresh[k]->home;
    for (const Page* m : fresh[k]->mappings) {
      if (targets[k] == 0 && m->accessible) targets[k] = mapper_.address_of(*m);
    }
    if (targets[k] != 0) continue;
    to_stage.push_back(fresh[k]);
    staged_at.push_back(k);
  }
  if (to_stage.empty()) return Error::ok;
  if (const Error err = staging_.stage(to_stage, staged); err != Error::ok) return err;
  for (std::size_t i = 0; i < staged_at.size(); ++i) targets[staged_at[i]] = staging_.slot(i);
  return Error::ok;
}

Error Migrator::copy_pages(const std::vector<Page*>& pages,
                           const std::vector<std::uintptr_t>& targets, StreamHandle stream) {
  std::vector<std::uintptr_t> sources(pages.size());
  for (std::size_t k = 0; k < pages.size(); ++k) sources[k] = mapper_.address_of(*pages[k]);
  return copy_runs(targets, sources, stream);  // one copy per run consecutive on both sides
}

Error Migrator::swap_run(const std::vector<Page*>& pages, const std::vector<PhysicalPage*>& fresh,
                         std::size_t first, std::size_t last, std::vector<char>& done) {
  Error err = Error::ok;
  std::vector<PhysicalPage*> old(last - first);
  std::size_t attached = first;
  for (; attached < last; ++attached) {
    Page& page = *pages[attached];
    PhysicalPage& was = *page.phys;
    if (err = mapper_.unmap(page); err != Error::ok) break;  // still on its old page
    physical_.clear_owner(was);
    physical_.make_idle(was);
    old[attached - first] = &was;
    if (err = mapper_.attach(page, *fresh[attached]); err != Error::ok) {
      physical_.take_idle(was);
      if (mapper_.map(page, was) != Error::ok) {
        err = fail(Error::device_error,
                   "device %d: a page at %#zx lost its backing: moving it failed and mapping "
                   "it back failed too (%s)", ordinal_,
                   static_cast<std::size_t>(mapper_.address_of(page)), device_.last_failure());
        physical_.make_idle(was);
        break;
      }
      physical_.set_owner(was, &page);
      break;
    }
    physical_.set_owner(*fresh[attached], &page);
    fresh[attached]->last_pool = page.segment->pool;
    done[attached] = 1;
  }
  if (attached == first) return err;
  // One access grant for the run; page by page if that fails, undoing pages without access.
  const std::uintptr_t va = mapper_.address_of(*pages[first]);
  if (device_.set_access(ordinal_, va, (attached - first) * mapper_.page_size()) ==
      device::Status::ok) {
    for (std::size_t k = first; k < attached; ++k) pages[k]->accessible = true;
    return err;
  }
  for (std::size_t k = first; k < attached; ++k) {
    if (mapper_.grant(*pages[k]) == Error::ok) continue;
    err = undo_swap(*pages[k], *fresh[k], *old[k - first]);
    done[k] = pages[k]->phys == fresh[k] ? 1 : 0;  // 1 only if even the undo failed
    if (err == Error::ok) err = fail(Error::device_error, "device %d: %s", ordinal_,
                                     "granting access to a moved page failed");
  }
  return err;
}

Error Migrator::undo_swap(Page& page, PhysicalPage& fresh, PhysicalPage& old) {
  // The page is mapped to `fresh` without access; `old` is idle and still holds the bytes.
  if (mapper_.unmap(page) == Error::ok) {
    physical_.clear_owner(fresh);
    physical_.take_idle(old);
    if (mapper_.map(page, old) == Error::ok) {
      physical_.set_owner(old, &page);
      return Error::ok;
    }
    physical_.make_idle(old);
  }
  return fail(Error::device_error,
              "device %d: a page at %#zx lost its backing: granting access after a move failed "
              "and restoring it failed too (%s)", ordinal_,
              static_cast<std::size_t>(mapper_.address_of(page)), device_.last_failure());
}

Error Migrator::promote() {
  if (ledger_.stats().host_active_bytes.current == 0) return Error::ok;
  Error result = Error::ok;
  pools_.for_each([&](StreamPool& pool) {
    for (Segment* seg : pool.segments) {
      // A paused region's pages stay where pause put them.
      if (result != Error::ok || !seg->paged() || seg->mapped_pages == 0 || seg->paused) continue;
      std::vector<Page*> pages;
      for (Page& page : seg->pages) {
        // A chunk's pages (a region's, after a failed pause) move with the region.
        if (page.users > 0 && page.phys->host && page.phys->chunk == nullptr) {
          pages.push_back(&page);
        }
      }
      if (pages.empty()) continue;
      const Error err =
          move_pages(std::move(pages), Location::device, pool.stream, Extent::what_fits);
      // Out of device room: what moved stays moved, the rest stays on the host.
      if (err != Error::ok) result = err == Error::out_of_memory ? Error::out_of_memory : err;
    }
  });
  return result == Error::out_of_memory ? Error::ok : result;
}

void Migrator::maybe_promote() {
  const std::size_t budget = budget_.device_budget();
  const std::size_t device_owned = physical_.device_owned() * mapper_.page_size();
  const auto host_owned = static_cast<std::size_t>(ledger_.stats().host_active_bytes.current);
  if (budget == 0 ||
      static_cast<double>(device_owned + host_owned) >
          settings_.promote * static_cast<double>(budget)) {
    return;
  }
  if (promote() != Error::ok) log().warn("device {}: {}", ordinal_, last_error_message());
}

void Migrator::residency(const AllocationSpan& span, std::size_t* device_bytes,
                         std::size_t* host_bytes) const {
  const Segment& seg = *span.segment;
  *device_bytes = *host_bytes = 0;
  if (!seg.paged()) {
    (seg.pinned_host() ? *host_bytes : *device_bytes) = span.size;
    return;
  }
  const std::size_t page_size = mapper_.page_size();
  const auto [first, last] = seg.pages_under(span.addr, span.size, page_size);
  for (std::size_t i = first; i <= last; ++i) {
    const std::uintptr_t start = seg.base + i * page_size;
    const std::size_t lo = std::max(start, span.addr);
    const std::size_t hi = std::min(start + page_size, span.addr + span.size);
    const PhysicalPage* phys = seg.pages[i].phys;
    if (phys == nullptr) continue;  // a paused region's dropped page: no memory behind it
    (phys->host ? *host_bytes : *device_bytes) += hi - lo;
  }
}

}  // namespace cudalloc
