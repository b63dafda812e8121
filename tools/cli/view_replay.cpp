#include "cli/view_replay.h"

#include <vector>

#include "core/settings.h"
#include "replay/curves.h"

namespace cudalloc::cli {
namespace {

using nlohmann::json;
using snapshot::EventKind;

// The trace action of a loaded event. Actions the tools do not interpret become
// free_requested, which the replay ignores like them, so event i stays the device's event i.
TraceAction action_of(EventKind kind) {
  switch (kind) {
    case EventKind::alloc: return TraceAction::alloc;
    case EventKind::free_completed: return TraceAction::free_completed;
    case EventKind::segment_alloc: return TraceAction::segment_alloc;
    case EventKind::segment_free: return TraceAction::segment_free;
    case EventKind::segment_map: return TraceAction::segment_map;
    case EventKind::segment_unmap: return TraceAction::segment_unmap;
    case EventKind::oom: return TraceAction::oom;
    default: return TraceAction::free_requested;
  }
}

std::vector<snapshot::TraceRecord> device_records(const snapshot::LoadedSnapshot& snap,
                                                  int device) {
  std::vector<snapshot::TraceRecord> out;
  for (const auto& e : snap.events) {
    if (e.device == device) out.push_back({action_of(e.kind), e.addr, e.size, e.stream, device});
  }
  return out;
}

json curve_json(const replay::ReservedCurve& c) {
  return {{"policy", c.policy}, {"min", c.min}, {"max", c.max},
          {"peak_reserved", c.peak_reserved}, {"fragmentation", c.fragmentation},
          {"oom_events", c.oom_events}, {"page_maps", c.page_maps}};
}

}  // namespace

bool add_replayed_curves(const snapshot::LoadedSnapshot& snap, json* model, std::string* error) {
  for (json& device : (*model)["devices"]) {
    json& timeline = device["timeline"];
    if (timeline.value("events", 0) == 0) continue;
    const auto records = device_records(snap, device["device"].get<int>());
    const auto buckets = timeline["x"].get<std::vector<std::uint64_t>>();
    std::vector<replay::ReservedCurve> curves;
    if (!replay::replay_curves(records, Settings{}, kReplayCapacity, buckets, &curves, error)) {
      return false;
    }
    timeline["replay"] = json::array();
    for (const auto& c : curves) timeline["replay"].push_back(curve_json(c));
  }
  return true;
}

}  // namespace cudalloc::cli
