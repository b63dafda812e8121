// Migrator's bulk moves (migrator.h, move_segment): a region's held segment moving whole to
// the host (pause) or back (resume), while nothing uses it.
//
// A move of single allocations (move_batch) pays, per batch of 32 pages, a host wait and then
// an unmap, a map and a grant per run of pages in between. Remapping costs more than the
// copy (H200: about 25-42 us per 2 MiB page to unmap and 33-67 us to grant access, even in
// one call for a run, against 41 us to copy), so here the copies run while the host remaps:
//   to the host    for every segment, host pages are taken piece by piece and each piece's
//                  copies into their homes queued at once, then an event per piece (pinning
//                  new host memory overlaps the copies queued before); then piece by piece,
//                  once its own event has completed, the piece is remapped (one unmap, a map,
//                  one access grant) and the device pages it left go back to the driver,
//                  while the GPU still copies the pieces after it;
//   to the device  segment by segment, piece by piece, each piece is remapped to new device
//                  pages (the region is idle: resume waited for its work, nothing reads it
//                  meanwhile) and its copies from the host pages' homes queued at once, so
//                  they run while the host remaps the next piece; then an event per segment,
//                  each waited for.
// Until a page's new backing has its bytes (its event) its old physical page keeps them and
// stays its owner: a failure puts every page not yet moved back on its old page. Host pages
// without a home (its mapping failed) take the plain path (move_pages).
//
// Pieces. The driver's page-table calls cost per physical allocation far more than per byte
// (H200: about 82 us per 2 MiB for single pages, 4 us in 64 MiB allocations, against 39 us to
// copy them; docs/offload.md), so each piece of a move, up to chunk_pages() consecutive pages,
// gets one chunk (pool_types.h): one physical allocation, mapped, granted and unmapped in one
// call each. A piece is the pages of one old chunk, or up to chunk_pages() consecutive single
// pages; a chunk is always moved whole, so the same pieces come back at the next move and an
// idle host chunk of the right size is found for them. Where no chunk can be had (no room
// for one, or the driver refuses) the piece takes single pages, as before.
#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/migrator.h"

namespace cudalloc {

using device::Location;

namespace {

constexpr std::size_t kMinChunkPages = PageMapper::kMinChunkPages;

bool on(const PhysicalPage& phys, Location where) { return phys.host == (where == Location::host); }

bool homeless(const PhysicalPage* p) { return p->host && p->home == 0; }

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

std::size_t Migrator::piece_end(const std::vector<Page*>& pages, std::size_t first) const {
  const std::size_t run = run_end(pages, first);
  const PhysicalPage& phys = *pages[first]->phys;
  if (phys.chunk != nullptr) return std::min(run, first + phys.chunk->count() - phys.slot);
  std::size_t end = first + 1;
  const std::size_t most = mapper_.chunk_pages();
  while (end < run && end - first < most && pages[end]->phys->chunk == nullptr) ++end;
  return end;
}

bool Migrator::piece_whole(const std::vector<Page*>& pages, std::size_t first,
                           std::size_t last) {
  // Each chunk among pages[first, last) lies wholly inside, slot by slot.
  for (std::size_t k = first; k < last; ++k) {
    const PhysicalPage& phys = *pages[k]->phys;
    if (phys.chunk == nullptr) continue;
    if (k < first + phys.slot || k - phys.slot + phys.chunk->count() > last) return false;
  }
  return true;
}

Error Migrator::acquire_piece(std::size_t count, Location to, std::vector<PhysicalPage*>& got) {
  PhysicalChunk* chunk = nullptr;
  const bool chunked = to == Location::device
                           ? mapper_.acquire_device_chunk(count, &chunk) == Error::ok
                           : count >= kMinChunkPages &&
                                 physical_.acquire_chunk(to, count, &chunk) == Error::ok;
  if (chunked) {
    got.assign(chunk->pages.begin(), chunk->pages.end());
    return Error::ok;
  }
  return acquire_targets(count, to, Extent::all, got);
}

Error Migrator::move_segments(const std::vector<Segment*>& segments, Location to,
                              StreamHandle stream, std::size_t* released) {
  std::vector<SegmentMove> moves;
  for (Segment* seg : segments) {
    SegmentMove m;
    m.pages = pages_to_move(*seg, to);
    if (!m.pages.empty()) moves.push_back(std::move(m));
  }
  // Every segment's copies are queued (to the host) or its pages remapped and copies queued
  // (to the device) before the first segment is finished: the GPU copies while the host
  // makes the next pieces' driver calls.
  Error err = Error::ok;
  std::size_t started = 0;
  for (; err == Error::ok && started < moves.size(); ++started) {
    SegmentMove& m = moves[started];
    err = to == Location::host ? queue_copies_to_host(m, stream) : remap_to_device(m, stream);
    if (err != Error::ok) break;
  }
  for (std::size_t i = 0; i < started; ++i) {
    SegmentMove& m = moves[i];
    Error e = Error::ok;
    if (m.plain) {
      std::vector<PhysicalPage*> left;
      e = move_pages(m.pages, to, stream, Extent::all, &left);
      leave(left, released);
    } else {
      e = finish_move(m, to, stream, released);
    }
    if (err == Error::ok) err = e;
  }
  return err;
}

// The pages of `seg` a move to `to` takes: in use, not on `to` already.
std::vector<Page*> Migrator::pages_to_move(Segment& seg, Location to) {
  std::vector<Page*> pages;
  for (Page& page : seg.pages) {
    if (page.phys != nullptr && page.users > 0 && !on(*page.phys, to)) pages.push_back(&page);
  }
  return pages;
}

Error Migrator::prepare_host(const std::vector<Segment*>& segments, std::size_t* pages) {
  // Everything taken stays taken until the end, so that an idle chunk found for one piece is
  // not found again for the next piece of its size.
  std::vector<PhysicalPage*> taken;
  Error err = Error::ok;
  *pages = 0;
  for (Segment* seg : segments) {
    const std::vector<Page*> moving = pages_to_move(*seg, Location::host);
    for (std::size_t at = 0, end = 0; err == Error::ok && at < moving.size(); at = end) {
      end = piece_end(moving, at);
      std::vector<PhysicalPage*> got;
      err = acquire_piece(end - at, Location::host, got);
      if (err == Error::ok) *pages += got.size();
      taken.insert(taken.end(), got.begin(), got.end());
    }
  }
  for (PhysicalPage* p : taken) physical_.make_idle(*p);
  return err;
}

void Migrator::leave(const std::vector<PhysicalPage*>& left, std::size_t* released) {
  if (released == nullptr) return;  // idle already
  for (PhysicalPage* phys : left) {
    if (mapper_.release_vacated(*phys)) ++*released;
  }
}

Error Migrator::wait_for_copies(SegmentMove& m, std::size_t piece, StreamHandle stream) {
  if (m.waited) return Error::ok;
  if (piece < m.copied.size() &&
      sync_.completed(m.copied[piece], Wait::block) == device::Status::ok) {
    m.copied[piece].reset();  // back to the pool for the pieces still being queued
    return Error::ok;
  }
  return drain(m, stream);
}

Error Migrator::drain(SegmentMove& m, StreamHandle stream) {
  if (m.waited) return Error::ok;
  m.waited = true;
  return sync_.wait_for(stream);
}

void Migrator::order_after_last_users(const std::vector<PhysicalPage*>& fresh,
                                      StreamHandle stream) {
  std::vector<StreamHandle> ordered;
  for (const PhysicalPage* phys : fresh) {
    if (phys->last_pool == nullptr || phys->last_pool->stream == stream) continue;
    const StreamHandle last = phys->last_pool->stream;
    if (std::find(ordered.begin(), ordered.end(), last) != ordered.end()) continue;
    ordered.push_back(last);
    sync_.order_after(last, stream);
  }
}

Error Migrator::copy_runs(const std::vector<std::uintptr_t>& dst,
                          const std::vector<std::uintptr_t>& src, StreamHandle stream) {
  const std::size_t page_size = mapper_.page_size();
  for (std::size_t k = 0; k < dst.size();) {
    std::size_t end = k + 1;
    while (end < dst.size() && dst[end] == dst[end - 1] + page_size &&
           src[end] == src[end - 1] + page_size) {
      ++end;
    }
    const auto status = device_.copy(ordinal_, dst[k], src[k], (end - k) * page_size, stream);
    if (status != device::Status::ok) {
      return fail(Error::device_error, "device %d: copying pages for a move failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
    k = end;
  }
  return Error::ok;
}

Error Migrator::queue_copies_to_host(SegmentMove& m, StreamHandle stream) {
  // Host pages chunk by chunk, each chunk's copies queued at once: pinning new host memory
  // overlaps the copies already queued.
  const std::size_t n = m.pages.size();
  Error err = Error::ok;
  std::size_t at_piece = 0;
  for (std::size_t at = 0, end = 0; err == Error::ok && at < n; at = end) {
    end = piece_end(m.pages, at);
    const std::size_t count = end - at;
    std::vector<PhysicalPage*> got;
    err = acquire_piece(count, Location::host, got);
    if (err != Error::ok) break;
    // The copies come after the pages' last users; later users wait for the copies (the
    // pages may be given back unused).
    order_after_last_users(got, stream);
    for (PhysicalPage* p : got) p->last_pool = m.pages[at]->segment->pool;
    m.fresh.insert(m.fresh.end(), got.begin(), got.end());
    if (std::any_of(got.begin(), got.end(), homeless)) {
      m.plain = true;
      break;
    }
    std::vector<std::uintptr_t> src(count), dst(count);
    for (std::size_t k = 0; k < count; ++k) {
      src[k] = mapper_.address_of(*m.pages[at + k]);
      dst[k] = got[k]->home;
    }
    err = copy_runs(dst, src, stream);
    // The piece is remapped once its own copies are done, while later pieces' copies run.
    StreamSync::Event done;
    if (err == Error::ok && m.copied.size() == at_piece && sync_.record(stream, &done)) {
      m.copied.push_back(std::move(done));
    }
    ++at_piece;
  }
  if (err != Error::ok || m.plain) {
    // Copies into them may be queued: they finish before the pages are idle (an idle host
    // chunk may be released at once). A failed wait means a failed device.
    if (!m.fresh.empty()) drain(m, stream);
    for (PhysicalPage* p : m.fresh) physical_.make_idle(*p);
    m.fresh.clear();
  }
  return err;
}

Error Migrator::remap_to_device(SegmentMove& m, StreamHandle stream) {
  // The region is idle: pages switch to their device pages first, then the copies from the
  // host pages' homes fill them. Until the copies are waited for, the host pages own the
  // pages and hold the bytes.
  const std::size_t n = m.pages.size();
  if (std::any_of(m.pages.begin(), m.pages.end(), [](const Page* p) { return homeless(p->phys); })) {
    m.plain = true;
    return Error::ok;
  }
  m.old.resize(n);
  for (std::size_t k = 0; k < n; ++k) m.old[k] = m.pages[k]->phys;
  Error err = Error::ok;
  while (err == Error::ok && m.remapped < n) {
    const std::size_t first = m.remapped;
    const std::size_t end = piece_end(m.pages, first);
    std::vector<PhysicalPage*> got;
    err = acquire_piece(end - first, Location::device, got);
    if (err != Error::ok) break;
    order_after_last_users(got, stream);
    m.fresh.insert(m.fresh.end(), got.begin(), got.end());
    err = remap_run(m.pages, m.fresh, m.old, first, end);
    if (err != Error::ok) break;
    m.remapped = end;
    // The piece's copies start now, while the host remaps the next piece.
    std::vector<std::uintptr_t> homes(end - first), targets(end - first);
    for (std::size_t k = first; k < end; ++k) {
      homes[k - first] = m.old[k]->home;
      targets[k - first] = mapper_.address_of(*m.pages[k]);
    }
    err = copy_runs(targets, homes, stream);
  }
  StreamSync::Event done;
  if (err == Error::ok && sync_.record(stream, &done)) m.copied.push_back(std::move(done));
  if (err != Error::ok) {
    // Copies into the remapped pieces may be running: they finish before those pieces are
    // unmapped. If the wait fails the device has failed; the host pages keep the bytes.
    if (m.remapped != 0) drain(m, stream);
    restore_run(m.pages, m.old, 0, m.remapped);
    for (PhysicalPage* p : m.fresh) physical_.make_idle(*p);
    m.fresh.clear();
  }
  return err;
}

Error Migrator::finish_move(SegmentMove& m, Location to, StreamHandle stream,
                            std::size_t* released) {
  const std::size_t n = m.pages.size();
  if (to == Location::device) {
    if (const Error err = wait_for_copies(m, 0, stream); err != Error::ok) {
      // The host pages still hold every byte.
      restore_run(m.pages, m.old, 0, m.remapped);
      for (PhysicalPage* p : m.fresh) physical_.make_idle(*p);
      return err;
    }
    for (std::size_t k = 0; k < n; ++k) {
      // Every use of the host page is done: the copies out of it (just waited for) and the
      // kernels of the paused region (resume waited for them first). Another stream's pause
      // may take it without waiting for this one's later work.
      m.old[k]->last_pool = nullptr;
      take_over(*m.pages[k], *m.old[k], *m.fresh[k], nullptr);
    }
    ledger_.pages_moved(Location::device, n);
    return Error::ok;
  }
  // To the host, piece by piece as each one's copies complete: a piece is remapped and its
  // device pages released while the GPU still copies the pieces after it.
  m.old.resize(n);
  for (std::size_t k = 0; k < n; ++k) m.old[k] = m.pages[k]->phys;
  Error err = Error::ok;
  std::size_t moved = 0;
  for (std::size_t k = 0, piece = 0; k < n; ++piece) {
    const std::size_t end = piece_end(m.pages, k);  // the pieces queue_copies_to_host took
    if (err == Error::ok) err = wait_for_copies(m, piece, stream);
    if (err == Error::ok) err = remap_run(m.pages, m.fresh, m.old, k, end);
    // The pieces left stay on their old pages; copies into their new ones may still run
    // and finish before those go idle (an idle host chunk may be released at once).
    if (err != Error::ok) drain(m, stream);
    std::vector<PhysicalPage*> left;
    for (std::size_t i = k; i < end; ++i) {
      if (err != Error::ok) {
        physical_.make_idle(*m.fresh[i]);  // the page stays on its old page
        continue;
      }
      take_over(*m.pages[i], *m.old[i], *m.fresh[i], &left);
      ++moved;
    }
    leave(left, released);
    k = end;
  }
  ledger_.pages_moved(Location::host, moved);
  return err;
}

void Migrator::take_over(Page& page, PhysicalPage& old, PhysicalPage& fresh,
                         std::vector<PhysicalPage*>* vacated) {
  physical_.clear_owner(old);
  physical_.make_idle(old);
  physical_.set_owner(fresh, &page);
  if (vacated != nullptr) vacated->push_back(&old);
}

Error Migrator::remap_run(const std::vector<Page*>& pages,
                          const std::vector<PhysicalPage*>& fresh,
                          const std::vector<PhysicalPage*>& old, std::size_t first,
                          std::size_t last) {
  // Owners do not change here: the caller moves them once the new pages hold the bytes.
  Segment& seg = *pages[first]->segment;
  if (!piece_whole(pages, first, last)) {
    return fail(Error::device_error, "device %d: a move of %zu pages at %#zx would split a "
                "chunk", ordinal_, last - first,
                static_cast<std::size_t>(mapper_.address_of(*pages[first])));
  }
  const auto index = static_cast<std::size_t>(pages[first] - seg.pages.data());
  const auto start = Clock::now();
  Error err = mapper_.unmap_run_now(seg, index, last - first);
  const double unmapped_ms = ms_since(start);
  for (std::size_t k = first; err == Error::ok && k < last; ++k) {
    // A chunk maps whole, at its first page.
    if (pages[k]->phys != fresh[k]) err = mapper_.attach(*pages[k], *fresh[k]);
    if (err == Error::ok) fresh[k]->last_pool = seg.pool;
  }
  const double mapped_ms = ms_since(start);
  if (err == Error::ok && !staging_.grant_range(mapper_.address_of(*pages[first]), last - first)) {
    err = fail(Error::device_error, "device %d: granting access to moved pages failed: %s",
               ordinal_, device_.last_failure());
  }
  log().trace("device {}: remapping {} pages: unmap {:.2f} ms, map {:.2f} ms, access {:.2f} ms",
              ordinal_, last - first, unmapped_ms, mapped_ms - unmapped_ms,
              ms_since(start) - mapped_ms);
  if (err != Error::ok) {
    restore_run(pages, old, first, last);
    return err;
  }
  for (std::size_t k = first; k < last; ++k) pages[k]->accessible = true;
  return Error::ok;
}

Error Migrator::restore_run(const std::vector<Page*>& pages,
                            const std::vector<PhysicalPage*>& old, std::size_t first,
                            std::size_t last) {
  Error result = Error::ok;
  for (std::size_t k = first; k < last; ++k) {
    Page& page = *pages[k];
    if (page.phys == old[k]) continue;
    // An old chunk maps whole (from its first page, which comes first here), over pages
    // that may map new memory still; unmapping a new chunk's page unmaps all of it.
    const PhysicalPage& was = *old[k];
    const std::size_t span = was.chunk != nullptr ? was.chunk->count() - was.slot : 1;
    bool cleared = true;
    for (std::size_t j = k; cleared && j < std::min(k + span, last); ++j) {
      if (pages[j]->phys != nullptr) cleared = mapper_.unmap_now(*pages[j]) == Error::ok;
    }
    if (cleared && mapper_.map(page, *old[k]) == Error::ok) continue;
    result = fail(Error::device_error,
                  "device %d: a page at %#zx lost its backing: moving it failed and mapping "
                  "it back failed too (%s)", ordinal_,
                  static_cast<std::size_t>(mapper_.address_of(page)), device_.last_failure());
  }
  return result;
}

}  // namespace cudalloc
