// What `cudalloc view` shows, computed from a loaded snapshot: per device a summary, the
// segment map, the timeline (with its out-of-memory events), the largest allocations,
// fragmentation figures, whether the trace is complete, and the last events (for the map at
// event N and address search); and the allocator's settings. The page's script only draws this model; it computes nothing that
// needs the whole trace.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::view {

struct ViewLimits {
  std::size_t timeline_points = 4000;  // buckets of the timeline (each keeps min and max)
  std::size_t blocks = 20000;          // blocks drawn per device before merging runs
  std::size_t top_allocations = 20;
  std::size_t history_events = 100000;  // last events per device the page can rewind through
  std::size_t bands = 1000;  // allocations drawn as bands over the trace (the largest areas)
};

// `source` names the snapshot in the page (its path).
nlohmann::json view_model(const snapshot::LoadedSnapshot& snap, const std::string& source,
                          const ViewLimits& limits = {});

}  // namespace cudalloc::view
