#include "view/view_model.h"

#include <algorithm>
#include <map>
#include <set>

#include "api/options.h"
#include "view/bands.h"
#include "view/event_history.h"
#include "view/live_moments.h"
#include "view/peak_reserved.h"
#include "view/segment_map.h"
#include "view/snapshot_fields.h"
#include "view/timeline.h"
#include "view/trace_completeness.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;

SlabRanges slab_ranges(const json* device_info) {
  SlabRanges out;
  if (device_info == nullptr || !device_info->contains("slabs") ||
      !(*device_info)["slabs"].is_array()) {
    return out;
  }
  for (const json& s : (*device_info)["slabs"]) {
    if (s.is_object()) out.emplace_back(u64(s, "address"), u64(s, "address") + u64(s, "bytes"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Summary {
  std::uint64_t reserved = 0, host = 0, allocated = 0, active = 0, requested = 0;
  std::uint64_t free_bytes = 0, free_blocks = 0, largest_free = 0;
  std::uint64_t allocations = 0, pending_blocks = 0;  // blocks allocated / waiting for events
};

Summary summarize(const std::vector<const json*>& segments) {
  Summary s;
  for (const json* seg : segments) {
    s.reserved += segment_device_bytes(*seg);
    s.host += segment_host_bytes(*seg);
    s.allocated += u64(*seg, "allocated_size");
    s.active += u64(*seg, "active_size");
    s.requested += u64(*seg, "requested_size");
    for (const json& b : seg->value("blocks", json::array())) {
      if (!b.is_object()) continue;
      const std::string state = b.value("state", "");
      if (state != "inactive") {
        ++(state == "active_pending_free" ? s.pending_blocks : s.allocations);
        continue;
      }
      ++s.free_blocks;
      s.free_bytes += u64(b, "size");
      s.largest_free = std::max(s.largest_free, u64(b, "size"));
    }
  }
  return s;
}

json summary_json(const Summary& s, std::size_t segments) {
  return {{"segments", segments},
          {"reserved", s.reserved},
          {"host_reserved", s.host},
          {"allocated", s.allocated},
          {"active", s.active},
          {"requested", s.requested},
          // As cudalloc's stats define it: memory held (device and host tier) under no
          // active allocation.
          {"cached", s.reserved + s.host > s.active ? s.reserved + s.host - s.active : 0},
          {"reserved_unallocated",
           s.reserved + s.host > s.allocated ? s.reserved + s.host - s.allocated : 0},
          {"allocations", s.allocations},
          {"pending_blocks", s.pending_blocks},
          {"free_blocks", s.free_blocks},
          {"free_bytes", s.free_bytes},
          {"largest_free_block", s.largest_free}};
}

json top_allocations(const std::vector<const json*>& segments, const SlabRanges& slabs,
                     std::size_t top) {
  struct Row {
    std::uint64_t size, address, requested, segment, stream;
    int state;
    const json* block;
  };
  std::vector<Row> rows;
  for (const json* seg : segments) {
    auto blocks = seg->find("blocks");  // by reference: rows keep pointers to blocks
    if (blocks == seg->end() || !blocks->is_array()) continue;
    for (const json& b : *blocks) {
      if (!b.is_object() || b.value("state", "") == "inactive") continue;
      rows.push_back({u64(b, "size"), u64(b, "address"), u64(b, "requested_size"),
                      u64(*seg, "address"), u64(*seg, "stream"),
                      block_state_code(b.value("state", ""), u64(b, "address"), slabs), &b});
    }
  }
  const std::size_t n = std::min(top, rows.size());
  std::partial_sort(rows.begin(), rows.begin() + std::ptrdiff_t(n), rows.end(),
                    [](const Row& a, const Row& b) { return a.size > b.size; });
  json out = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const Row& r = rows[i];
    out.push_back({{"address", hex_address(r.address)},
                   {"size", r.size},
                   {"requested", r.requested},
                   {"segment", hex_address(r.segment)},
                   {"stream", hex_address(r.stream)},
                   {"state", r.state},
                   {"site", allocation_site(*r.block, 1)}});
  }
  return out;
}

// Peak reserved over peak live (peak_reserved.h), and the free memory now.
json fragmentation(const Timeline& t, const Summary& s, const json* device_info) {
  json f = {{"reserved_unallocated_now", s.reserved > s.allocated ? s.reserved - s.allocated : 0},
            {"cached_now", s.reserved > s.active ? s.reserved - s.active : 0},
            {"largest_free_block", s.largest_free},
            {"free_bytes", s.free_bytes}};
  const DevicePeaks peaks = device_peaks(t, device_info);
  if (peaks.known()) {
    f["peak_reserved"] = peaks.reserved;
    f["peak_live"] = peaks.live;
    f["peak_source"] = peaks.source;
    if (peaks.live > 0) f["peak_ratio"] = double(peaks.reserved) / double(peaks.live);
  }
  return f;
}

json device_json(const snapshot::LoadedSnapshot& snap, int device,
                 const std::vector<const json*>& segments, const ViewLimits& limits) {
  const json* info = cudalloc_device_info(snap.doc, device);
  const SlabRanges slabs = slab_ranges(info);
  const Summary summary = summarize(segments);
  FinalState final_state{!segments.empty(), std::int64_t(summary.active),
                         std::int64_t(summary.reserved)};
  const Timeline timeline =
      build_timeline(snap.events, device, final_state, limits.timeline_points);
  const TraceCompleteness trace =
      trace_completeness(snap.events, device, info, trace_capacity(snap.doc));
  return {{"device", device},
          {"summary", summary_json(summary, segments.size())},
          {"map", segment_map_json(segments, slabs, limits.blocks)},
          {"timeline", timeline_json(timeline)},
          {"trace", trace_completeness_json(trace)},
          {"history", event_history_json(snap.events, device, limits.history_events)},
          {"top_allocations", top_allocations(segments, slabs, limits.top_allocations)},
          {"snapshot_flame", snapshot_flame_json(segments)},
          {"moments", live_moments_json(snap, device, timeline, {limits.top_allocations})},
          {"bands", allocation_bands_json(snap, device, limits.bands)},
          {"fragmentation", fragmentation(timeline, summary, info)}};
}

// A setting's value as a person reads it: a cudalloc option's value through the options
// table (its set() reads the recorded value, its get() writes it as `cudalloc options` does:
// sizes in binary units); anything else, or a value the table refuses, as recorded.
std::string shown_value(const std::string& key, const json& value) {
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  for (const Option& o : options()) {
    if (key != o.key) continue;
    Settings settings;
    std::string why;
    return o.set(settings, text, &why) ? o.get(settings) : text;
  }
  return text;
}

// One table for the page: every cudalloc setting, then what PyTorch's allocator_settings hold
// beyond them (a PyTorch snapshot has only those; cudalloc's repeats its own settings there).
// [{"key", "value" (as recorded), "shown" (human units), "source": "cudalloc"|"allocator_settings"}]
json settings_rows(const json& doc) {
  json rows = json::array();
  std::set<std::string> seen;
  auto add = [&](const json& object, const char* source) {
    if (!object.is_object()) return;
    for (const auto& [key, value] : object.items()) {
      if (!seen.insert(key).second) continue;
      rows.push_back({{"key", key}, {"value", value}, {"shown", shown_value(key, value)},
                      {"source", source}});
    }
  };
  auto c = doc.find("cudalloc");
  if (c != doc.end() && c->is_object() && c->contains("settings")) add((*c)["settings"], "cudalloc");
  if (auto s = doc.find("allocator_settings"); s != doc.end()) add(*s, "allocator_settings");
  return rows;
}

json settings_json(const json& doc) {
  json out = {{"rows", settings_rows(doc)}};
  auto c = doc.find("cudalloc");
  if (c != doc.end() && c->is_object()) {
    for (const char* key : {"version", "schema_version", "conf"}) {
      if (c->contains(key)) out["cudalloc"][key] = (*c)[key];
    }
  }
  return out;
}

}  // namespace

json view_model(const snapshot::LoadedSnapshot& snap, const std::string& source,
                const ViewLimits& limits) {
  std::map<int, std::vector<const json*>> by_device;  // pointers into snap.doc
  auto segments = snap.doc.find("segments");
  if (segments != snap.doc.end() && segments->is_array()) {
    for (const json& seg : *segments) {
      if (seg.is_object()) by_device[seg.value("device", 0)].push_back(&seg);
    }
  }
  std::set<int> devices;
  for (const auto& entry : by_device) devices.insert(entry.first);
  for (const auto& e : snap.events) devices.insert(e.device);
  for (auto& [device, segs] : by_device) {
    std::sort(segs.begin(), segs.end(),
              [](const json* a, const json* b) { return u64(*a, "address") < u64(*b, "address"); });
  }
  json out = {{"source", source},
              {"format", snap.format},
              {"trace_events", snap.events.size()},
              {"settings", settings_json(snap.doc)},
              {"devices", json::array()}};
  if (auto meta = snap.doc.find("meta"); meta != snap.doc.end()) out["meta"] = *meta;
  // Written by snapshot_on_oom: the request that failed (docs/snapshots.md).
  if (auto c = snap.doc.find("cudalloc"); c != snap.doc.end() && c->is_object() &&
                                          c->contains("oom") && (*c)["oom"].is_object()) {
    out["written_at_oom"] = (*c)["oom"];
  }
  for (int device : devices) {
    out["devices"].push_back(device_json(snap, device, by_device[device], limits));
  }
  return out;
}

}  // namespace cudalloc::view
