// The one list of cudalloc's statistics. Each X(name, help) becomes a field of Stats, an entry
// of the C API's cudalloc_stats_t (in this order), a key of the snapshot's stats and a row of
// the CLI and Python summaries. Append only: the position is the C API's index.
//
// Gauges (current goes up and down; total counts increases):
//   allocated  memory handed to callers and not yet freed (rounded block sizes)
//   requested  the sizes callers asked for, of the same allocations
//   active     allocated plus freed-but-pending (waiting for other streams' events)
//   reserved   device memory held from the driver (segments, and physical pages of paged
//              segments whether mapped or not)
//   mapped     physical pages mapped into paged segments (used or idle)
//   cached     memory held (reserved, plus host_reserved) that holds no active allocation
//   slab       reserved memory carved into slabs for small sizes
// Event counters (current == total, peak unused):
//   cache_hits     allocations served without a device allocation
//   device_allocs  / device_frees  segments obtained from / returned to the driver
//   ooms           allocations that failed for lack of memory
//   alloc_retries  allocations that needed the cache to be released to succeed
//   stream_steals  free segments moved from one stream's pool to another's
//   pending_frees  frees that had to wait for events (record_stream)
//   page_maps / page_unmaps  pages mapped into / unmapped from paged segments
//   page_waits     host waits for a stream's work before one of its idle pages moved
// The host tier (offload:host):
//   host_reserved  host memory held by the host tier (not part of reserved)
//   host_active    host memory under allocations (pages or blocks in use)
//   spills         allocations served (partly) from host memory for lack of device room
//   page_offloads / page_prefetches  pages of live allocations moved to host / device memory
// Device-ordered frees (cudaFree under LD_PRELOAD):
//   fences         fences that made device-ordered frees reusable: a device synchronization,
//                  or GPU-side events where every stream is seen (core/deferred_frees.h)
#pragma once

#define CUDALLOC_STAT_FIELDS(X)                                                        \
  X(allocated_bytes, "bytes handed to callers, rounded to block size")                 \
  X(allocated_count, "allocations handed to callers")                                  \
  X(requested_bytes, "bytes callers asked for")                                        \
  X(active_bytes, "allocated bytes plus freed bytes waiting for stream events")        \
  X(active_count, "allocations plus frees waiting for stream events")                  \
  X(reserved_bytes, "device memory held from the driver")                              \
  X(reserved_count, "segments held from the driver")                                   \
  X(cached_bytes, "reserved bytes holding no active allocation")                       \
  X(cached_count, "free blocks in the large pool")                                     \
  X(slab_bytes, "reserved bytes carved into slabs for small sizes")                    \
  X(slab_count, "slabs")                                                               \
  X(cache_hits, "allocations served without a device allocation")                      \
  X(device_allocs, "segments obtained from the driver")                                \
  X(device_frees, "segments returned to the driver")                                   \
  X(ooms, "allocations that failed for lack of memory")                                \
  X(alloc_retries, "allocations that succeeded only after releasing the cache")        \
  X(stream_steals, "free segments moved from one stream to another")                   \
  X(pending_frees, "frees that waited for events of other streams")                   \
  X(mapped_bytes, "physical memory mapped into paged segments")                        \
  X(page_maps, "pages mapped into paged segments")                                     \
  X(page_unmaps, "pages unmapped from paged segments")                                 \
  X(page_waits, "host waits for a stream before its idle page moved")                  \
  X(host_reserved_bytes, "host memory held by the host tier")                          \
  X(host_active_bytes, "host memory under allocations")                                \
  X(spills, "allocations served from host memory for lack of device room")            \
  X(page_offloads, "pages of live allocations moved to host memory")                   \
  X(page_prefetches, "pages of live allocations moved to device memory")                 \
  X(fences, "fences that made device-ordered frees reusable")                          \
  X(dropped_bytes, "bytes of paused regions dropped: allocated, with no memory behind")

// PyTorch's name for each statistic that has one, as torch.cuda.memory_stats() keys it:
// gauges as "<name>.all.current" / ".peak" / ".allocated" (increases) / ".freed" (decreases),
// counters as "<name>" (the total). The PyTorch adapter and the Python module both read this
// list (cudalloc_stat_torch_name), so the two always agree.
#define CUDALLOC_TORCH_STAT_NAMES(X)                   \
  X(allocated_count, "allocation", 1)                  \
  X(reserved_count, "segment", 1)                      \
  X(active_count, "active", 1)                         \
  X(cached_count, "inactive_split", 1)                 \
  X(allocated_bytes, "allocated_bytes", 1)             \
  X(reserved_bytes, "reserved_bytes", 1)               \
  X(active_bytes, "active_bytes", 1)                   \
  X(cached_bytes, "inactive_split_bytes", 1)           \
  X(requested_bytes, "requested_bytes", 1)             \
  X(alloc_retries, "num_alloc_retries", 0)             \
  X(ooms, "num_ooms", 0)                               \
  X(fences, "num_sync_all_streams", 0)                 \
  X(device_allocs, "num_device_alloc", 0)              \
  X(device_frees, "num_device_free", 0)
