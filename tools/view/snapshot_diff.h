// What changed between two snapshots (`cudalloc diff A B`), per device:
//   stats     reserved, allocated, active, requested, cached bytes and segment, allocation
//             and free-block counts, from the segments: {before, after, delta}; and every
//             counter of cudalloc's own stats ("current") when both snapshots carry them
//   segments  added, removed and resized (same address, other size)
//   blocks    allocated blocks new in B ("allocated") or gone from A ("freed"), by address
//             and size; a block whose size changed counts as freed and allocated
// Every list is sorted by the bytes changed, largest first.
#pragma once

#include <nlohmann/json.hpp>

namespace cudalloc::view {

// `before` and `after` are snapshot documents (their traces are not compared).
// Returns {"devices": [{"device", "stats", "segments": {added, removed, resized},
//          "blocks": {allocated, freed}}]}.
nlohmann::json snapshot_diff(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace cudalloc::view
