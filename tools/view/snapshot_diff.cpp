#include "view/snapshot_diff.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "view/segment_map.h"
#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;

std::int64_t signed_delta(std::uint64_t before, std::uint64_t after) {
  return static_cast<std::int64_t>(after) - static_cast<std::int64_t>(before);
}

// One device of one snapshot: its segments by address and its allocated blocks.
struct DeviceView {
  std::map<std::uint64_t, const json*> segments;
  std::set<std::pair<std::uint64_t, std::uint64_t>> blocks;  // (address, size), allocated
  std::map<std::string, std::uint64_t> figures;
};

std::map<int, DeviceView> device_views(const json& doc) {
  std::map<int, DeviceView> out;
  auto segments = doc.find("segments");
  if (segments == doc.end() || !segments->is_array()) return out;
  for (const json& seg : *segments) {
    if (!seg.is_object()) continue;
    DeviceView& d = out[seg.value("device", 0)];
    d.segments[u64(seg, "address")] = &seg;
    d.figures["segments"] += 1;
    for (const char* key : {"total_size", "allocated_size", "active_size", "requested_size"}) {
      d.figures[key] += u64(seg, key);
    }
    for (const json& b : seg.value("blocks", json::array())) {
      if (!b.is_object()) continue;
      if (b.value("state", "") == "inactive") {
        d.figures["free_blocks"] += 1;
        continue;
      }
      d.figures["allocations"] += 1;
      if (b.value("state", "") == "active_allocated")
        d.blocks.emplace(u64(b, "address"), u64(b, "size"));
    }
  }
  for (auto& [device, d] : out) {
    d.figures["cached_size"] =
        d.figures["total_size"] - std::min(d.figures["total_size"], d.figures["active_size"]);
  }
  return out;
}

json change(std::uint64_t before, std::uint64_t after) {
  return {{"before", before}, {"after", after}, {"delta", signed_delta(before, after)}};
}

json stats_diff(const DeviceView& a, const DeviceView& b) {
  static constexpr std::pair<const char*, const char*> kNames[] = {
      {"reserved_bytes", "total_size"}, {"allocated_bytes", "allocated_size"},
      {"active_bytes", "active_size"},  {"requested_bytes", "requested_size"},
      {"cached_bytes", "cached_size"},  {"segments", "segments"},
      {"allocations", "allocations"},   {"free_blocks", "free_blocks"}};
  json out = json::object();
  for (const auto& [name, key] : kNames) {
    auto get = [&](const DeviceView& d) {
      auto it = d.figures.find(key);
      return it == d.figures.end() ? 0 : it->second;
    };
    out[name] = change(get(a), get(b));
  }
  return out;
}

// The "current" of every counter of cudalloc's stats present in both snapshots.
json cudalloc_stats_diff(const json& before, const json& after, int device) {
  auto stats_of = [device](const json& doc) -> const json* {
    const json* info = cudalloc_device_info(doc, device);
    if (info == nullptr) return nullptr;
    auto stats = info->find("stats");
    return stats != info->end() && stats->is_object() ? &*stats : nullptr;
  };
  const json* a = stats_of(before);
  const json* b = stats_of(after);
  json out = json::object();
  if (a == nullptr || b == nullptr) return out;
  for (const auto& [name, stat] : a->items()) {
    if (!b->contains(name) || !stat.is_object() || !(*b)[name].is_object()) continue;
    out[name] = change(u64(stat, "current"), u64((*b)[name], "current"));
  }
  return out;
}

std::uint64_t magnitude(const json& entry) {
  return static_cast<std::uint64_t>(std::llabs(entry["delta"].get<std::int64_t>()));
}

json sorted_by_delta(json list) {
  std::stable_sort(list.begin(), list.end(),
                   [](const json& x, const json& y) { return magnitude(x) > magnitude(y); });
  return list;
}

json segments_diff(const DeviceView& a, const DeviceView& b) {
  json added = json::array(), removed = json::array(), resized = json::array();
  auto entry = [](std::uint64_t address, std::uint64_t before, std::uint64_t after) {
    return json{{"address", hex_address(address)},
                {"size_before", before},
                {"size_after", after},
                {"delta", signed_delta(before, after)}};
  };
  for (const auto& [address, seg] : b.segments) {
    auto old = a.segments.find(address);
    const std::uint64_t size = u64(*seg, "total_size");
    if (old == a.segments.end()) {
      added.push_back(entry(address, 0, size));
    } else if (u64(*old->second, "total_size") != size) {
      resized.push_back(entry(address, u64(*old->second, "total_size"), size));
    }
  }
  for (const auto& [address, seg] : a.segments) {
    if (!b.segments.contains(address))
      removed.push_back(entry(address, u64(*seg, "total_size"), 0));
  }
  return {{"added", sorted_by_delta(std::move(added))},
          {"removed", sorted_by_delta(std::move(removed))},
          {"resized", sorted_by_delta(std::move(resized))}};
}

// Blocks of `from` that are not in `other`, largest first.
json blocks_only_in(const DeviceView& from, const DeviceView& other) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> only;  // (size, address)
  for (const auto& [address, size] : from.blocks) {
    if (!other.blocks.contains({address, size})) only.emplace_back(size, address);
  }
  std::stable_sort(only.begin(), only.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  json out = json::array();
  for (const auto& [size, address] : only)
    out.push_back({{"address", hex_address(address)}, {"size", size}});
  return out;
}

}  // namespace

json snapshot_diff(const json& before, const json& after) {
  const auto a = device_views(before);
  const auto b = device_views(after);
  std::set<int> devices;
  for (const auto& entry : a) devices.insert(entry.first);
  for (const auto& entry : b) devices.insert(entry.first);
  json out = {{"devices", json::array()}};
  const DeviceView none;
  for (int device : devices) {
    const DeviceView& da = a.contains(device) ? a.at(device) : none;
    const DeviceView& db = b.contains(device) ? b.at(device) : none;
    json d = {
        {"device", device},
        {"stats", stats_diff(da, db)},
        {"segments", segments_diff(da, db)},
        {"blocks", {{"allocated", blocks_only_in(db, da)}, {"freed", blocks_only_in(da, db)}}}};
    if (json c = cudalloc_stats_diff(before, after, device); !c.empty())
      d["cudalloc_stats"] = std::move(c);
    out["devices"].push_back(std::move(d));
  }
  return out;
}

}  // namespace cudalloc::view
