// Migrator: moving live allocations between device and host memory without changing their
// address (the host tier's offload, prefetch and promotion).
//
// In paged mode an allocation's address is a virtual range; what backs it is a physical page
// per granule, on the device or on the host. A move gives each page a new physical page of the
// other location and copies the bytes:
//   1. take the new physical pages (idle ones first) and find where each is written: where it
//      is mapped already, else a staging slot (staging.h);
//   2. queue the copies on the caller's stream, after the work queued there and on the
//      allocation's own stream, and after the last users of the new pages;
//   3. wait on the host for that stream: the copies and every earlier use are done;
//   4. per run of pages: unmap the old backing, map the new one at the page, one access grant
//      for the run; the old physical page becomes idle (reusable) and keeps its other mappings;
//   5. unmap the staging slots.
// Step 4 changes the backing under the allocation's address, which is why nothing may use the
// allocation during the call: a kernel running then could write the old backing after the
// copy. Everything queued before the call is done by step 3; anything queued after the call
// returns sees the new mapping.
//
// Failure handling keeps the allocation valid: before step 4 nothing has changed; in step 4
// a page whose new mapping fails is mapped back to its old physical page, which still holds
// the bytes. Pages already moved stay moved, so an allocation may lie partly on each side.
// Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <vector>

#include "core/budget.h"
#include "core/ledger.h"
#include "core/page_mapper.h"
#include "core/physical_pages.h"
#include "core/staging.h"
#include "core/stream_pool.h"
#include "core/stream_sync.h"

namespace cudalloc {

// The pages under a live allocation: its segment and its rounded extent.
struct AllocationSpan {
  Segment* segment = nullptr;
  std::uintptr_t addr = 0;
  std::size_t size = 0;
};

class Migrator {
 public:
  Migrator(device::Device& device, int ordinal, const Settings& settings, const Budget& budget,
           PhysicalPages& physical, PageMapper& mapper, Staging& staging, StreamSync& sync,
           Ledger& ledger, StreamPools& pools)
      : device_(device), ordinal_(ordinal), settings_(settings), budget_(budget),
        physical_(physical), mapper_(mapper), staging_(staging), sync_(sync), ledger_(ledger),
        pools_(pools) {}

  // Moves the pages of the allocation to `to`, the copy ordered on `stream` (see above).
  // not_supported outside paged segments.
  Error move(const AllocationSpan& span, device::Location to, StreamHandle stream);
  // Moves every host page in use back to device memory while the budget has room; ok also
  // when some stay on the host.
  Error promote();
  // promote() when everything in use fits in settings.promote x the budget (after a free).
  void maybe_promote();
  void residency(const AllocationSpan& span, std::size_t* device_bytes,
                 std::size_t* host_bytes) const;

 private:
  // Whether a move may stop short: a promotion moves what fits, an explicit move all or
  // nothing of each batch.
  enum class Extent { all, what_fits };
  // Moves the pages (all with users, of one segment) whose location differs from `to`.
  Error move_pages(std::vector<Page*> pages, device::Location to, StreamHandle stream,
                   Extent extent = Extent::all);
  Error move_batch(std::vector<Page*> pages, device::Location to, StreamHandle stream,
                   Extent extent);
  // New backing for `count` pages; with what_fits, fewer (at least one) when the other side
  // has no room for all.
  Error acquire_targets(std::size_t count, device::Location to, Extent extent,
                        std::vector<PhysicalPage*>& fresh);
  // The address each new page is written at (mapping staging slots where needed), after
  // ordering `stream` behind the new pages' last users.
  Error prepare_targets(const std::vector<PhysicalPage*>& fresh, StreamHandle stream,
                        std::vector<std::uintptr_t>& targets, std::size_t* staged);
  Error copy_pages(const std::vector<Page*>& pages, const std::vector<std::uintptr_t>& targets,
                   StreamHandle stream);
  // Swaps the backing of pages[first, last) (consecutive addresses) to fresh[first, last);
  // done[k] tells which pages now live on their fresh page.
  Error swap_run(const std::vector<Page*>& pages, const std::vector<PhysicalPage*>& fresh,
                 std::size_t first, std::size_t last, std::vector<char>& done);
  Error undo_swap(Page& page, PhysicalPage& fresh, PhysicalPage& old);

  device::Device& device_;
  const int ordinal_;
  const Settings& settings_;
  const Budget& budget_;
  PhysicalPages& physical_;
  PageMapper& mapper_;
  Staging& staging_;
  StreamSync& sync_;
  Ledger& ledger_;
  StreamPools& pools_;
};

}  // namespace cudalloc
