// Ledger: the one place where what happens to memory becomes statistics and trace entries.
//
// Components report domain events (memory reserved or released, handed out, freed, completed,
// pages mapped or unmapped); the ledger updates the stats (stats_fields.h) and records the
// trace (trace.h) together, so that every invariant between the gauges holds by construction:
//   cached = reserved + host_reserved + dropped - active
// (dropped: bytes of paused regions with no memory behind them, regions.h)
// (validate.cpp checks it and every gauge against the structures). Nothing else writes stats.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/stats.h"
#include "core/trace.h"
#include "device/device.h"

namespace cudalloc {

using device::StreamHandle;

class Ledger {
 public:
  explicit Ledger(std::size_t trace_capacity) : trace_(trace_capacity) {}

  const Stats& stats() const { return stats_; }
  const TraceRing& trace() const { return trace_; }
  void reset_peaks();
  // The most bytes allocated at once since the cache was last emptied (restart_high): the
  // peak of the workload running now, which a policy bound (PhysicalPages::chronic_may_grow)
  // scales. Unlike allocated_bytes' peak, reset_peaks leaves it alone, so that the bound does
  // not move when a program resets its statistics every step.
  std::int64_t allocated_high() const { return allocated_high_; }
  // empty_cache: a program empties the cache between phases of different sizes (a trainer,
  // then an inference engine); the next phase's bound follows its own peak, not the larger
  // one before. Restarts from what is allocated now.
  void restart_high() { allocated_high_ = stats_.allocated_bytes.current; }
  // cudaDeviceReset: every gauge drops to zero (allocated_high too); peaks, totals and
  // counters keep their history.
  void forget_everything();

  // Memory from the driver or the host. A plain segment (`base` is its address) and a
  // physical page (`base` 0: no event of its own; its mappings are traced, and every trace
  // event carries reserved_bytes) count as device memory; host memory
  // (pinned host segments, host-located pages) counts in host_reserved.
  void reserved(device::Location where, std::uintptr_t base, std::size_t bytes,
                StreamHandle stream);
  void released(device::Location where, std::uintptr_t base, std::size_t bytes,
                StreamHandle stream);
  void page_mapped(std::uintptr_t va, std::size_t bytes, StreamHandle stream);
  void page_unmapped(std::uintptr_t va, std::size_t bytes, StreamHandle stream);
  // Host memory that came under (or left) an allocation in use.
  void host_in_use(std::size_t bytes) { stats_.host_active_bytes.increase(signed_(bytes)); }
  void host_unused(std::size_t bytes) { stats_.host_active_bytes.decrease(signed_(bytes)); }

  // An allocation's life: handed to the caller, freed by the caller, reusable again.
  // (Inline: these are on every cached allocate and free.)
  void handed_out(std::uintptr_t addr, std::size_t rounded, std::size_t requested,
                  StreamHandle stream) {
    stats_.allocated_bytes.increase(signed_(rounded));
    allocated_high_ = std::max(allocated_high_, stats_.allocated_bytes.current);
    stats_.allocated_count.count();
    stats_.requested_bytes.increase(signed_(requested));
    stats_.active_bytes.increase(signed_(rounded));
    stats_.active_count.count();
    stats_.cached_bytes.decrease(signed_(rounded));
    trace(TraceAction::alloc, addr, rounded, stream);
  }
  void free_requested(std::uintptr_t addr, std::size_t rounded, std::size_t requested,
                      StreamHandle stream) {
    trace(TraceAction::free_requested, addr, rounded, stream);
    stats_.allocated_bytes.decrease(signed_(rounded));
    stats_.allocated_count.decrease(1);
    stats_.requested_bytes.decrease(signed_(requested));
  }
  void free_completed(std::uintptr_t addr, std::size_t rounded, StreamHandle stream) {
    trace(TraceAction::free_completed, addr, rounded, stream);
    stats_.active_bytes.decrease(signed_(rounded));
    stats_.active_count.decrease(1);
    stats_.cached_bytes.increase(signed_(rounded));
  }

  void free_block_added() { stats_.cached_count.count(); }
  void free_block_removed() { stats_.cached_count.decrease(1); }
  void slab_created(std::size_t bytes);
  void slab_released(std::size_t bytes);

  // Event counters.
  void out_of_memory(std::size_t size, StreamHandle stream);
  void cache_hit() { stats_.cache_hits.count(); }
  void retry() { stats_.alloc_retries.count(); }
  void stream_steal() { stats_.stream_steals.count(); }
  void pending_free() { stats_.pending_frees.count(); }
  void page_wait() { stats_.page_waits.count(); }
  void spill() { stats_.spills.count(); }
  void fence() { stats_.fences.count(); }
  void pages_moved(device::Location to, std::size_t pages);
  // A paused region's page under live allocations lost its memory (dropped), or got new
  // memory at resume: cached bytes do not change (what is cached is what serves requests).
  void page_dropped(std::size_t bytes) {
    stats_.dropped_bytes.increase(signed_(bytes));
    stats_.cached_bytes.increase(signed_(bytes));
  }
  void page_restored(std::size_t bytes) {
    stats_.dropped_bytes.decrease(signed_(bytes));
    stats_.cached_bytes.decrease(signed_(bytes));
  }

  bool tracing() const { return trace_.enabled(); }

 private:
  static std::int64_t signed_(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }
  void trace(TraceAction action, std::uintptr_t addr, std::size_t size, StreamHandle stream) {
    if (trace_.enabled()) {
      trace_.record(action, addr, size, stream,
                    static_cast<std::size_t>(stats_.reserved_bytes.current));
    }
  }

  Stats stats_;
  TraceRing trace_;
  std::int64_t allocated_high_ = 0;  // allocated_high()
};

}  // namespace cudalloc
