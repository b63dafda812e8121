#include "view/event_history.h"

#include <algorithm>
#include <map>

#include "view/segment_map.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;
using snapshot::EventKind;
using snapshot::SnapshotEvent;

static_assert(static_cast<int>(EventKind::alloc) == 0 &&
                  static_cast<int>(EventKind::segment_unmap) == 6 &&
                  static_cast<int>(EventKind::oom) == 7 && static_cast<int>(EventKind::other) == 8,
              "the kind codes of event_history.h");

// The largest integer a JavaScript number holds exactly, and every one below it.
constexpr std::uint64_t kExactInScript = std::uint64_t{1} << 53;

bool has_address(const SnapshotEvent& e) {
  return e.kind != EventKind::oom && e.kind != EventKind::other;
}

// Pointers to the device's last `max_events` events, oldest first.
std::vector<const SnapshotEvent*> last_events(const std::vector<SnapshotEvent>& events,
                                              int device, std::size_t max_events,
                                              std::uint64_t* device_events) {
  std::vector<const SnapshotEvent*> out;
  *device_events = 0;
  for (const SnapshotEvent& e : events) {
    if (e.device == device) ++*device_events;
  }
  const std::uint64_t skip = *device_events > max_events ? *device_events - max_events : 0;
  std::uint64_t seen = 0;
  for (const SnapshotEvent& e : events) {
    if (e.device == device && seen++ >= skip) out.push_back(&e);
  }
  return out;
}

// The first kept event from which on every address lies within kExactInScript of the lowest:
// scanned from the newest event back, as the newest events matter most.
std::size_t exact_start(const std::vector<const SnapshotEvent*>& kept, std::uint64_t* base) {
  std::uint64_t lo = UINT64_MAX, hi = 0;
  std::size_t start = kept.size();
  while (start > 0) {
    const SnapshotEvent& e = *kept[start - 1];
    if (has_address(e)) {
      const std::uint64_t new_lo = std::min(lo, e.addr), new_hi = std::max(hi, e.addr + e.size);
      if (new_hi - new_lo >= kExactInScript) break;
      lo = new_lo;
      hi = new_hi;
    }
    --start;
  }
  *base = lo == UINT64_MAX ? 0 : lo;
  return start;
}

}  // namespace

json event_history_json(const std::vector<SnapshotEvent>& events, int device,
                        std::size_t max_events) {
  std::uint64_t device_events = 0, base = 0;
  const std::vector<const SnapshotEvent*> kept =
      last_events(events, device, max_events, &device_events);
  const std::size_t start = exact_start(kept, &base);
  json kinds = json::array(), offsets = json::array(), sizes = json::array();
  json streams = json::array(), stream_names = json::array();
  std::map<std::uint64_t, std::size_t> stream_index;
  for (std::size_t i = start; i < kept.size(); ++i) {
    const SnapshotEvent& e = *kept[i];
    kinds.push_back(static_cast<int>(e.kind));
    offsets.push_back(has_address(e) ? e.addr - base : 0);
    sizes.push_back(e.size);
    auto [it, added] = stream_index.emplace(e.stream, stream_index.size());
    if (added) stream_names.push_back(hex_address(e.stream));
    streams.push_back(it->second);
  }
  return {{"first", device_events - (kept.size() - start)},
          {"count", kept.size() - start},
          {"base", hex_address(base)},
          {"kind", std::move(kinds)},
          {"offset", std::move(offsets)},
          {"size", std::move(sizes)},
          {"stream", std::move(streams)},
          {"streams", std::move(stream_names)}};
}

}  // namespace cudalloc::view
