// Live and reserved memory of one device over its trace, downsampled for drawing, with the
// trace's out-of-memory events.
//
// live     = sum of alloc sizes minus free_completed sizes (a block whose free waits for
//            stream events still holds its memory)
// reserved = what cudalloc's stats call reserved_bytes: device memory held from the driver,
//            each physical page once, the host tier not in it. cudalloc records it on every
//            trace event ("reserved_bytes"), and the timeline takes it from there. Events
//            without it (PyTorch's traces) count segment_alloc + segment_map minus
//            segment_free + segment_unmap, which is the same figure where every mapping has
//            physical memory of its own, as in PyTorch's expandable segments.
// The x axis is the event index. Each of at most `max_points` buckets keeps the minimum and
// the maximum reached inside it, so no peak is lost to the downsampling.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::view {

// The memory held when the snapshot was taken, which the trace ends at. A trace cut from a
// ring buffer starts mid-run: its running sums are shifted so that they end at these values
// (when the snapshot has segments) and never go below zero. Recorded reserved_bytes are
// never shifted: they are what the allocator counted.
struct FinalState {
  bool known = false;
  std::int64_t live = 0;
  std::int64_t reserved = 0;
};

struct TimelinePeak {
  std::uint64_t event = 0;  // index of the event after which the peak was reached
  std::int64_t bytes = 0;
};

// An allocation that failed for lack of memory, and the state when it did.
struct OomMarker {
  std::uint64_t event = 0;        // index among the device's events
  std::uint64_t size = 0;         // the request that failed
  std::uint64_t device_free = 0;  // the device's free memory then, as the trace recorded it
  std::int64_t live = 0, reserved = 0;
};

struct Timeline {
  std::uint64_t events = 0;      // events of this device (every action)
  bool has_reserved = false;     // the trace has segment events or reserved_bytes, or the
                                 // final state is known
  bool reserved_recorded = false;  // reserved comes from the events' reserved_bytes
  std::vector<std::uint64_t> x;  // first event index of each bucket
  std::vector<std::int64_t> live_min, live_max, reserved_min, reserved_max;
  // Page maps and unmaps (segment_map, segment_unmap events) in each bucket.
  std::vector<std::uint32_t> maps, unmaps;
  TimelinePeak peak_live, peak_reserved;
  std::vector<OomMarker> ooms;   // every oom event, in order
};

// `events` of every device; only those of `device` are used. max_points >= 2.
Timeline build_timeline(const std::vector<snapshot::SnapshotEvent>& events, int device,
                        const FinalState& final_state, std::size_t max_points);

nlohmann::json timeline_json(const Timeline& t);
nlohmann::json oom_json(const OomMarker& oom);

}  // namespace cudalloc::view
