// What held memory at the moments a person debugging an out-of-memory asks about: the peak of
// live memory and each failed allocation. For each moment, the largest live allocations (with
// where they were allocated, when the trace recorded frames) and the flame summary of all of
// them (flame.h).
//
// Live allocations are rebuilt from the trace: an alloc makes its address live, its
// free_completed ends it (the timeline's definition of live, timeline.h). A trace cut from a
// ring buffer did not see allocations made before its first event: at a moment, the
// timeline's live bytes less those the trace saw are "allocated before the trace began".
//
// [{"label": "peak live" | "out of memory", "event", "live" (the timeline's), "seen" (bytes of
//   the allocations the trace saw), "allocations" (their count), "request" (oom: bytes asked),
//   "top": [{"address", "size", "stream", "event" (of its alloc), "site"}], "flame"}]
// One pass over the device's events; each moment costs time linear in what is live then.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "snapshot/snapshot_loader.h"
#include "view/timeline.h"

namespace cudalloc::view {

struct MomentLimits {
  std::size_t top = 20;   // largest allocations listed per moment
  std::size_t ooms = 50;  // out-of-memory moments kept (the first ones)
};

nlohmann::json live_moments_json(const snapshot::LoadedSnapshot& snap, int device,
                                 const Timeline& timeline, const MomentLimits& limits = {});

// The flame summary of the snapshot's own live blocks (their "frames", when recorded).
nlohmann::json snapshot_flame_json(const std::vector<const nlohmann::json*>& segments);

}  // namespace cudalloc::view
