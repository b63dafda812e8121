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
  // Moves every page of the held segments of a region being paused or resumed (regions.h) to
  // `to`, all or nothing per run of pages. The physical pages they left stay idle, or with
  // `released` go back to the driver as each piece finishes (idle where the driver refuses),
  // counted in *released. The caller has waited for every use of the segments and guarantees
  // none during the call, which lets the copies of later pieces run while earlier ones are
  // remapped and released (bulk_move.cpp), and pages moving to the device be remapped before
  // their copy (from the host pages' homes), without staging. Same guarantee on failure as
  // move().
  Error move_segments(const std::vector<Segment*>& segments, device::Location to,
                      StreamHandle stream, std::size_t* released);
  // Takes, then leaves idle, the host memory that move_segments(segments, host) would take,
  // piece by piece as it would (host chunks of the same sizes, single host pages), so that
  // the move finds it cached and pins nothing. Every page taken is idle again on return, also
  // on failure (the first piece that cannot be had: no room within host_limit, or the driver
  // refuses); *pages counts the pages of the pieces that were had.
  Error prepare_host(const std::vector<Segment*>& segments, std::size_t* pages);
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
  // Bulk moves (bulk_move.cpp): one segment's pages, their new and old physical pages, the
  // events after its copies; plain: it takes move_pages instead (a host page without a home).
  struct SegmentMove {
    std::vector<Page*> pages;
    std::vector<PhysicalPage*> fresh;
    std::vector<PhysicalPage*> old;
    std::size_t remapped = 0;  // to the device: pages [0, remapped) map their fresh page
    // To the host, one per piece in order, each after that piece's copies; to the device, one
    // after all. Fewer than the pieces (an event failed): the rest wait for the stream.
    std::vector<StreamSync::Event> copied;
    bool waited = false;  // the host waited for the stream: every copy is done
    bool plain = false;
  };
  static std::vector<Page*> pages_to_move(Segment& seg, device::Location to);
  Error queue_copies_to_host(SegmentMove& m, StreamHandle stream);
  Error remap_to_device(SegmentMove& m, StreamHandle stream);
  // Waits for the copies of piece `piece` of a move (copied[piece], else the whole stream).
  Error wait_for_copies(SegmentMove& m, std::size_t piece, StreamHandle stream);
  // Waits once per move for everything queued on `stream`, every copy of the move included:
  // before pages that copies may still write go idle, and when an event cannot say. A failed
  // wait means a failed device.
  Error drain(SegmentMove& m, StreamHandle stream);
  Error finish_move(SegmentMove& m, device::Location to, StreamHandle stream,
                    std::size_t* released);
  // The physical pages a finished piece left: back to the driver with `released` (counted),
  // else idle.
  void leave(const std::vector<PhysicalPage*>& left, std::size_t* released);
  // `page` now owns `fresh`; `old` is idle.
  void take_over(Page& page, PhysicalPage& old, PhysicalPage& fresh,
                 std::vector<PhysicalPage*>* vacated);
  // pages[first, last) (consecutive addresses of one segment) map fresh[k] instead of
  // old[k], with access; owners do not change. On failure they are back on old[k].
  Error remap_run(const std::vector<Page*>& pages, const std::vector<PhysicalPage*>& fresh,
                  const std::vector<PhysicalPage*>& old, std::size_t first, std::size_t last);
  // Puts pages[first, last) back on old[k] (which holds the bytes) from whatever maps them.
  Error restore_run(const std::vector<Page*>& pages, const std::vector<PhysicalPage*>& old,
                    std::size_t first, std::size_t last);
  // The end of the run of pages with consecutive addresses (one segment) from `first`.
  static std::size_t run_end(const std::vector<Page*>& pages, std::size_t first);
  // Bulk moves, piece by piece (bulk_move.cpp): the end of the piece from `first`; whether
  // every chunk among pages[first, last) lies wholly inside; new backing for a piece, one
  // chunk if there is one to be had, else single pages.
  std::size_t piece_end(const std::vector<Page*>& pages, std::size_t first) const;
  static bool piece_whole(const std::vector<Page*>& pages, std::size_t first, std::size_t last);
  Error acquire_piece(std::size_t count, device::Location to, std::vector<PhysicalPage*>& got);
  // Makes `stream` wait for the last users of new physical pages (idle pages of others).
  void order_after_last_users(const std::vector<PhysicalPage*>& fresh, StreamHandle stream);
  // Queues dst[k] <- src[k] (a page each), one copy per run consecutive on both sides.
  Error copy_runs(const std::vector<std::uintptr_t>& dst, const std::vector<std::uintptr_t>& src,
                  StreamHandle stream);
  // Moves the pages (all with users, of one segment) whose location differs from `to`.
  Error move_pages(std::vector<Page*> pages, device::Location to, StreamHandle stream,
                   Extent extent = Extent::all, std::vector<PhysicalPage*>* vacated = nullptr);
  Error move_batch(std::vector<Page*> pages, device::Location to, StreamHandle stream,
                   Extent extent, std::vector<PhysicalPage*>* vacated);
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
