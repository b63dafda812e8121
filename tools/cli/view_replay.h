// The trace of a snapshot replayed under PyTorch's native rules, its expandable segments and
// cudalloc's default settings, as reserved-memory curves on the timeline's buckets, for
// `cudalloc view` (viewer_timeline.js draws them as dashed lines beside the trace's own).
// Each policy runs on a simulated device of kReplayCapacity, so nothing fails for lack of
// memory; inconsistent events of a cut trace are skipped by the replay.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::cli {

constexpr std::uint64_t kReplayCapacity = std::uint64_t{1} << 40;

// Adds "replay": [{"policy", "min", "max", "peak_reserved", "fragmentation", "oom_events",
// "page_maps"}] to each device's timeline in `model` (view_model's). False with *error when a
// replay refuses the trace (a malformed size); the model is then unchanged for that device.
bool add_replayed_curves(const snapshot::LoadedSnapshot& snap, nlohmann::json* model,
                         std::string* error);

}  // namespace cudalloc::cli
