// `cudalloc inspect SNAPSHOT [--size BYTES] [--top N] [--width W] [--json]`
// Per device: reserved, allocated, active and cached memory, fragmentation figures (largest
// free block against all free memory, free memory in pieces too small for --size), peak
// reserved and live (view/peak_reserved.h), whether the trace is complete, its out-of-memory
// events, the largest allocations (now, at the peak of live memory and at the first ooms), the
// largest segments, and a map of every segment.
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/usage.h"
#include "snapshot/snapshot_loader.h"
#include "util/units.h"
#include "view/peak_reserved.h"
#include "view/snapshot_fields.h"
#include "view/live_moments.h"
#include "view/segment_map.h"
#include "view/timeline.h"
#include "view/trace_completeness.h"

namespace cudalloc::cli {
namespace {

using nlohmann::json;

struct DeviceSummary {
  std::uint64_t reserved = 0, host = 0, allocated = 0, active = 0, requested = 0;
  std::uint64_t free_total = 0, largest_free = 0, free_too_small = 0;
  std::uint64_t free_blocks = 0, allocations = 0;
  std::vector<const json*> segments;
  // From the trace and cudalloc's section of the snapshot.
  view::DevicePeaks peaks;
  view::TraceCompleteness trace;
  std::vector<view::OomMarker> ooms;
  json moments;  // what was live at the peak and at the first ooms (view/live_moments.h)
};

std::uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<std::uint64_t>() : 0;
}

std::map<int, DeviceSummary> summarize(const json& doc, std::uint64_t size) {
  std::map<int, DeviceSummary> devices;
  for (const json& seg : doc["segments"]) {  // by reference: summaries point into doc
    DeviceSummary& d = devices[seg.value("device", 0)];
    d.segments.push_back(&seg);
    d.reserved += view::segment_device_bytes(seg);  // the host tier is beside it, not in it
    d.host += view::segment_host_bytes(seg);
    d.allocated += u64(seg, "allocated_size");
    d.active += u64(seg, "active_size");
    d.requested += u64(seg, "requested_size");
    for (const json& b : seg.value("blocks", json::array())) {
      const std::uint64_t bytes = u64(b, "size");
      if (b.value("state", "") != "inactive") {
        ++d.allocations;
        continue;
      }
      ++d.free_blocks;
      d.free_total += bytes;
      d.largest_free = std::max(d.largest_free, bytes);
      if (bytes < size) d.free_too_small += bytes;
    }
  }
  return devices;
}

// The largest live allocations printed at the peak and at each of the first ooms.
constexpr std::size_t kMomentTop = 3, kMomentOoms = 5;

// Peaks, trace completeness and out-of-memory events of every device with segments or events.
void add_trace_facts(const snapshot::LoadedSnapshot& snap, std::map<int, DeviceSummary>* devices) {
  for (const snapshot::SnapshotEvent& e : snap.events) (*devices)[e.device];
  for (auto& [device, d] : *devices) {
    const view::FinalState final_state{!d.segments.empty(), std::int64_t(d.active),
                                       std::int64_t(d.reserved)};
    const view::Timeline t = view::build_timeline(snap.events, device, final_state, 2);
    const json* info = view::cudalloc_device_info(snap.doc, device);
    d.peaks = view::device_peaks(t, info);
    d.trace = view::trace_completeness(snap.events, device, info, view::trace_capacity(snap.doc));
    d.ooms = t.ooms;
    d.moments = view::live_moments_json(snap, device, t, {kMomentTop, kMomentOoms});
  }
}

// "1 segment", "2 segments".
std::string count_of(std::uint64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// For each moment, its largest live allocations, one per line with where they were allocated.
void print_moments(const json& moments) {
  for (const json& m : moments) {
    std::printf("  largest live at %s (event %llu)%s\n", m["label"].get<std::string>().c_str(),
                m["event"].get<unsigned long long>(), m["top"].empty() ? ": none seen in the trace" : ":");
    for (const json& a : m["top"]) {
      const std::string site = a["site"].get<std::string>();
      std::printf("    %-16s %12s%s%s\n", a["address"].get<std::string>().c_str(),
                  format_bytes(a["size"].get<std::uint64_t>()).c_str(), site.empty() ? "" : "  ",
                  site.c_str());
    }
  }
}

void print_trace_facts(const DeviceSummary& d) {
  const auto fb = [](std::uint64_t v) { return format_bytes(v); };
  if (d.peaks.known()) {
    std::printf("  peak reserved %s, peak live %s (ratio %.3f; from the %s)\n",
                fb(d.peaks.reserved).c_str(), fb(d.peaks.live).c_str(),
                d.peaks.live ? double(d.peaks.reserved) / double(d.peaks.live) : 0.0,
                d.peaks.source.c_str());
  }
  if (d.trace.kept > 0) {
    std::printf("  trace: %s%s%s\n", count_of(d.trace.kept, "event").c_str(),
                d.trace.complete() ? "" : "; ", view::trace_note(d.trace).c_str());
  }
  if (!d.ooms.empty()) {
    std::printf("  out of memory: %s\n", count_of(d.ooms.size(), "event").c_str());
  }
  for (const view::OomMarker& o : d.ooms) {
    std::printf("    event %llu: request %s failed, device free %s, live %s, reserved %s\n",
                static_cast<unsigned long long>(o.event), fb(o.size).c_str(),
                fb(o.device_free).c_str(), fb(std::uint64_t(o.live)).c_str(),
                fb(std::uint64_t(o.reserved)).c_str());
  }
  print_moments(d.moments);
}

// One character per width-th of the segment: '#' allocated, 'p' pending free, '.' free.
std::string segment_map(const json& seg, int width) {
  const double total = double(u64(seg, "total_size"));
  std::vector<double> cells(std::size_t(width), 0.0), used(std::size_t(width), 0.0),
      pending(std::size_t(width), 0.0);
  const std::uint64_t base = u64(seg, "address");
  for (const json& b : seg.value("blocks", json::array())) {
    const std::string state = b.value("state", "");
    const double start = double(u64(b, "address") - base), end = start + double(u64(b, "size"));
    for (int c = 0; c < width; ++c) {
      const double lo = total * c / width, hi = total * (c + 1) / width;
      const double overlap = std::max(0.0, std::min(end, hi) - std::max(start, lo));
      if (state == "active_allocated") used[std::size_t(c)] += overlap;
      if (state == "active_pending_free") pending[std::size_t(c)] += overlap;
      cells[std::size_t(c)] = hi - lo;
    }
  }
  std::string out;
  for (int c = 0; c < width; ++c) {
    const auto i = std::size_t(c);
    out += pending[i] > cells[i] / 2 ? 'p' : used[i] + pending[i] > cells[i] / 2 ? '#' : '.';
  }
  return out;
}

// A snapshot written by snapshot_on_oom names the request that failed (cudalloc.oom), or null.
const json* written_at_oom(const json& doc) {
  auto c = doc.find("cudalloc");
  if (c == doc.end() || !c->is_object()) return nullptr;
  auto oom = c->find("oom");
  return oom != c->end() && oom->is_object() ? &*oom : nullptr;
}

void print_written_at_oom(const json& doc) {
  const json* found = written_at_oom(doc);
  if (found == nullptr) return;
  const json& oom = *found;
  std::string extra;
  if (oom.contains("device_free")) extra += ", device free " + format_bytes(u64(oom, "device_free"));
  if (const std::string m = oom.value("message", std::string()); !m.empty()) extra += ": " + m;
  std::printf("written at out-of-memory error %llu of the process: %s on device %llu, stream "
              "%#llx, failed%s\n",
              static_cast<unsigned long long>(u64(oom, "sequence")),
              format_bytes(u64(oom, "size")).c_str(),
              static_cast<unsigned long long>(u64(oom, "device")),
              static_cast<unsigned long long>(u64(oom, "stream")), extra.c_str());
}

void print_device(int device, const DeviceSummary& d, std::uint64_t size, std::size_t top,
                  int width) {
  const auto fb = [](std::uint64_t v) { return format_bytes(v); };
  std::printf("device %d: %s\n", device, count_of(d.segments.size(), "segment").c_str());
  std::printf("  reserved   %12s\n  allocated  %12s  (%s, %s requested)\n",
              fb(d.reserved).c_str(), fb(d.allocated).c_str(),
              count_of(d.allocations, "allocation").c_str(), fb(d.requested).c_str());
  if (d.host != 0) std::printf("  host tier  %12s  (host memory, not in reserved)\n", fb(d.host).c_str());
  const std::uint64_t held = d.reserved + d.host;
  std::printf("  active     %12s\n  cached     %12s  (reserved%s - active)\n", fb(d.active).c_str(),
              fb(held > d.active ? held - d.active : 0).c_str(), d.host ? " + host tier" : "");
  std::printf("  free: %s in %s, largest %s (%.1f%% of free)\n", fb(d.free_total).c_str(),
              count_of(d.free_blocks, "block").c_str(), fb(d.largest_free).c_str(),
              d.free_total ? 100.0 * double(d.largest_free) / double(d.free_total) : 100.0);
  std::printf("  free in pieces smaller than %s: %s\n", fb(size).c_str(), fb(d.free_too_small).c_str());
  print_trace_facts(d);

  std::vector<const json*> segs = d.segments;
  std::sort(segs.begin(), segs.end(), [](const json* a, const json* b) {
    return u64(*a, "total_size") > u64(*b, "total_size");
  });
  std::vector<std::tuple<std::uint64_t, std::uint64_t, const json*>> blocks;  // size, address
  for (const json* s : d.segments) {
    auto list = s->find("blocks");  // by reference: the rows point at the blocks
    if (list == s->end() || !list->is_array()) continue;
    for (const json& b : *list) {
      if (b.value("state", "") == "active_allocated") blocks.emplace_back(u64(b, "size"), u64(b, "address"), &b);
    }
  }
  std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) > std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::printf("  largest allocations:\n");
  for (std::size_t i = 0; i < std::min(top, blocks.size()); ++i) {
    const auto& [bytes, address, block] = blocks[i];
    const std::string site = view::allocation_site(*block, 1);
    std::printf("    %-16s %12s%s%s\n", view::hex_address(address).c_str(), fb(bytes).c_str(),
                site.empty() ? "" : "  ", site.c_str());
  }
  std::printf("  segments (largest first; # allocated, p pending free, . free):\n");
  for (std::size_t i = 0; i < std::min(top, segs.size()); ++i) {
    const json& s = *segs[i];
    std::printf("    %#14llx %10s %-5s %s\n", static_cast<unsigned long long>(u64(s, "address")),
                fb(u64(s, "total_size")).c_str(), s.value("segment_type", "").c_str(),
                segment_map(s, width).c_str());
  }
  if (segs.size() > top) std::printf("    ... %zu more (--top)\n", segs.size() - top);
}

json device_json(int device, const DeviceSummary& d, std::uint64_t size) {
  json j = {{"device", device},
          {"segments", d.segments.size()},
          {"reserved_bytes", d.reserved},
          {"host_reserved_bytes", d.host},
          {"allocated_bytes", d.allocated},
          {"active_bytes", d.active},
          {"requested_bytes", d.requested},
          {"cached_bytes", d.reserved + d.host > d.active ? d.reserved + d.host - d.active : 0},
          {"allocations", d.allocations},
          {"free_blocks", d.free_blocks},
          {"free_bytes", d.free_total},
          {"largest_free_block", d.largest_free},
          {"free_smaller_than_size", d.free_too_small},
          {"size", size}};
  if (d.peaks.known()) {
    j["peak_reserved_bytes"] = d.peaks.reserved;
    j["peak_live_bytes"] = d.peaks.live;
    j["peak_source"] = d.peaks.source;
  }
  j["trace"] = view::trace_completeness_json(d.trace);
  j["ooms"] = json::array();
  for (const view::OomMarker& o : d.ooms) j["ooms"].push_back(view::oom_json(o));
  j["moments"] = json::array();
  for (const json& m : d.moments) {  // the flames stay in `view`: the text cannot show them
    json kept = m;
    kept.erase("flame");
    j["moments"].push_back(std::move(kept));
  }
  return j;
}

constexpr const char* kUsage =
    "usage: cudalloc inspect SNAPSHOT [--size BYTES] [--top N] [--width W] [--json]\n"
    "       [--progress]\n"
    "  Per device: reserved, allocated, active and cached memory, free-memory fragmentation,\n"
    "  peak reserved and live (cudalloc's stats, else the trace), whether the trace is\n"
    "  complete, its out-of-memory events, the largest allocations (now, at the peak of live\n"
    "  memory and at the first out-of-memory events, with where they were allocated when the\n"
    "  trace recorded it) and a text map of the largest segments.\n"
    "  SNAPSHOT: JSON (cudalloc or PyTorch schema), .json.gz or a PyTorch pickle\n"
    "  --size: report the free memory in pieces smaller than this (default 1M)\n"
    "  --top: segments and allocations listed (default 10); --width: map width (default 64)\n"
    "  --json: the figures as a JSON list, one object per device\n"
    CUDALLOC_INPUT_OPTIONS_USAGE CUDALLOC_READ_PROGRESS_USAGE;

constexpr std::size_t kMaxTop = 1000000;

}  // namespace

int inspect_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  std::string path;
  std::size_t size = std::size_t{1} << 20, top = 10;
  int width = 64;
  bool as_json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--json") {
      as_json = true;
    } else if (args[i] == "--size" && has_value && parse_bytes(args[i + 1], &size) && size > 0) {
      ++i;
    } else if (args[i] == "--top" && has_value) {
      if (!parse_count(args[++i], 0, kMaxTop, &top)) {
        return argument_error("inspect", "--top '" + args[i] + "'", "a whole number from 0 to 1000000");
      }
    } else if (args[i] == "--width" && has_value) {
      std::size_t w = 0;
      if (!parse_count(args[++i], 8, 400, &w)) {
        return argument_error("inspect", "--width '" + args[i] + "'", "a whole number from 8 to 400");
      }
      width = static_cast<int>(w);
    } else if (path.empty() && !args[i].empty() && args[i][0] != '-') {
      path = args[i];
    } else {
      path.clear();
      break;
    }
  }
  if (path.empty()) return usage_error(kUsage);
  snapshot::LoadedSnapshot snap;
  std::string error;
  if (!snapshot::load_snapshot(path, &snap, &error)) {
    std::fprintf(stderr, "cudalloc inspect: %s\n", error.c_str());
    return 2;
  }
  const json& doc = snap.doc;
  if (!doc.contains("segments") || !doc["segments"].is_array()) {
    std::fprintf(stderr, "cudalloc inspect: %s has no segments list\n", path.c_str());
    return 2;
  }
  auto devices = summarize(doc, size);
  add_trace_facts(snap, &devices);
  if (as_json) {
    json out = json::array();
    const json* oom = written_at_oom(doc);
    for (const auto& [device, d] : devices) {
      out.push_back(device_json(device, d, size));
      if (oom != nullptr && u64(*oom, "device") == std::uint64_t(device)) {
        out.back()["written_at_oom"] = *oom;
      }
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (devices.empty()) std::printf("no segments: nothing is reserved\n");
  print_written_at_oom(snap.doc);
  for (const auto& [device, d] : devices) print_device(device, d, size, top, width);
  if (doc.contains("cudalloc")) {
    std::printf("cudalloc %s, CUDALLOC_CONF='%s'\n", doc["cudalloc"].value("version", "?").c_str(),
                doc["cudalloc"].value("conf", "").c_str());
  }
  return 0;
}

}  // namespace cudalloc::cli
