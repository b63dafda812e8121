// ParkedPages: idle pages kept in runs, so that freeing or reusing a large block costs the
// same as a small one.
//
// When a block of a paged segment is freed, each page it alone used becomes idle: it loses its
// user, its physical page enters the idle list (physical_pages.h), and the next block over that
// address takes it back (page_mapper.h). Done page by page, a 256 MiB pair walks 128 pages
// twice. Instead the freed block's pages are parked as one run: each keeps its one user (the
// run) and its physical page, as if the block were still there, and the run records the epoch
// at which its pages became idle. A block allocated over a run takes its pages back by
// shortening or splitting the run: no page is visited. A page leaves a run one at a time, and
// becomes an ordinary idle page, only when its physical page is wanted elsewhere:
//   - PhysicalPages::acquire wants the oldest or the newest idle page: the oldest parked page
//     is the first page of the oldest run, the newest the last page of the newest run;
//   - a page whose own physical page is owned by a parked page takes it back (PageMapper);
//   - empty_cache and a stream's release unpark every page first (unpark_all).
// So parking changes how idle pages are stored, and next to never which page serves which
// address: a use whose claims fail returns the pages it took from runs to the idle list with
// new epochs (undo_use), and a use claims pages between runs after taking the runs, so a
// physical page shared by a parked page and an earlier page of the same use stays with the
// parked one.
//
// Invariants (validate.cpp):
//   - a parked page has exactly one user (the run), no non-free block over it, and owns an
//     accessible device page (never a host page: segments with host pages do not park);
//   - runs of one segment do not overlap, and are keyed by their first page;
//   - the list of all runs is in epoch order; page i of a run became idle at epoch + i, and
//     epochs of different runs do not interleave.
// Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/pool_types.h"

namespace cudalloc {

class ParkedPages {
 public:
  ParkedPages() = default;
  ParkedPages(const ParkedPages&) = delete;
  ParkedPages& operator=(const ParkedPages&) = delete;

  std::size_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  const ParkedRun* oldest() const { return oldest_; }
  const ParkedRun* newest() const { return newest_; }
  // The epoch of the oldest (newest) parked page; requires !empty().
  std::uint64_t oldest_epoch() const { return oldest_->epoch; }
  std::uint64_t newest_epoch() const { return newest_->epoch + newest_->count - 1; }

  // Parks pages [first, last] of `seg`, which each have the one user about to leave; they
  // became idle at epochs epoch .. epoch + (last - first).
  void park(Segment& seg, std::size_t first, std::size_t last, std::uint64_t epoch);
  // Finds the first run of `seg` that holds a page of [from, to] and takes the pages of
  // [from, to] in it, [*lo, *hi], out of the run: they keep their user (now the block being
  // allocated there). False when no page of [from, to] is parked.
  bool take_first_in(Segment& seg, std::size_t from, std::size_t to, std::size_t* lo,
                     std::size_t* hi);
  // Removes the oldest (newest) parked page from its run and returns it with its epoch; the
  // caller makes it an ordinary idle page.
  Page* take_oldest(std::uint64_t* epoch);
  Page* take_newest(std::uint64_t* epoch);
  // Whether `page` is parked; take_page also removes it from its run (epoch in *epoch).
  bool contains(const Page& page) const;
  bool take_page(Page& page, std::uint64_t* epoch);
  // Removes every run; calls visit(page, epoch) for every parked page in epoch order.
  template <typename Visit>
  void take_all(Visit&& visit);
  // Forgets the runs of a segment being destroyed with every other (drop_everything: the
  // physical pages are dropped right after, so owners pointing into the segment are never
  // read). A segment released alone has no runs: all its pages are unmapped first.
  void forget(Segment& seg);

 private:
  using Runs = std::map<std::size_t, ParkedRun>;
  void link_after(ParkedRun* at, ParkedRun* run);  // at == nullptr: as the oldest
  void unlink(ParkedRun* run);
  // Removes pages [lo, hi] (within the run at `it`) from it; returns the iterator after it.
  Runs::iterator cut(Segment& seg, Runs::iterator it, std::size_t lo, std::size_t hi);
  // Map nodes of runs that ended, kept for the next park: no host allocation in the steady
  // state.
  Runs::iterator insert(Segment& seg, std::size_t first, std::size_t count, std::uint64_t epoch);
  void recycle(Segment& seg, Runs::iterator it);

  ParkedRun* oldest_ = nullptr;
  ParkedRun* newest_ = nullptr;
  std::size_t count_ = 0;
  std::vector<Runs::node_type> spare_;
};

template <typename Visit>
void ParkedPages::take_all(Visit&& visit) {
  while (oldest_ != nullptr) {
    ParkedRun* run = oldest_;
    Segment& seg = *run->segment;
    for (std::size_t i = 0; i < run->count; ++i) visit(seg.pages[run->first + i], run->epoch + i);
    count_ -= run->count;
    unlink(run);
    recycle(seg, seg.parked.find(run->first));
  }
}

}  // namespace cudalloc
