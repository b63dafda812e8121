#include "view/timeline.h"

#include <algorithm>

namespace cudalloc::view {
namespace {

using snapshot::EventKind;
using snapshot::SnapshotEvent;

struct Delta {
  std::int64_t live = 0;
  std::int64_t reserved = 0;
};

Delta delta_of(const SnapshotEvent& e) {
  const auto size = static_cast<std::int64_t>(e.size);
  switch (e.kind) {
    case EventKind::alloc: return {size, 0};
    case EventKind::free_completed: return {-size, 0};
    case EventKind::segment_alloc:
    case EventKind::segment_map: return {0, size};
    case EventKind::segment_free:
    case EventKind::segment_unmap: return {0, -size};
    default: return {};
  }
}

bool is_segment_event(EventKind k) {
  return k == EventKind::segment_alloc || k == EventKind::segment_free ||
         k == EventKind::segment_map || k == EventKind::segment_unmap;
}

// The shift that makes a running sum end at `final_value` (when known) and stay >= 0.
std::int64_t baseline(std::int64_t lowest, std::int64_t last, bool known,
                      std::int64_t final_value) {
  const std::int64_t lift = lowest < 0 ? -lowest : 0;
  return known ? std::max(final_value - last, lift) : lift;
}

// Folds the value after each event into fixed buckets of events, keeping min and max.
class Bucketer {
 public:
  Bucketer(std::uint64_t events, std::size_t max_points)
      : events_(events),
        buckets_(std::max<std::uint64_t>(1, std::min<std::uint64_t>(events, max_points))) {}

  void add(std::uint64_t index, std::int64_t live, std::int64_t reserved, Timeline* t) {
    const std::uint64_t bucket = index * buckets_ / events_;
    if (t->x.empty() || bucket != current_) {
      current_ = bucket;
      t->x.push_back(index);
      t->live_min.push_back(live);
      t->live_max.push_back(live);
      t->reserved_min.push_back(reserved);
      t->reserved_max.push_back(reserved);
      return;
    }
    t->live_min.back() = std::min(t->live_min.back(), live);
    t->live_max.back() = std::max(t->live_max.back(), live);
    t->reserved_min.back() = std::min(t->reserved_min.back(), reserved);
    t->reserved_max.back() = std::max(t->reserved_max.back(), reserved);
  }

 private:
  std::uint64_t events_;
  std::uint64_t buckets_;
  std::uint64_t current_ = 0;
};

}  // namespace

Timeline build_timeline(const std::vector<SnapshotEvent>& events, int device,
                        const FinalState& final_state, std::size_t max_points) {
  Timeline t;
  // First pass: the event count, the lowest and last running sums (for the baseline).
  std::int64_t live = 0, reserved = 0, low_live = 0, low_reserved = 0;
  for (const SnapshotEvent& e : events) {
    if (e.device != device) continue;
    ++t.events;
    const Delta d = delta_of(e);
    live += d.live;
    reserved += d.reserved;
    low_live = std::min(low_live, live);
    low_reserved = std::min(low_reserved, reserved);
    t.has_reserved = t.has_reserved || is_segment_event(e.kind);
  }
  if (t.events == 0) return t;
  t.has_reserved = t.has_reserved || final_state.known;
  live = baseline(low_live, live, final_state.known, final_state.live);
  reserved = baseline(low_reserved, reserved, final_state.known, final_state.reserved);
  t.peak_live = {0, live};
  t.peak_reserved = {0, reserved};
  // Second pass: the running sums, bucketed, and where each peaked.
  Bucketer buckets(t.events, std::max<std::size_t>(2, max_points));
  buckets.add(0, live, reserved, &t);  // the state before the first event, in bucket 0
  std::uint64_t index = 0;
  for (const SnapshotEvent& e : events) {
    if (e.device != device) continue;
    const Delta d = delta_of(e);
    live += d.live;
    reserved += d.reserved;
    if (live > t.peak_live.bytes) t.peak_live = {index, live};
    if (reserved > t.peak_reserved.bytes) t.peak_reserved = {index, reserved};
    buckets.add(index++, live, reserved, &t);
  }
  return t;
}

nlohmann::json timeline_json(const Timeline& t) {
  nlohmann::json j = {{"events", t.events},
                      {"x", t.x},
                      {"live_min", t.live_min},
                      {"live_max", t.live_max},
                      {"peak_live", {{"event", t.peak_live.event}, {"bytes", t.peak_live.bytes}}},
                      {"has_reserved", t.has_reserved}};
  if (t.has_reserved) {
    j["reserved_min"] = t.reserved_min;
    j["reserved_max"] = t.reserved_max;
    j["peak_reserved"] = {{"event", t.peak_reserved.event}, {"bytes", t.peak_reserved.bytes}};
  }
  return j;
}

}  // namespace cudalloc::view
