// How memory evolved, allocation by allocation: the largest allocations of the trace as bands
// over the events they lived through, for the page to stack as PyTorch's memory_viz draws its
// active-memory timeline (older allocations lower; a band drops when one beneath it ends).
//
// An allocation lives from its alloc to its free_completed (the timeline's live, timeline.h);
// one still live at the end of the trace, or freed by an event never seen, ends at "events".
// Only the `max_bands` of the largest area (bytes times events lived; ties: the earlier) are
// kept: the others are the gap between the bands and the live curve. One pass, O(events log max_bands), memory bounded by what is
// live at once plus max_bands.
//
// {"events": device events, "allocations": allocs seen, "bands": [{"from", "to", "size",
//  "address", "stream", "site"}] in order of "from"}
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::view {

nlohmann::json allocation_bands_json(const snapshot::LoadedSnapshot& snap, int device,
                                     std::size_t max_bands);

}  // namespace cudalloc::view
