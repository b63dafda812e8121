// Reserved memory over a trace, per policy, in buckets of events: what `cudalloc view` draws
// beside the trace's own timeline. A separate, sampled replay: the timed one (runner.h) is
// not slowed by it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/settings.h"
#include "snapshot/trace_reader.h"

namespace cudalloc::replay {

struct ReservedCurve {
  std::string policy;  // "cudalloc", "pytorch" or "expandable" (runner.h's policies)
  // Per bucket, the least and the most reserved bytes after the bucket's events.
  std::vector<std::int64_t> min, max;
  std::uint64_t peak_reserved = 0;  // the policy's peak, also inside an event (>= every max)
  std::uint64_t oom_events = 0;     // allocations that failed; their frees were skipped
  // Pages mapped: cudalloc's paged segments (2 MiB), expandable segments (2 MiB small pool,
  // 20 MiB large); 0 for pytorch.
  std::uint64_t page_maps = 0;
  // peak_reserved / the peak of the bytes live in this replay (without failed allocations).
  double fragmentation = 0;
  std::uint64_t skipped_events = 0;  // inconsistent events skipped (the same for every policy)
};

// `events`: ONE device's trace records in recorded order, every action (alloc,
// free_requested, free_completed, segment..., oom): event i is the device's event i.
// `bucket_first`: the first event index of each bucket, non-decreasing, bucket_first[0] == 0,
// as the viewer's timeline cuts them (bucket k holds events [bucket_first[k],
// bucket_first[k + 1]), the last one up to the end).
// Each policy (cudalloc with `settings`, pytorch, expandable, on a device of `capacity`
// bytes) replays the trace's allocs and free_completed; after every event its reserved bytes
// are folded into the event's bucket (min and max). Bucket 0 also holds the state before the
// first event (0). A bucket without events holds the value carried from the events before it.
// Inconsistent events (a free of an address not live, an alloc at a live one) are skipped and
// counted. Returns false with *error, and *out untouched, when `bucket_first` breaks its
// contract, `events` are of several devices, or a size is malformed (make_plan).
// On success *out holds one curve per policy: cudalloc, pytorch, expandable.
bool replay_curves(const std::vector<snapshot::TraceRecord>& events, const Settings& settings,
                   std::uint64_t capacity, const std::vector<std::uint64_t>& bucket_first,
                   std::vector<ReservedCurve>* out, std::string* error);

}  // namespace cudalloc::replay
