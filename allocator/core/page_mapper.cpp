#include "core/page_mapper.h"

#include <algorithm>

#include "core/captures.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {
namespace {

// Virtual range reserved per paged segment when the device's size is unknown.
constexpr std::size_t kDefaultRange = 64 * GiB;
// The first pool to reserve a range (the main stream, typically) gets device-sized ranges;
// later pools get this share of the device (or the request's size, if larger): one
// device-sized range per stream would run out of address space (a device-sized reserve
// succeeds about 930 times on a 141 GB device) and cost host memory for page records.
constexpr std::size_t kLaterRangeShare = 16;

}  // namespace

Error PageMapper::reserve_range(const StreamPool& pool, std::size_t size, std::uintptr_t* va,
                                std::size_t* bytes) {
  const std::size_t device = budget_.device_total() != 0 ? budget_.device_total() : kDefaultRange;
  // One range serves every request of the stream; a pool gets another only when its ranges
  // have no hole big enough for a request.
  if (wide_pool_ == nullptr) wide_pool_ = &pool;
  const std::size_t usual =
      wide_pool_ == &pool ? device : std::max(device / kLaterRangeShare, page_size_);
  const std::size_t range = round_up(std::max(size, usual), page_size_);
  auto status = device_.reserve(ordinal_, range, va);
  *bytes = range;
  if (status == device::Status::out_of_memory && range > round_up(size, page_size_)) {
    // Address space is short: the smallest range that holds the request.
    *bytes = round_up(size, page_size_);
    status = device_.reserve(ordinal_, *bytes, va);
  }
  if (status != device::Status::ok) {
    const Error err =
        status == device::Status::out_of_memory ? Error::out_of_memory : Error::device_error;
    return fail(err, "device %d: reserving %s of address space failed: %s %s", ordinal_,
                format_bytes(*bytes).c_str(), device::status_name(status),
                device_.last_failure());
  }
  return Error::ok;
}

void PageMapper::init_pages(Segment& seg) const {
  seg.kind = Segment::Kind::paged;
  seg.pages.resize(seg.size / page_size_);  // zero records: pages get their segment in use()
}

std::uintptr_t PageMapper::address_of(const Page& page) const {
  const Segment& seg = *page.segment;
  return seg.base + static_cast<std::size_t>(&page - seg.pages.data()) * page_size_;
}

void PageMapper::undo_use(Segment& seg, std::size_t first, std::size_t end,
                          std::size_t created) {
  for (std::size_t j = first; j < end; ++j) drop_user(seg.pages[j]);
  // Pages created by this call are mapped only at pages it claimed, and no work has seen
  // those mappings (the allocation never reached its caller): unmap without waiting.
  for (std::size_t i = physical_.count(); i-- > created;) {
    PhysicalPage* phys = physical_.all()[i];
    if (phys->owner != nullptr) continue;
    bool unmapped = true;
    while (unmapped && !phys->mappings.empty()) {
      Page& page = *phys->mappings.back();
      const std::uintptr_t va = address_of(page);
      unmapped = device_.unmap(va, page_size_) == device::Status::ok;
      if (!unmapped) break;
      phys->mappings.pop_back();
      if (phys->host) --page.segment->host_mapped;
      page.phys = nullptr;
      --page.segment->mapped_pages;
      page.accessible = false;
      ledger_.page_unmapped(va, page_size_, page.segment->pool->stream);
    }
    if (unmapped) physical_.release(phys);
  }
}

Error PageMapper::use_parked(Segment& seg, std::size_t first, std::size_t last,
                             const Request& request) {
  // Parked pages keep their one user, which becomes the block's. Pages between runs are
  // claimed as usual; a claim may unpark pages of a later run (acquire), which are then
  // claimed as usual too. On failure every page of [first, i) has one user of this block to
  // drop, parked or not.
  const std::size_t created = physical_.count();
  bool claimed = false;
  std::size_t i = first;
  while (i <= last) {
    std::size_t lo = last + 1, hi = last;
    const bool parked = physical_.parked().take_first_in(seg, i, last, &lo, &hi);
    for (; i < lo; ++i) {
      if (const Error err = use_page(seg, i, request, &claimed); err != Error::ok) {
        if (parked) drop_users(seg, lo, hi);
        undo_use(seg, first, i, created);
        return err;
      }
    }
    if (!parked) break;
    i = hi + 1;
  }
  return claimed ? grant_claimed(seg, first, last, created) : Error::ok;
}

Error PageMapper::grant_claimed(Segment& seg, std::size_t first, std::size_t last,
                                std::size_t created) {
  Error err = Error::ok;
  for (std::size_t i = first; i <= last && err == Error::ok;) {
    if (seg.pages[i].accessible) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end <= last && !seg.pages[end].accessible) ++end;
    const std::uintptr_t va = seg.base + i * page_size_;
    const auto status = device_.set_access(ordinal_, va, (end - i) * page_size_);
    if (status == device::Status::ok) {
      for (std::size_t k = i; k < end; ++k) seg.pages[k].accessible = true;
    } else {
      err = fail(Error::device_error,
                 "device %d: granting access to %zu pages at %#zx failed: %s %s", ordinal_,
                 end - i, static_cast<std::size_t>(va), device::status_name(status),
                 device_.last_failure());
    }
    i = end;
  }
  // Pages left without access keep their mapping (a later claim grants it, empty_cache
  // removes it); undo_use unmaps the ones this call created.
  if (err != Error::ok) undo_use(seg, first, last + 1, created);
  return err;
}

void PageMapper::drop_users(Segment& seg, std::size_t first, std::size_t last) {
  for (std::size_t i = first; i <= last; ++i) drop_user(seg.pages[i]);
}

Error PageMapper::claim(Page& page, const Request& request) {
  PhysicalPage* phys = page.phys;
  // The page's own physical page may be owned by a parked page: then it is idle in truth.
  const bool owner_parked = phys != nullptr && phys->owner != &page && physical_.owner_parked(*phys);
  // A chunk's page (a held segment's, left mapped where releasing the hold failed) is not
  // taken alone: its mapping goes (the whole chunk's) and the page gets memory of its own.
  const bool idle_here =
      phys != nullptr && phys->chunk == nullptr && (phys->owner == nullptr || owner_parked);
  // cache_only: only a page whose idle physical page is still mapped here, with access, serves
  // (no driver call); anything else is a miss the caller answers with a fence.
  if (!request.may_grow() &&
      !(idle_here && page.accessible && (!phys->host || request.spilling()))) {
    return Error::out_of_memory;
  }
  if (idle_here && phys->host && !request.spilling()) {
    if (const Error err = replace_host_page(page, request, &phys); err != Error::ok) return err;
  } else if (idle_here) {
    if (!page.accessible) {  // a mapping whose access grant failed earlier
      if (const Error err = grant(page); err != Error::ok) return err;
    }
    if (!owner_parked) {
      physical_.take_idle(*phys);
    } else if (!physical_.unpark_owner(*phys)) {
      // owner_parked() and unpark_owner() test the same conditions and nothing between them
      // changes those; were it otherwise, phys would be owned and not listed: refuse.
      return Error::out_of_memory;
    }
  } else {
    // Unmapped, or mapped to a physical page that now serves another page.
    Claim why = Claim::fresh;
    if (phys != nullptr) {
      if (const Error err = unmap(page); err != Error::ok) return err;
      if (page.conflicts < 255) ++page.conflicts;
      why = page.conflicts >= PhysicalPages::kChronicConflicts ? Claim::chronic
                                                                : Claim::conflict;
    }
    if (const Error err = physical_.acquire(why, request, &phys); err != Error::ok) return err;
    // Access is granted by the caller, for every page it mapped at once (grant_claimed).
    if (const Error err = attach(page, *phys); err != Error::ok) {
      physical_.make_idle(*phys);
      return err;
    }
  }
  adopt(page, *phys);
  return Error::ok;
}

void PageMapper::order_reuse(const StreamPool& last, const StreamPool& next) {
  sync_.order_after(last.stream, next.stream);
}

Error PageMapper::replace_host_page(Page& page, const Request& request, PhysicalPage** out) {
  // Device memory first: when there is none, the host page stays mapped here for the spill
  // that follows, which then reuses it without a driver call (a workload that spills the
  // same addresses every step maps nothing in the steady state).
  PhysicalPage* phys = nullptr;
  if (const Error err = physical_.acquire(Claim::fresh, request, &phys); err != Error::ok) {
    return err;
  }
  Error err = unmap(page);  // the host page stays idle, for the next spill
  if (err == Error::ok) err = attach(page, *phys);  // granted by the caller
  if (err != Error::ok) {
    physical_.make_idle(*phys);
    return err;
  }
  *out = phys;
  return Error::ok;
}

Error PageMapper::map(Page& page, PhysicalPage& phys) {
  if (const Error err = attach(page, phys); err != Error::ok) return err;
  const Error err = grant(page);
  // Without access the mapping is useless: undo it (if that fails too, it stays recorded,
  // without access, for a later claim to grant or empty_cache to remove).
  if (err != Error::ok) unmap(page);
  return err;
}

Error PageMapper::attach(Page& page, PhysicalPage& phys) {
  if (phys.chunk != nullptr) return attach_chunk(page, phys);
  const std::uintptr_t va = address_of(page);
  const auto status = device_.map(va, page_size_, phys.handle, 0);
  if (status != device::Status::ok) {
    if (status == device::Status::out_of_memory) return Error::out_of_memory;
    return fail(Error::device_error, "device %d: mapping a page at %#zx failed: %s %s", ordinal_,
                static_cast<std::size_t>(va), device::status_name(status), device_.last_failure());
  }
  page.phys = &phys;
  page.accessible = false;
  ++page.segment->mapped_pages;
  if (phys.host) ++page.segment->host_mapped;
  phys.mappings.push_back(&page);
  ledger_.page_mapped(va, page_size_, page.segment->pool->stream);
  if (phys.mappings.size() > 1) cover_other_mappings(phys, page);
  return Error::ok;
}

void PageMapper::cover_other_mappings(const PhysicalPage& phys, const Page& page) {
  for (const Page* other : phys.mappings) {
    if (other != &page && other->users == 0) {
      checkpoints_.cover(other->segment->pool->stream, other->idle_since, physical_.epoch());
    }
  }
}

Error PageMapper::chunk_span(Page& page, PhysicalChunk& chunk, std::size_t slot,
                             std::size_t* first) const {
  const Segment& seg = *page.segment;
  const auto index = static_cast<std::size_t>(&page - seg.pages.data());
  if (index < slot || index - slot + chunk.count() > seg.pages.size()) {
    return fail(Error::device_error, "device %d: a chunk of %zu pages does not fit the "
                "segment at %#zx at page %zu", ordinal_, chunk.count(),
                static_cast<std::size_t>(seg.base), index);
  }
  *first = index - slot;
  return Error::ok;
}

Error PageMapper::attach_chunk(Page& page, PhysicalPage& phys) {
  // The chunk maps whole: page takes slot phys.slot, its neighbours the others.
  PhysicalChunk& chunk = *phys.chunk;
  Segment& seg = *page.segment;
  std::size_t first = 0;
  if (const Error err = chunk_span(page, chunk, phys.slot, &first); err != Error::ok) return err;
  for (std::size_t j = 0; j < chunk.count(); ++j) {
    if (seg.pages[first + j].phys != nullptr || !chunk.pages[j]->mappings.empty()) {
      return fail(Error::device_error, "device %d: mapping a chunk at %#zx: its pages or "
                  "memory are mapped already", ordinal_,
                  static_cast<std::size_t>(seg.base + first * page_size_));
    }
  }
  const std::uintptr_t va = seg.base + first * page_size_;
  const auto status = device_.map(va, chunk.count() * page_size_, chunk.handle, 0);
  if (status != device::Status::ok) {
    if (status == device::Status::out_of_memory) return Error::out_of_memory;
    return fail(Error::device_error, "device %d: mapping %zu pages at %#zx failed: %s %s",
                ordinal_, chunk.count(), static_cast<std::size_t>(va),
                device::status_name(status), device_.last_failure());
  }
  for (std::size_t j = 0; j < chunk.count(); ++j) {
    Page& at = seg.pages[first + j];
    at.segment = &seg;
    at.phys = chunk.pages[j];
    at.accessible = false;
    ++seg.mapped_pages;
    if (chunk.host) ++seg.host_mapped;
    chunk.pages[j]->mappings.push_back(&at);
    ledger_.page_mapped(va + j * page_size_, page_size_, seg.pool->stream);
  }
  return Error::ok;
}

Error PageMapper::grant(Page& page) {
  if (page.phys != nullptr && page.phys->chunk != nullptr) {
    // A grant covers whole mappings: the chunk's.
    PhysicalChunk& chunk = *page.phys->chunk;
    std::size_t first = 0;
    if (const Error err = mapped_chunk_span(page, &first); err != Error::ok) return err;
    Segment& seg = *page.segment;
    const std::uintptr_t va = seg.base + first * page_size_;
    if (device_.set_access(ordinal_, va, chunk.count() * page_size_) != device::Status::ok) {
      return fail(Error::device_error, "device %d: granting access to %zu pages at %#zx "
                  "failed: %s", ordinal_, chunk.count(), static_cast<std::size_t>(va),
                  device_.last_failure());
    }
    for (std::size_t j = 0; j < chunk.count(); ++j) seg.pages[first + j].accessible = true;
    return Error::ok;
  }
  const std::uintptr_t va = address_of(page);
  const auto status = device_.set_access(ordinal_, va, page_size_);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: granting access to a page at %#zx failed: %s %s",
                ordinal_, static_cast<std::size_t>(va), device::status_name(status),
                device_.last_failure());
  }
  page.accessible = true;
  return Error::ok;
}

Error PageMapper::unmap(Page& page) {
  std::uint64_t epoch = page.idle_since;
  std::size_t first = 0;
  if (page.phys->chunk != nullptr && mapped_chunk_span(page, &first) == Error::ok) {
    // The chunk's mapping goes whole: after the last use of any page it covers.
    for (std::size_t j = 0; j < page.phys->chunk->count(); ++j) {
      epoch = std::max(epoch, page.segment->pages[first + j].idle_since);
    }
  }
  if (!wait_until_settled(*page.segment->pool, epoch)) {
    return fail(Error::device_error, "device %d: unmapping a page at %#zx failed: waiting for "
                "its stream failed %s", ordinal_, static_cast<std::size_t>(address_of(page)),
                device_.last_failure());
  }
  return unmap_now(page);
}

Error PageMapper::unmap_now(Page& page) {
  if (page.phys->chunk != nullptr) return unmap_chunk_now(page);
  const std::uintptr_t va = address_of(page);
  const auto status = device_.unmap(va, page_size_);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: unmapping a page at %#zx failed: %s %s",
                ordinal_, static_cast<std::size_t>(va), device::status_name(status),
                device_.last_failure());
  }
  note_unmapped(page);
  return Error::ok;
}

Error PageMapper::unmap_chunk_now(Page& page) {
  // A chunk unmaps whole: every page it is mapped at loses its mapping.
  PhysicalChunk& chunk = *page.phys->chunk;
  std::size_t first = 0;
  if (const Error err = mapped_chunk_span(page, &first); err != Error::ok) return err;
  Segment& seg = *page.segment;
  const std::uintptr_t va = seg.base + first * page_size_;
  const auto status = device_.unmap(va, chunk.count() * page_size_);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: unmapping %zu pages at %#zx failed: %s %s",
                ordinal_, chunk.count(), static_cast<std::size_t>(va),
                device::status_name(status), device_.last_failure());
  }
  for (std::size_t j = 0; j < chunk.count(); ++j) note_unmapped(seg.pages[first + j]);
  return Error::ok;
}

Error PageMapper::unmap_run_now(Segment& seg, std::size_t first, std::size_t count) {
  // One call for the run when the driver takes the range (it spans whole mappings).
  if (count > 1) {
    const auto status = device_.unmap(seg.base + first * page_size_, count * page_size_);
    if (status == device::Status::ok) {
      for (std::size_t i = first; i < first + count; ++i) note_unmapped(seg.pages[i]);
      return Error::ok;
    }
    log().debug("device {}: unmapping {} pages in one call failed ({} {}); page by page",
                ordinal_, count, device::status_name(status), device_.last_failure());
  }
  for (std::size_t i = first; i < first + count; ++i) {
    if (seg.pages[i].phys == nullptr) continue;  // a chunk unmapped with an earlier page
    if (const Error err = unmap_now(seg.pages[i]); err != Error::ok) return err;
  }
  return Error::ok;
}

void PageMapper::note_unmapped(Page& page) {
  StreamPool& pool = *page.segment->pool;
  const std::uintptr_t va = address_of(page);
  std::erase(page.phys->mappings, &page);
  if (page.phys->host) --page.segment->host_mapped;
  page.phys = nullptr;
  --page.segment->mapped_pages;
  page.accessible = false;
  ledger_.page_unmapped(va, page_size_, pool.stream);
}

void PageMapper::end_hold(Page& page, PhysicalPage& phys) {
  page.users = 0;
  page.idle_since = physical_.tick();
  physical_.clear_owner(phys);
  phys.last_pool = page.segment->pool;
  physical_.make_idle(phys);
}

Error PageMapper::evict_chunk(Page& page) {
  PhysicalChunk& chunk = *page.phys->chunk;
  std::size_t first = 0;
  if (const Error err = mapped_chunk_span(page, &first); err != Error::ok) return err;
  if (const Error err = unmap_now(page); err != Error::ok) return err;
  Segment& seg = *page.segment;
  for (std::size_t j = 0; j < chunk.count(); ++j) {
    ledger_.page_dropped(page_size_);
    end_hold(seg.pages[first + j], *chunk.pages[j]);
  }
  if (!physical_.release_chunk(&chunk)) {
    log().warn("device {}: a paused chunk's memory stays cached: {}", ordinal_,
               device_.last_failure());
  }
  return Error::ok;
}

Error PageMapper::evict(Page& page) {
  if (page.phys->chunk != nullptr) return evict_chunk(page);
  PhysicalPage& phys = *page.phys;
  if (const Error err = unmap_now(page); err != Error::ok) return err;
  ledger_.page_dropped(page_size_);
  end_hold(page, phys);
  // The page is dropped either way; a physical page the driver keeps stays idle (cached).
  if (!release_vacated(phys)) {
    log().warn("device {}: a paused page's memory stays cached: {}", ordinal_,
               device_.last_failure());
  }
  return Error::ok;
}

void PageMapper::unmap_unused(Segment& seg, std::size_t first, std::size_t count) {
  for (std::size_t i = first; i < first + count && i < seg.pages.size(); ++i) {
    Page& page = seg.pages[i];
    if (page.phys != nullptr && page.users == 0 && unmap_now(page) != Error::ok) {
      log().warn("device {}: {}", ordinal_, last_error_message());
    }
  }
}

bool PageMapper::release_hold(Segment& seg) {
  // Every hold ends before the unmaps, which take a chunk's pages together.
  for (Page& page : seg.pages) {
    if (page.phys != nullptr && page.users != 0) end_hold(page, *page.phys);
  }
  bool unmapped = true;
  std::vector<PhysicalChunk*> device_chunks;
  for (std::size_t i = 0; i < seg.pages.size(); ++i) {
    Page& page = seg.pages[i];
    if (page.phys == nullptr) continue;
    PhysicalChunk* chunk = page.phys->chunk;
    if (unmap_now(page) != Error::ok) {
      unmapped = false;
      i = last_sharing_mapping(seg, i);
      continue;
    }
    if (chunk != nullptr && !chunk->host) device_chunks.push_back(chunk);
  }
  // Device chunks serve bulk moves only: back to the driver (host chunks stay cached, for the
  // next pause).
  for (PhysicalChunk* chunk : device_chunks) physical_.release_chunk(chunk);
  return unmapped;
}

bool PageMapper::release_vacated(PhysicalPage& phys) {
  if (phys.chunk != nullptr) {
    // Told of each page once: the chunk goes with the last of them.
    PhysicalChunk& chunk = *phys.chunk;
    if (++chunk.vacated < chunk.count()) return true;
    chunk.vacated = 0;
    for (PhysicalPage* p : chunk.pages) {
      if (!p->mappings.empty() && unmap_now(*p->mappings.back()) != Error::ok) return false;
    }
    return chunk.idle == chunk.count() && physical_.release_chunk(&chunk);
  }
  // Its other mappings are pages without users that lost them before the held page took
  // phys; that page's work, which the caller waited for, was ordered after theirs.
  while (!phys.mappings.empty()) {
    if (unmap_now(*phys.mappings.back()) != Error::ok) return false;
  }
  return physical_.release(&phys);
}

bool PageMapper::wait_until_settled(StreamPool& pool, std::uint64_t epoch) {
  if (pool.settled_epoch >= epoch) return true;
  std::uint64_t reached = 0;
  switch (checkpoints_.settle(pool.stream, epoch, &reached)) {
    case StreamCheckpoints::Outcome::waited:
      ledger_.page_wait();
      [[fallthrough]];
    case StreamCheckpoints::Outcome::done:
      settle_stream(pool.stream, reached);
      return true;
    case StreamCheckpoints::Outcome::none:
    case StreamCheckpoints::Outcome::failed:
      break;  // the slow safe way
  }
  const std::uint64_t now = physical_.epoch();
  ledger_.page_wait();
  bool whole_device = false;
  if (sync_.wait_for(pool.stream, &whole_device) != Error::ok) return false;
  if (!whole_device) {
    pool.settled_epoch = now;
    return true;
  }
  pools_.for_each([&](StreamPool& p) { p.settled_epoch = now; });
  return true;
}

void PageMapper::settle_stream(StreamHandle stream, std::uint64_t epoch) {
  pools_.for_each([&](StreamPool& p) {
    if (p.stream == stream) p.settled_epoch = std::max(p.settled_epoch, epoch);
  });
}

Error PageMapper::acquire_device_chunk(std::size_t count, PhysicalChunk** out) {
  if (count < kMinChunkPages) return Error::out_of_memory;
  if (physical_.acquire_chunk(device::Location::device, count, out) == Error::ok) return Error::ok;
  // The room may be in cudalloc's cache as idle single pages: they give way to the chunk.
  // Not while a graph is being captured: giving a page back waits for the work that used it,
  // and a wait on a capturing stream would end the capture (captures.h).
  if (page_size_ >= kTakeIdleFrom || physical_.device_idle() < count ||
      Captures::process().underway() || release_idle_pages(count) != count) {
    return Error::out_of_memory;
  }
  return physical_.acquire_chunk(device::Location::device, count, out);
}

Error PageMapper::hold_chunk(Segment& seg, std::size_t first, PhysicalChunk& chunk) {
  Page& head = seg.pages[first];
  head.segment = &seg;  // attach_chunk gives the others theirs
  Error err = attach(head, *chunk.pages[0]);
  if (err == Error::ok) err = grant(head);
  if (err != Error::ok) {
    // Nothing queued used the mapping: it goes at once. Should that fail too, the pages stay
    // mapped without users (the caller's undo retries the unmap); the chunk is idle either
    // way (acquire_chunk takes only chunks mapped nowhere).
    if (head.phys != nullptr) unmap_now(head);
    for (PhysicalPage* p : chunk.pages) physical_.make_idle(*p);
    return err;
  }
  for (std::size_t j = 0; j < chunk.count(); ++j) {
    Page& page = seg.pages[first + j];
    adopt(page, *chunk.pages[j]);
    page.users = 1;
  }
  return Error::ok;
}

Error PageMapper::hold(Segment& seg, const Request& request) {
  const std::size_t n = seg.pages.size();
  std::size_t held = 0;  // pages [0, held) are held in chunks
  Error err = Error::ok;
  // New memory in chunks while it can be had; a chunk that fails to map stops them.
  while (n - held >= kMinChunkPages && request.may_grow() && !request.spilling()) {
    PhysicalChunk* chunk = nullptr;
    if (acquire_device_chunk(std::min(chunk_pages_, n - held), &chunk) != Error::ok) break;
    err = hold_chunk(seg, held, *chunk);
    if (err != Error::ok) break;
    held += chunk->count();
  }
  // The rest in single pages, unless a chunk was left mapped here by a failure.
  if (held < n && (err == Error::ok || seg.pages[held].phys == nullptr)) {
    err = use(seg, seg.base + held * page_size_, (n - held) * page_size_, request);
  }
  if (err == Error::ok) return Error::ok;
  for (std::size_t i = 0; i < held; ++i) end_hold(seg.pages[i], *seg.pages[i].phys);
  unmap_unused(seg, 0, n);
  return err;
}

std::size_t PageMapper::release_idle_pages(std::size_t count) {
  Request cached;  // an idle page only: no new memory
  cached.growth = Growth::cache_only;
  std::size_t released = 0;
  while (released < count && physical_.device_idle() != 0) {
    PhysicalPage* phys = nullptr;
    if (physical_.acquire(Claim::fresh, cached, &phys) != Error::ok) break;
    // Its mappings are pages without users: unmap() waits for their pools' streams first.
    bool unmapped = true;
    while (unmapped && !phys->mappings.empty()) {
      unmapped = unmap(*phys->mappings.back()) == Error::ok;
    }
    physical_.make_idle(*phys);  // release() takes an idle page mapped nowhere
    if (!unmapped || !physical_.release(phys)) break;
    ++released;
  }
  return released;
}

bool PageMapper::release_cached() {
  // Nothing idle or mapped: no physical page is waiting for queued work.
  if (physical_.idle() == 0 && ledger_.stats().mapped_bytes.current == 0 &&
      !staging_.has_strays()) {
    return true;
  }
  // Pages without users may still be used by queued work: wait for all of it once.
  if (!sync_.synchronize_device()) {
    log().warn("device {}: synchronize failed; idle pages are kept", ordinal_);
    return false;
  }
  physical_.unpark_all();
  const std::uint64_t now = physical_.epoch();
  pools_.for_each([&](StreamPool& pool) { pool.settled_epoch = now; });
  checkpoints_.clear();  // all completed
  staging_.release_strays();
  pools_.for_each([&](StreamPool& pool) {
    for (Segment* seg : pool.segments) {
      if (seg->mapped_pages == 0) continue;
      for (std::size_t i = 0; i < seg->pages.size(); ++i) {
        Page& page = seg->pages[i];
        if (page.phys == nullptr || page.users != 0 || unmap(page) == Error::ok) continue;
        log().warn("device {}: {}", ordinal_, last_error_message());
        i = last_sharing_mapping(*seg, i);
      }
    }
  });
  physical_.release_idle();
  return true;
}

bool PageMapper::unmapped(const Segment& seg) const {
  return seg.mapped_pages == 0;
}

void PageMapper::drop(Segment& seg) {
  physical_.parked().forget(seg);
  std::size_t mapped = seg.mapped_pages;
  for (std::size_t i = 0; mapped != 0 && i < seg.pages.size(); ++i) {
    const PhysicalPage* phys = seg.pages[i].phys;
    if (phys == nullptr) continue;
    --mapped;
    if (phys->chunk == nullptr) {
      device_.unmap(seg.base + i * page_size_, page_size_);
    } else if (phys->slot == 0) {  // mapped whole from here
      device_.unmap(seg.base + i * page_size_, phys->chunk->count() * page_size_);
    }
  }
  device_.unreserve(seg.base, seg.size);
}

}  // namespace cudalloc
