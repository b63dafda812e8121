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

// Live and reserved memory after each event: live by the events' sizes; reserved by the
// recorded reserved_bytes where an event has it, else by the sizes of segment events.
struct Running {
  std::int64_t live = 0, reserved = 0;
  void apply(const SnapshotEvent& e) {
    const Delta d = delta_of(e);
    live += d.live;
    reserved = e.reserved >= 0 ? e.reserved : reserved + d.reserved;
  }
};

// Reserved memory before the first event of a trace that records it: the first value less
// what that event itself reserved (0 for a trace that starts with the first segment).
std::int64_t recorded_start(const SnapshotEvent& first) {
  return std::max<std::int64_t>(0, first.reserved - delta_of(first).reserved);
}

// What the first pass learns: the event count, the lowest and last running sums (for the
// baselines) and where reserved memory comes from.
struct FirstPass {
  std::uint64_t events = 0;
  bool segment_events = false, recorded = false;
  std::int64_t low_live = 0, low_reserved = 0;
  Running last;
  std::int64_t start_reserved = 0;  // before the first event, when recorded
};

FirstPass first_pass(const std::vector<SnapshotEvent>& events, int device) {
  FirstPass p;
  for (const SnapshotEvent& e : events) {
    if (e.device != device) continue;
    if (p.events++ == 0 && e.reserved >= 0) {
      p.recorded = true;
      p.start_reserved = recorded_start(e);
    }
    p.last.apply(e);
    p.low_live = std::min(p.low_live, p.last.live);
    p.low_reserved = std::min(p.low_reserved, p.last.reserved);
    p.segment_events = p.segment_events || is_segment_event(e.kind);
  }
  return p;
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
      t->maps.push_back(0);
      t->unmaps.push_back(0);
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
  const FirstPass first = first_pass(events, device);
  t.events = first.events;
  if (t.events == 0) return t;
  t.reserved_recorded = first.recorded;
  t.has_reserved = first.segment_events || first.recorded || final_state.known;
  Running now;
  now.live = baseline(first.low_live, first.last.live, final_state.known, final_state.live);
  now.reserved = first.recorded ? first.start_reserved
                                : baseline(first.low_reserved, first.last.reserved,
                                           final_state.known, final_state.reserved);
  t.peak_live = {0, now.live};
  t.peak_reserved = {0, now.reserved};
  // Second pass: the running sums, bucketed, where each peaked, and the state at each oom.
  Bucketer buckets(t.events, std::max<std::size_t>(2, max_points));
  buckets.add(0, now.live, now.reserved, &t);  // the state before the first event, in bucket 0
  std::uint64_t index = 0;
  for (const SnapshotEvent& e : events) {
    if (e.device != device) continue;
    now.apply(e);
    if (now.live > t.peak_live.bytes) t.peak_live = {index, now.live};
    if (now.reserved > t.peak_reserved.bytes) t.peak_reserved = {index, now.reserved};
    if (e.kind == EventKind::oom) t.ooms.push_back({index, e.size, e.addr, now.live, now.reserved});
    buckets.add(index++, now.live, now.reserved, &t);
    if (e.kind == EventKind::segment_map) ++t.maps.back();
    if (e.kind == EventKind::segment_unmap) ++t.unmaps.back();
  }
  return t;
}

nlohmann::json oom_json(const OomMarker& oom) {
  return {{"event", oom.event},
          {"size", oom.size},
          {"device_free", oom.device_free},
          {"live", oom.live},
          {"reserved", oom.reserved}};
}

// The page marks at most this many oom events; the count says how many there were.
constexpr std::size_t kOomsDrawn = 1000;

nlohmann::json timeline_json(const Timeline& t) {
  nlohmann::json ooms = nlohmann::json::array();
  for (std::size_t i = 0; i < std::min(kOomsDrawn, t.ooms.size()); ++i) {
    ooms.push_back(oom_json(t.ooms[i]));
  }
  nlohmann::json j = {{"events", t.events},
                      {"x", t.x},
                      {"live_min", t.live_min},
                      {"live_max", t.live_max},
                      {"peak_live", {{"event", t.peak_live.event}, {"bytes", t.peak_live.bytes}}},
                      {"has_reserved", t.has_reserved},
                      {"reserved_recorded", t.reserved_recorded},
                      {"ooms", std::move(ooms)},
                      {"maps", t.maps},
                      {"unmaps", t.unmaps},
                      {"oom_count", t.ooms.size()}};
  if (t.has_reserved) {
    j["reserved_min"] = t.reserved_min;
    j["reserved_max"] = t.reserved_max;
    j["peak_reserved"] = {{"event", t.peak_reserved.event}, {"bytes", t.peak_reserved.bytes}};
  }
  return j;
}

}  // namespace cudalloc::view
