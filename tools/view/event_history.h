// The last events of one device, in a compact form for the page's script. With them the page
// rewinds the snapshot's blocks to any event of the window (the segment map at event N) and
// lists what happened at an address (alloc, free requested, free completed: the history of
// the allocation found by an address search).
//
// {"first": the device-event index of the first event kept, "count": events kept,
//  "base": "0x..." (the lowest address among them),
//  "kind": [EventKind codes: 0 alloc, 1 free_requested, 2 free_completed, 3 segment_alloc,
//           4 segment_free, 5 segment_map, 6 segment_unmap, 7 oom, 8 other],
//  "offset": [address - base, a number the script holds exactly; 0 for oom and other],
//  "size": [bytes], "stream": [index into "streams"], "streams": ["0x..."]}
// Event i of the lists is event first + i of the device, the timeline's x.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::view {

// The last `max_events` events of `device` (all of them when fewer). Addresses that lie
// further than 2^53 bytes apart cannot be offsets the script holds exactly: the window then
// starts after the last event that would need one.
nlohmann::json event_history_json(const std::vector<snapshot::SnapshotEvent>& events,
                                  int device, std::size_t max_events);

}  // namespace cudalloc::view
