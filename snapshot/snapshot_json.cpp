#include "snapshot/snapshot_json.h"

#include <unistd.h>

#include <chrono>

#include "api/cudalloc.h"
#include "api/options.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

const char* block_state_name(BlockState::Kind kind) {
  switch (kind) {
    case BlockState::Kind::allocated: return "active_allocated";
    case BlockState::Kind::pending: return "active_pending_free";
    case BlockState::Kind::free: return "inactive";
  }
  return "inactive";
}

// A paged segment's pages as runs: {address, size, mapped, location (mapped runs only)}.
json pages_json(const SegmentState& s) {
  json out = json::array();
  for (const PageRun& run : s.pages) {
    json entry = {{"address", run.addr}, {"size", run.size}, {"mapped", run.mapped}};
    if (run.mapped) entry["location"] = run.host ? "host" : "device";
    out.push_back(std::move(entry));
  }
  return out;
}

json segment_json(const DeviceState& d, const SegmentState& s) {
  json blocks = json::array();
  std::size_t allocated = 0, active = 0, requested = 0;
  for (const BlockState& b : s.blocks) {
    if (b.kind != BlockState::Kind::free) {
      active += b.size;
      requested += b.requested;
      if (b.kind == BlockState::Kind::allocated) allocated += b.size;
    }
    blocks.push_back({{"address", b.addr},
                      {"size", b.size},
                      {"requested_size", b.requested},
                      {"state", block_state_name(b.kind)},
                      {"frames", json::array()}});
  }
  json out = {{"device", d.device},
          {"address", s.base},
          {"total_size", s.size},
          {"allocated_size", allocated},
          {"active_size", active},
          {"requested_size", requested},
          {"stream", s.stream},
          {"segment_type", s.has_slabs ? "small" : "large"},
          {"segment_pool_id", json::array({0, s.private_pool})},
          {"is_expandable", s.paged},
          {"host_size", s.host_bytes},
          {"frames", json::array()},
          {"blocks", std::move(blocks)}};
  if (s.paged) out["pages"] = pages_json(s);
  if (!s.region.empty()) {
    // A region's segment (sleep and wake): dropped bytes have no memory behind them.
    out["region"] = s.region;
    out["region_state"] = s.paused ? "paused" : "active";
    out["dropped_size"] = s.dropped_bytes;
  }
  return out;
}

json regions_json(const DeviceState& d) {
  json out = json::array();
  for (const RegionState& r : d.regions) {
    out.push_back({{"tag", r.tag},
                   {"state", r.paused ? "paused" : "active"},
                   {"kept", r.kept},
                   {"device_bytes", r.device_bytes},
                   {"host_bytes", r.host_bytes},
                   {"dropped_bytes", r.dropped_bytes},
                   {"segments", r.segments}});
  }
  return out;
}

json trace_json(const DeviceState& d) {
  json events = json::array();
  for (const TraceEvent& e : d.trace) {
    json ev = {{"action", trace_action_name(e.action)},
               {"addr", e.addr},
               {"size", e.size},
               {"stream", e.stream},
               {"time_us", e.time_us},
               {"reserved_bytes", e.reserved},
               {"frames", json::array()}};
    if (e.action == TraceAction::oom) {
      // PyTorch's oom entries carry the device's free memory when the request failed.
      const std::size_t limit = d.reserve_cap != 0 ? d.reserve_cap : d.device_total;
      ev["device_free"] = limit > e.reserved ? limit - e.reserved : 0;
    }
    events.push_back(std::move(ev));
  }
  return events;
}

json settings_json(const Settings& settings) {
  json out = json::object();
  for (const Option& o : options()) out[o.key] = o.value(settings);  // numbers, for machines
  return out;
}

json device_json(const DeviceState& d) {
  json stats = json::object();
  d.stats.for_each([&](std::string_view name, std::string_view, const Stat& s) {
    stats[std::string(name)] = {{"current", s.current}, {"peak", s.peak}, {"total", s.total}};
  });
  json slabs = json::array();
  for (const SegmentState& s : d.segments) {
    for (const SlabState& slab : s.slabs) {
      slabs.push_back({{"address", slab.addr}, {"bytes", slab.bytes},
                       {"object_size", slab.object_size}, {"capacity", slab.capacity},
                       {"used", slab.used}, {"stream", s.stream}});
    }
  }
  return {{"device", d.device},         {"backend", d.backend},
          {"device_total", d.device_total}, {"reserve_cap", d.reserve_cap},
          {"stats", std::move(stats)},  {"slabs", std::move(slabs)},
          {"regions", regions_json(d)},
          {"trace_events", d.trace.size()}, {"trace_dropped", d.trace_dropped}};
}

}  // namespace

json snapshot_json(const std::vector<DeviceState>& devices, const std::string& conf) {
  json segments = json::array();
  int max_device = -1;
  for (const DeviceState& d : devices) {
    for (const SegmentState& s : d.segments) segments.push_back(segment_json(d, s));
    max_device = std::max(max_device, d.device);
  }
  json traces = json::array();
  for (int i = 0; i <= max_device; ++i) traces.push_back(json::array());
  json device_info = json::array();
  json regions = json::array();
  for (const DeviceState& d : devices) {
    traces[static_cast<std::size_t>(d.device)] = trace_json(d);
    device_info.push_back(device_json(d));
    for (json r : regions_json(d)) {
      r["device"] = d.device;
      regions.push_back(std::move(r));
    }
  }
  const Settings settings = devices.empty() ? Settings{} : devices.front().settings;
  json allocator_settings = settings_json(settings);
  allocator_settings["CUDALLOC_CONF"] = conf;
  allocator_settings["expandable_segments"] = false;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {{"segments", std::move(segments)},
          {"device_traces", std::move(traces)},
          {"allocator_settings", std::move(allocator_settings)},
          {"external_annotations", json::array()},
          {"cudalloc",
           {{"schema_version", kSchemaVersion},
            {"version", cudalloc_version_string()},
            {"conf", conf},
            {"settings", settings_json(settings)},
            {"pid", static_cast<long>(::getpid())},
            {"time_us", std::chrono::duration_cast<std::chrono::microseconds>(now).count()},
            {"devices", std::move(device_info)},
            {"regions", std::move(regions)}}}};
}

namespace {

// `path` with %p replaced by the process id and, when sequence is not 0, %n by it.
std::string expand(const std::string& path, std::uint64_t sequence) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char next = i + 1 < path.size() && path[i] == '%' ? path[i + 1] : '\0';
    if (next == 'p') {
      out += std::to_string(::getpid());
    } else if (next == 'n' && sequence != 0) {
      out += std::to_string(sequence);
    } else {
      out += path[i];
      continue;
    }
    ++i;
  }
  return out;
}

// Where the extension of the file name in `path` starts (oom_snapshot_path), or npos.
std::size_t extension_start(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::size_t name = slash == std::string::npos ? 0 : slash + 1;
  auto dot_before = [&](std::size_t end) {
    const std::size_t dot = end > name ? path.rfind('.', end - 1) : std::string::npos;
    return dot != std::string::npos && dot > name ? dot : std::string::npos;
  };
  const std::size_t last = dot_before(path.size());
  if (last == std::string::npos || path.compare(last, std::string::npos, ".gz") != 0) return last;
  const std::size_t before = dot_before(last);
  return before != std::string::npos ? before : last;
}

}  // namespace

std::string expand_path(const std::string& path) { return expand(path, 0); }

namespace {

// `path` with `piece` inserted before the extension of its file name (or at its end).
std::string before_extension(const std::string& path, const std::string& piece) {
  const std::size_t at = extension_start(path);
  // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for "." + string and
  // for std::string::insert.
  if (at == std::string::npos) return path + piece;
  std::string named = path.substr(0, at);
  named += piece;
  named += path.substr(at);
  return named;
}

}  // namespace

std::string oom_snapshot_path(const std::string& path, std::uint64_t sequence) {
  std::string out = expand(path, sequence);
  if (sequence <= 1 || path.find("%n") != std::string::npos) return out;
  std::string number(1, '.');
  number += std::to_string(sequence);
  return before_extension(out, number);
}

std::string oom_snapshot_fallback(const std::string& path, long pid, int attempt) {
  std::string piece = ".p";
  piece += std::to_string(pid);
  if (attempt > 1) {
    piece += '-';
    piece += std::to_string(attempt);
  }
  return before_extension(path, piece);
}

}  // namespace cudalloc::snapshot
