// Snapshots in PyTorch's memory-snapshot schema (torch.cuda.memory._snapshot()), as JSON:
//   segments[]       one per segment, with its blocks (slab objects appear as blocks)
//   device_traces[]  one list per device of {action, addr, size, stream, time_us, frames},
//                    and reserved_bytes (the device's reserved_bytes stat once the event
//                    happened; PyTorch's tools ignore it); oom events add device_free
//   allocator_settings
//   cudalloc         what the schema cannot say: schema version, library version, settings,
//                    per-device stats, caps, slabs, dropped trace events
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/state.h"

namespace cudalloc::snapshot {

constexpr int kSchemaVersion = 1;

nlohmann::json snapshot_json(const std::vector<DeviceState>& devices, const std::string& conf);

// "%p" in `path` replaced by the process id.
std::string expand_path(const std::string& path);

}  // namespace cudalloc::snapshot
