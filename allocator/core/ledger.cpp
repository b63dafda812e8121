#include "core/ledger.h"

namespace cudalloc {

using device::Location;

void Ledger::reset_peaks() {
  stats_.for_each_mutable([](std::string_view, Stat& s) { s.reset_peak(); });
}

void Ledger::forget_everything() {
  stats_.device_frees.increase(stats_.reserved_count.current);
  for (Stat* gauge : {&stats_.allocated_bytes, &stats_.allocated_count, &stats_.requested_bytes,
                      &stats_.active_bytes, &stats_.active_count, &stats_.reserved_bytes,
                      &stats_.reserved_count, &stats_.cached_bytes, &stats_.cached_count,
                      &stats_.slab_bytes, &stats_.slab_count, &stats_.mapped_bytes,
                      &stats_.host_reserved_bytes, &stats_.host_active_bytes,
                      &stats_.dropped_bytes}) {
    gauge->current = 0;
  }
  allocated_high_ = 0;
}

void Ledger::reserved(Location where, std::uintptr_t base, std::size_t bytes,
                      StreamHandle stream) {
  const auto n = signed_(bytes);
  if (where == Location::host) {
    stats_.host_reserved_bytes.increase(n);
  } else {
    stats_.reserved_bytes.increase(n);
    stats_.reserved_count.count();
    stats_.device_allocs.count();
  }
  stats_.cached_bytes.increase(n);
  if (base != 0) trace(TraceAction::segment_alloc, base, bytes, stream);
}

void Ledger::released(Location where, std::uintptr_t base, std::size_t bytes,
                      StreamHandle stream) {
  const auto n = signed_(bytes);
  if (where == Location::host) {
    stats_.host_reserved_bytes.decrease(n);
  } else {
    stats_.reserved_bytes.decrease(n);
    stats_.reserved_count.decrease(1);
    stats_.device_frees.count();
  }
  stats_.cached_bytes.decrease(n);
  if (base != 0) trace(TraceAction::segment_free, base, bytes, stream);
}

void Ledger::page_mapped(std::uintptr_t va, std::size_t bytes, StreamHandle stream) {
  stats_.mapped_bytes.increase(signed_(bytes));
  stats_.page_maps.count();
  trace(TraceAction::segment_map, va, bytes, stream);
}

void Ledger::page_unmapped(std::uintptr_t va, std::size_t bytes, StreamHandle stream) {
  stats_.mapped_bytes.decrease(signed_(bytes));
  stats_.page_unmaps.count();
  trace(TraceAction::segment_unmap, va, bytes, stream);
}

void Ledger::slab_created(std::size_t bytes) {
  stats_.slab_bytes.increase(signed_(bytes));
  stats_.slab_count.count();
}

void Ledger::slab_released(std::size_t bytes) {
  stats_.slab_bytes.decrease(signed_(bytes));
  stats_.slab_count.decrease(1);
}

void Ledger::out_of_memory(std::size_t size, StreamHandle stream) {
  stats_.ooms.count();
  trace(TraceAction::oom, 0, size, stream);
}

void Ledger::pages_moved(Location to, std::size_t pages) {
  (to == Location::host ? stats_.page_offloads : stats_.page_prefetches)
      .increase(signed_(pages));
}

}  // namespace cudalloc
