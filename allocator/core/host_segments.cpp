// The host tier's entry point (spill) and its fallback without host-located pages.
//
// A request that finds no device room, even after the cache is released, is retried with the
// host tier enabled (offload:host):
//   - paged mode: pages that cannot get device memory get host-located physical pages, mapped
//     at their address like any other (page_pool.cpp); they can move back (migration.cpp);
//   - otherwise, or where the driver cannot create host-located pages: a host segment of
//     pinned host memory mapped for the device, sized to the request. Its free blocks sit in
//     the pool's host bins, where only spilled requests look, and wholly free host segments
//     are returned when the cache is released (OOM path, empty_cache). Such memory cannot
//     move: its address is the host allocation's.
#include "core/device_allocator.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {

Error DeviceAllocator::spill(StreamPool& pool, std::size_t size, std::uintptr_t* addr,
                             std::uintptr_t* owner) {
  // Spilled requests go to spill segments of one kind only: paged ones where host-located
  // pages can be created (known from the first one), pinned ones otherwise.
  if (paged() && host_pages_supported_ && host_pages_ == 0) {
    PhysicalPage* probe = nullptr;
    if (create_page(device::Location::host, &probe) == Error::ok) idle_push(*probe);
  }
  spill_ = paged() && host_pages_supported_ ? Spill::host_pages : Spill::host_segments;
  const Error err = try_allocate(pool, size, addr, owner);
  spill_ = Spill::off;
  if (err == Error::ok) stats_.spills.count();
  return err;
}

Error DeviceAllocator::new_host_segment(StreamPool& pool, std::size_t size, Block** out) {
  const std::size_t bytes = round_up(size, 2 * MiB);
  const auto held = static_cast<std::size_t>(stats_.host_reserved_bytes.current);
  if (settings_.host_limit != 0 && held + bytes > settings_.host_limit) {
    return Error::out_of_memory;
  }
  void* ptr = nullptr;
  const auto status = device_.host_alloc(ordinal_, bytes, &ptr);
  if (status == device::Status::out_of_memory) return Error::out_of_memory;
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: allocating %s of pinned host memory failed: %s %s",
                ordinal_, format_bytes(bytes).c_str(), device::status_name(status),
                device_.last_failure());
  }
  Segment* seg = add_segment(pool, reinterpret_cast<std::uintptr_t>(ptr), bytes);
  seg->spill = true;
  seg->pinned = true;
  stats_.host_reserved_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.cached_bytes.increase(static_cast<std::int64_t>(bytes));
  if (trace_.enabled()) trace_.record(TraceAction::segment_alloc, seg->base, bytes, pool.stream);
  *out = seg->first;
  return Error::ok;
}

}  // namespace cudalloc
