#include "core/physical_pages.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "core/log.h"

namespace cudalloc {

using device::Location;

Error PhysicalPages::acquire(Claim claim, const Request& request, PhysicalPage** out) {
  const bool conflict = claim != Claim::fresh;
  const double slack =
      settings_.page_slack * static_cast<double>(ledger_.stats().reserved_bytes.current);
  // While device-ordered frees wait for a fence, new memory is not taken (cache_only).
  bool prefer_idle =
      !request.may_grow() || static_cast<double>(device_idle() * page_size_) > slack;
  // A page that keeps losing its physical page is part of a cycle in which more pages are in
  // use than there is memory for: each turn of the cycle costs a remap, so new memory ends it.
  // The growth is driven by remaps seen (a workload without cycles never grows this way).
  const bool grow_chronic = claim == Claim::chronic && chronic_may_grow();
  if (grow_chronic) prefer_idle = !request.may_grow();
  // Which idle page: a page mapped nowhere yet takes the one idle longest, whose old
  // addresses a repeating workload is least likely to want back soon after a short pause; a
  // page whose physical page was taken (a conflict, typical of a repeating workload's cycle)
  // takes the one idle shortest, whose old address comes round last in the cycle.
  auto take_from_idle = [&] {
    *out = take_device_idle(conflict);
    return Error::ok;
  };
  if (has_device_idle() && prefer_idle) return take_from_idle();
  Error err = request.may_grow() ? create(Location::device, out) : Error::out_of_memory;
  if (err == Error::out_of_memory && has_device_idle()) return take_from_idle();
  // No device room while spilling: the host tier.
  if (err == Error::out_of_memory && request.tier == Tier::host_pages) err = acquire_host(out);
  return err;
}

// The bound is on what the growth costs, the memory reserved over the peak in use, not on how
// many pages it has made: a count never falls, so the creations of a warm-up or of a phase
// long past used it up, and the cycle of a later steady state found none left and remapped
// at every step. Bounded this way, a repeating cycle grows until it stops remapping (its
// peak in use is fixed, its pages are few) and a workload whose shapes change every step
// keeps growing only while reserved memory stays within (1 + remap_growth) x its peak. The
// peak is the ledger's allocated_high, which a reset of the peak statistics leaves alone and
// empty_cache restarts (the next phase's bound follows that phase's peak).
bool PhysicalPages::chronic_may_grow() const {
  if (settings_.remap_growth <= 0) return false;
  const Stats& s = ledger_.stats();
  const double after = static_cast<double>(s.reserved_bytes.current) +
                       static_cast<double>(page_size_);
  return after <= (1.0 + settings_.remap_growth) * static_cast<double>(ledger_.allocated_high());
}

PhysicalPage* PhysicalPages::take_device_idle(bool newest) {
  PhysicalPage* listed = newest ? device_idle_.tail : device_idle_.head;
  if (!parked_.empty()) {
    const bool parked_first =
        listed == nullptr || (newest ? parked_.newest_epoch() > listed->idle_since
                                     : parked_.oldest_epoch() < listed->idle_since);
    if (parked_first) {
      std::uint64_t epoch = 0;
      Page* page = newest ? parked_.take_newest(&epoch) : parked_.take_oldest(&epoch);
      return &unpark(*page, epoch);
    }
  }
  take_idle(*listed);
  return listed;
}

PhysicalPage& PhysicalPages::unpark(Page& page, std::uint64_t epoch) {
  PhysicalPage& phys = *page.phys;
  page.users = 0;
  page.idle_since = epoch;
  clear_owner(phys);
  phys.last_pool = page.segment->pool;
  phys.idle_since = epoch;
  phys.idle_prev = phys.idle_next = nullptr;
  return phys;
}

bool PhysicalPages::unpark_owner(PhysicalPage& phys) {
  std::uint64_t epoch = 0;
  if (phys.owner == nullptr || phys.owner->users != 1 || !parked_.take_page(*phys.owner, &epoch)) {
    return false;
  }
  unpark(*phys.owner, epoch);
  return true;
}

void PhysicalPages::unpark_all() {
  if (parked_.empty()) return;
  std::vector<PhysicalPage*> idle;
  idle.reserve(device_idle_.count + parked_.count());
  while (device_idle_.head != nullptr) {
    idle.push_back(device_idle_.head);
    take_idle(*device_idle_.head);
  }
  parked_.take_all([&](Page& page, std::uint64_t epoch) { idle.push_back(&unpark(page, epoch)); });
  std::sort(idle.begin(), idle.end(), [](const PhysicalPage* a, const PhysicalPage* b) {
    return a->idle_since < b->idle_since;
  });
  // make_idle would give them new epochs: append keeping their own.
  for (PhysicalPage* phys : idle) append_idle(*phys);
}

Error PhysicalPages::acquire_host(PhysicalPage** out) {
  if (host_idle_.head != nullptr) {
    *out = host_idle_.head;
    take_idle(**out);
    return Error::ok;
  }
  return create(Location::host, out);
}

bool PhysicalPages::room_for(Location where) const {
  const Stats& s = ledger_.stats();
  if (where == Location::host) {
    return host_supported_ &&
           budget_.host_allows(static_cast<std::size_t>(s.host_reserved_bytes.current),
                               page_size_);
  }
  return budget_.device_allows(static_cast<std::size_t>(s.reserved_bytes.current), page_size_);
}

Error PhysicalPages::create(Location where, PhysicalPage** out) {
  const bool host = where == Location::host;
  if (!room_for(where)) return Error::out_of_memory;
  device::PhysicalHandle handle = 0;
  const auto status = device_.create_physical(ordinal_, page_size_, where, &handle);
  if (status == device::Status::out_of_memory) return Error::out_of_memory;
  if (host && (status == device::Status::not_supported ||
               status == device::Status::invalid_value)) {
    // The driver cannot place physical memory on the host: spill to pinned memory instead.
    log().info("device {}: host-located pages are not supported ({}); the host tier uses "
               "pinned host memory", ordinal_, device_.last_failure());
    host_supported_ = false;
    return Error::out_of_memory;
  }
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: creating a physical page failed: %s %s",
                ordinal_, device::status_name(status), device_.last_failure());
  }
  auto* phys = new PhysicalPage;
  phys->handle = handle;
  phys->host = host;
  phys->index = pages_.size();
  pages_.push_back(phys);
  ledger_.reserved(where, 0, page_size_, 0);
  if (host) {
    ++host_pages_;
    staging_.map_home(*phys);
  }
  *out = phys;
  return Error::ok;
}

Error PhysicalPages::share(PhysicalPage& phys, int* fd) {
  if (phys.chunk != nullptr) {
    return fail(Error::not_supported,
                "device %d: memory of a region (held in chunks, moved by pause and resume "
                "whole) cannot be shared with another process", ordinal_);
  }
  if (phys.shared_fd < 0) {
    if (phys.host) {
      return fail(Error::not_supported,
                  "device %d: host-tier pages cannot be shared with another process", ordinal_);
    }
    const auto status = device_.export_physical(phys.handle, &phys.shared_fd);
    if (status != device::Status::ok) {
      phys.shared_fd = -1;
      return fail(status == device::Status::not_supported ? Error::not_supported
                                                          : Error::device_error,
                  "device %d: exporting a physical page for another process failed: %s %s "
                  "(CUDALLOC_CONF=vmm:0 shares plain memory through legacy IPC handles)",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
  }
  // Not inherited by programs this process starts (the driver's descriptor may lack it).
  ::fcntl(phys.shared_fd, F_SETFD, FD_CLOEXEC);
  *fd = phys.shared_fd;
  return Error::ok;
}

void PhysicalPages::close_share(PhysicalPage& phys) {
  if (phys.shared_fd >= 0) ::close(phys.shared_fd);
  phys.shared_fd = -1;
}

bool PhysicalPages::release(PhysicalPage* phys) {
  if (device_.release_physical(phys->handle) != device::Status::ok) {
    log().warn("device {}: releasing a physical page failed: {}; kept for the next try",
               ordinal_, device_.last_failure());
    return false;
  }
  close_share(*phys);
  take_idle(*phys);
  if (phys->host) staging_.unmap_home(*phys);
  forget(phys);
  delete phys;
  return true;
}

void PhysicalPages::forget(PhysicalPage* phys) {
  PhysicalPage* moved = pages_.back();
  pages_[phys->index] = moved;
  moved->index = phys->index;
  pages_.pop_back();
  if (phys->host) --host_pages_;
  ledger_.released(phys->host ? Location::host : Location::device, 0, page_size_, 0);
}

PhysicalChunk* PhysicalPages::new_chunk(device::PhysicalHandle handle, bool host,
                                        std::size_t count) {
  auto* chunk = new PhysicalChunk;
  chunk->handle = handle;
  chunk->host = host;
  chunk->pages.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    auto* phys = new PhysicalPage;
    phys->handle = handle;
    phys->host = host;
    phys->chunk = chunk;
    phys->slot = static_cast<std::uint32_t>(k);
    phys->index = pages_.size();
    pages_.push_back(phys);
    // Counted page by page, as single pages are: a chunk is `count` pages of reserved memory.
    ledger_.reserved(host ? Location::host : Location::device, 0, page_size_, 0);
    if (host) ++host_pages_;
    chunk->pages.push_back(phys);
  }
  return chunk;
}

Error PhysicalPages::acquire_chunk(Location where, std::size_t count, PhysicalChunk** out) {
  const bool host = where == Location::host;
  for (auto it = idle_chunks_.begin(); it != idle_chunks_.end(); ++it) {
    if ((*it)->host != host || (*it)->count() != count || !(*it)->mapped_nowhere()) continue;
    *out = *it;
    idle_chunks_.erase(it);
    chunk_idle_pages_ -= count;
    (*out)->idle = 0;
    (*out)->vacated = 0;
    return Error::ok;
  }
  const Stats& s = ledger_.stats();
  const std::size_t bytes = count * page_size_;
  auto room = [&] {
    return host ? host_supported_ &&
                      budget_.host_allows(
                          static_cast<std::size_t>(s.host_reserved_bytes.current), bytes)
                : budget_.device_allows(static_cast<std::size_t>(s.reserved_bytes.current),
                                        bytes);
  };
  // Idle chunks of other sizes hold room no piece of this size can use: they go first.
  for (std::size_t i = 0; !room() && i < idle_chunks_.size();) {
    PhysicalChunk* other = idle_chunks_[i];
    if (other->host == host && other->mapped_nowhere() && release_chunk(other)) continue;
    ++i;
  }
  if (!room()) return Error::out_of_memory;
  device::PhysicalHandle handle = 0;
  if (device_.create_physical(ordinal_, bytes, where, &handle) != device::Status::ok) {
    return Error::out_of_memory;  // whatever the reason: single pages say it precisely
  }
  PhysicalChunk* chunk = new_chunk(handle, host, count);
  // Host chunks are written and read at their home (bulk_move.cpp); without one they are of
  // no use.
  if (host && !staging_.map_chunk_home(*chunk)) {
    chunk->idle = count;
    idle_chunks_.push_back(chunk);
    chunk_idle_pages_ += count;
    release_chunk(chunk);
    return Error::out_of_memory;
  }
  *out = chunk;
  return Error::ok;
}

void PhysicalPages::chunk_page_idle(PhysicalPage& phys) {
  PhysicalChunk& chunk = *phys.chunk;
  if (++chunk.idle < chunk.count()) return;
  idle_chunks_.push_back(&chunk);
  chunk_idle_pages_ += chunk.count();
}

bool PhysicalPages::release_chunk(PhysicalChunk* chunk) {
  if (device_.release_physical(chunk->handle) != device::Status::ok) {
    log().warn("device {}: releasing {} pages of physical memory failed: {}; kept for the "
               "next try", ordinal_, chunk->count(), device_.last_failure());
    return false;
  }
  staging_.unmap_chunk_home(*chunk);
  std::erase(idle_chunks_, chunk);
  chunk_idle_pages_ -= chunk->count();
  for (PhysicalPage* phys : chunk->pages) {
    forget(phys);
    delete phys;
  }
  delete chunk;
  return true;
}

std::size_t PhysicalPages::idle_chunk_pages(Location where) const {
  std::size_t pages = 0;
  for (const PhysicalChunk* chunk : idle_chunks_) {
    if (chunk->host == (where == Location::host)) pages += chunk->count();
  }
  return pages;
}

std::size_t PhysicalPages::release_idle() {
  std::size_t released = 0;
  for (PhysicalPage* phys = device_idle_.head; phys != nullptr;) {
    PhysicalPage* next = phys->idle_next;
    if (phys->mappings.empty() && release(phys)) released += page_size_;
    phys = next;
  }
  for (PhysicalPage* phys = host_idle_.head; phys != nullptr;) {
    PhysicalPage* next = phys->idle_next;
    if (phys->mappings.empty()) release(phys);  // host memory: not counted
    phys = next;
  }
  const std::vector<PhysicalChunk*> chunks = idle_chunks_;
  for (PhysicalChunk* chunk : chunks) {
    const std::size_t bytes = chunk->host ? 0 : chunk->count() * page_size_;
    if (chunk->mapped_nowhere() && release_chunk(chunk)) released += bytes;
  }
  return released;
}

void PhysicalPages::probe_host() {
  if (!host_supported_ || host_pages_ != 0) return;
  PhysicalPage* probe = nullptr;
  if (create(Location::host, &probe) == Error::ok) make_idle(*probe);
}

void PhysicalPages::drop_all() {
  // Chunks are collected in the same pass that deletes single pages: pages_ holds deleted
  // pointers once the pass is over, so it is not walked again.
  std::vector<PhysicalChunk*> chunks;
  for (PhysicalPage* phys : pages_) {
    if (PhysicalChunk* chunk = phys->chunk; chunk != nullptr) {
      if (phys->slot == 0) {  // the chunk's first page stands for it
        staging_.unmap_chunk_home(*chunk);
        device_.release_physical(chunk->handle);
        chunks.push_back(chunk);
      }
      continue;  // deleted with the chunk below
    }
    if (phys->home != 0) device_.unmap(phys->home, page_size_);
    device_.release_physical(phys->handle);
    close_share(*phys);
    delete phys;
  }
  for (PhysicalChunk* chunk : chunks) {
    for (PhysicalPage* phys : chunk->pages) delete phys;
    delete chunk;
  }
  pages_.clear();
  idle_chunks_.clear();
  chunk_idle_pages_ = 0;
  device_idle_ = IdleList{};
  host_idle_ = IdleList{};
  host_pages_ = 0;
}

}  // namespace cudalloc
