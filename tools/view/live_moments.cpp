#include "view/live_moments.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "view/flame.h"
#include "view/segment_map.h"
#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;
using snapshot::EventKind;
using snapshot::LoadedSnapshot;

struct Live {
  std::uint64_t size = 0, stream = 0, event = 0;
  std::uint32_t stack = 0;
};

struct Moment {
  const char* label;
  std::uint64_t event;
  std::int64_t live;      // as the timeline counts it
  std::uint64_t request;  // the failed request (out of memory), else 0
};

// The moments in event order: the peak of live memory, then the first `limits.ooms` ooms.
std::vector<Moment> moments_of(const Timeline& t, const MomentLimits& limits) {
  std::vector<Moment> out;
  if (t.events > 0) out.push_back({"peak live", t.peak_live.event, t.peak_live.bytes, 0});
  for (std::size_t i = 0; i < std::min(limits.ooms, t.ooms.size()); ++i) {
    const OomMarker& o = t.ooms[i];
    out.push_back({"out of memory", o.event, o.live, o.size});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Moment& a, const Moment& b) { return a.event < b.event; });
  return out;
}

// A free ends the earliest allocation still live at its address.
void free_one(std::unordered_multimap<std::uint64_t, Live>* live, std::uint64_t address) {
  auto [first, last] = live->equal_range(address);
  auto earliest = first;
  for (auto it = first; it != last; ++it) {
    if (it->second.event < earliest->second.event) earliest = it;
  }
  if (earliest != last) live->erase(earliest);
}

const json* stack_of(const LoadedSnapshot& snap, std::uint32_t id) {
  return id > 0 && id <= snap.stacks.size() ? &snap.stacks[id - 1] : nullptr;
}

json capture(const LoadedSnapshot& snap, const Moment& m,
             const std::unordered_multimap<std::uint64_t, Live>& live, const MomentLimits& limits) {
  std::vector<std::pair<std::uint64_t, const Live*>> all;
  all.reserve(live.size());
  std::vector<FlameInput> flame;
  flame.reserve(live.size());
  std::uint64_t seen = 0;
  for (const auto& [address, a] : live) {
    all.emplace_back(address, &a);
    flame.push_back({a.size, stack_of(snap, a.stack)});
    seen += a.size;
  }
  const std::size_t n = std::min(limits.top, all.size());
  std::partial_sort(all.begin(), all.begin() + std::ptrdiff_t(n), all.end(),
                    [](const auto& x, const auto& y) {
                      return x.second->size != y.second->size ? x.second->size > y.second->size
                                                              : x.first < y.first;
                    });
  json top = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const Live& a = *all[i].second;
    const json* frames = stack_of(snap, a.stack);
    top.push_back({{"address", hex_address(all[i].first)},
                   {"size", a.size},
                   {"stream", hex_address(a.stream)},
                   {"event", a.event},
                   {"site", frames ? frames_site(*frames, 1) : ""}});
  }
  const std::uint64_t before = m.live > std::int64_t(seen) ? std::uint64_t(m.live) - seen : 0;
  json out = {{"label", m.label}, {"event", m.event}, {"live", m.live}, {"seen", seen},
              {"allocations", live.size()}, {"top", std::move(top)},
              {"flame", flame_json(flame, before)}};
  if (std::string(m.label) == "out of memory") out["request"] = m.request;
  return out;
}

}  // namespace

json live_moments_json(const LoadedSnapshot& snap, int device, const Timeline& timeline,
                       const MomentLimits& limits) {
  const std::vector<Moment> moments = moments_of(timeline, limits);
  json out = json::array();
  // By address; a cut trace may alloc again at an address it never saw freed, and the
  // timeline then counts both allocations, so both stay live here too.
  std::unordered_multimap<std::uint64_t, Live> live;
  std::size_t next = 0;
  std::uint64_t index = 0;
  for (const auto& e : snap.events) {
    if (next == moments.size()) break;
    if (e.device != device) continue;
    if (e.kind == EventKind::alloc) live.emplace(e.addr, Live{e.size, e.stream, index, e.stack});
    if (e.kind == EventKind::free_completed) free_one(&live, e.addr);
    // A moment's event is the one after which the state is taken (timeline.h).
    while (next < moments.size() && moments[next].event == index) {
      out.push_back(capture(snap, moments[next++], live, limits));
    }
    ++index;
  }
  return out;
}

json snapshot_flame_json(const std::vector<const json*>& segments) {
  std::vector<FlameInput> flame;
  for (const json* seg : segments) {
    auto blocks = seg->find("blocks");
    if (blocks == seg->end() || !blocks->is_array()) continue;
    for (const json& b : *blocks) {
      if (!b.is_object() || b.value("state", "") == "inactive") continue;
      auto frames = b.find("frames");
      flame.push_back({u64(b, "size"), frames != b.end() ? &*frames : nullptr});
    }
  }
  return flame_json(flame, 0);
}

}  // namespace cudalloc::view
