// Snapshots in PyTorch's memory-snapshot schema (torch.cuda.memory._snapshot()), as JSON:
//   segments[]       one per segment, with its blocks (slab objects appear as blocks) and,
//                    for paged segments, its pages as runs of one state (mapped, location)
//   device_traces[]  one list per device of {action, addr, size, stream, time_us, frames},
//                    and reserved_bytes (the device's reserved_bytes stat once the event
//                    happened; PyTorch's tools ignore it); oom events add device_free
//   allocator_settings
//   cudalloc         what the schema cannot say: schema version, library version, settings,
//                    per-device stats, caps, slabs, dropped trace events
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/state.h"

namespace cudalloc::snapshot {

constexpr int kSchemaVersion = 1;

nlohmann::json snapshot_json(const std::vector<DeviceState>& devices, const std::string& conf);

// "%p" in `path` replaced by the process id; any other "%" is kept as written.
std::string expand_path(const std::string& path);

// The file of out-of-memory snapshot number `sequence` (1, 2, ... in this process) for the
// snapshot_on_oom setting `path`: "%p" is the process id and "%n" the sequence number. A path
// without "%n" names the first snapshot as written (after %p) and snapshot N > 1 with ".N"
// inserted before the file name's extension: its last ".xxx", or its last two when the last
// is ".gz" (oom.json -> oom.2.json, oom.json.gz -> oom.2.json.gz, oom -> oom.2; a leading dot
// starts no extension). Distinct sequence numbers give distinct names.
std::string oom_snapshot_path(const std::string& path, std::uint64_t sequence);
// Another name for an out-of-memory snapshot whose file `path` (from oom_snapshot_path) exists
// already, written by another process or library with the same setting (several ranks of one
// job, say): attempt 1 inserts ".pPID" before the extension, attempt k > 1 ".pPID-k"
// (oom.json -> oom.p4242.json -> oom.p4242-2.json). A snapshot file is never replaced.
std::string oom_snapshot_fallback(const std::string& path, long pid, int attempt);

}  // namespace cudalloc::snapshot
