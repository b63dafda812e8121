// Whether one device's trace holds every event since recording began, and if not, how much
// is missing. Both allocators keep the trace in a ring buffer that overwrites its oldest
// events once full: cudalloc's trace:N, PyTorch's _record_memory_history(max_entries=N).
// cudalloc's snapshot says how many it dropped ("trace_dropped" of cudalloc.devices[]);
// PyTorch's says nothing, and a trace cut that way shows itself by freeing blocks it never
// saw allocated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "snapshot/snapshot_loader.h"

namespace cudalloc::view {

struct TraceCompleteness {
  std::uint64_t kept = 0;          // the device's events in the snapshot
  bool dropped_known = false;      // the snapshot counts the events it dropped
  std::uint64_t dropped = 0;       // events the ring buffer overwrote (when known)
  std::uint64_t capacity = 0;      // the ring's size (trace:N); 0 when the snapshot lacks it
  std::uint64_t unseen_frees = 0;  // free_completed events of blocks never allocated in it
  bool complete() const { return dropped == 0 && unseen_frees == 0; }
};

// `device_info`: the device's entry of cudalloc.devices[] (or null); `capacity`: the trace
// setting (0 when unknown).
TraceCompleteness trace_completeness(const std::vector<snapshot::SnapshotEvent>& events,
                                     int device, const nlohmann::json* device_info,
                                     std::uint64_t capacity);

// The trace setting of a snapshot written by cudalloc (cudalloc.settings.trace), or 0.
std::uint64_t trace_capacity(const nlohmann::json& doc);

// One sentence for people, "" when the trace is complete: what is missing and why.
std::string trace_note(const TraceCompleteness& c);

// {kept, dropped (null when unknown), capacity, unseen_frees, complete, note}
nlohmann::json trace_completeness_json(const TraceCompleteness& c);

}  // namespace cudalloc::view
