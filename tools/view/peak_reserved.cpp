#include "view/peak_reserved.h"

#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;

// The stats object of a cudalloc device entry, or null.
const json* stats_of(const json* device_info) {
  if (device_info == nullptr) return nullptr;
  auto it = device_info->find("stats");
  return it != device_info->end() && it->is_object() ? &*it : nullptr;
}

// stats[name].peak of cudalloc's stats, or 0.
std::uint64_t stat_peak(const json& stats, const char* name) {
  auto it = stats.find(name);
  return it != stats.end() && it->is_object() ? u64(*it, "peak") : 0;
}

}  // namespace

DevicePeaks device_peaks(const Timeline& timeline, const json* device_info) {
  DevicePeaks p;
  if (const json* stats = stats_of(device_info); stats != nullptr) {
    p.source = "cudalloc stats";
    p.reserved = stat_peak(*stats, "reserved_bytes");
    p.live = stat_peak(*stats, "active_bytes");
  } else if (timeline.events > 0 && timeline.has_reserved) {
    p.source = "trace";
    p.reserved = std::uint64_t(timeline.peak_reserved.bytes);
    p.live = std::uint64_t(timeline.peak_live.bytes);
  }
  return p;
}

}  // namespace cudalloc::view
