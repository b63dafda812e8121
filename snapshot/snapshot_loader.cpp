#include "snapshot/snapshot_loader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "snapshot/pickle.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

constexpr std::pair<const char*, EventKind> kKinds[] = {
    {"alloc", EventKind::alloc},
    {"free_requested", EventKind::free_requested},
    {"free_completed", EventKind::free_completed},
    {"segment_alloc", EventKind::segment_alloc},
    {"segment_free", EventKind::segment_free},
    {"segment_map", EventKind::segment_map},
    {"segment_unmap", EventKind::segment_unmap},
    {"oom", EventKind::oom},
};

// The whole file, decompressed when it is gzip (zlib reads plain files unchanged).
bool read_file(const std::string& path, std::string* data, std::string* error) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  gzbuffer(file, 1 << 17);
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) data->append(buffer, std::size_t(n));
  int code = Z_OK;
  gzerror(file, &code);
  gzclose(file);
  if (n < 0 || code != Z_OK) {
    *error = "corrupt or truncated gzip data in " + path;
    return false;
  }
  return true;
}

std::uint64_t field(const json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number_integer() ? it->get<std::uint64_t>() : 0;
}

// One trace event; false with a message when it is not an object with a string action.
bool record_event(const json& e, int device, std::size_t index, std::vector<SnapshotEvent>* out,
                  std::string* error) {
  auto action = e.is_object() ? e.find("action") : e.end();
  if (!e.is_object() || action == e.end() || !action->is_string()) {
    *error = "trace event without an action (device " + std::to_string(device) + ", event " +
             std::to_string(index) + ")";
    return false;
  }
  SnapshotEvent r;
  r.kind = event_kind_from_name(action->get_ref<const std::string&>());
  r.addr = field(e, "addr");
  r.size = field(e, "size");
  r.stream = field(e, "stream");
  if (auto t = e.find("time_us"); t != e.end() && t->is_number())
    r.time_us = t->get<std::int64_t>();
  r.device = device;
  out->push_back(r);
  return true;
}

// Parses JSON text, handing each event of device_traces to record_event instead of keeping it.
bool parse_json(const std::string& data, LoadedSnapshot* out, std::string* error) {
  bool in_traces = false;
  int device = -1;
  std::size_t index = 0;
  std::string event_error;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (depth == 1 && event == E::key) in_traces = parsed == "device_traces";
    if (!in_traces) return true;
    if (depth == 2 && event == E::array_start) {
      ++device;
      index = 0;
    }
    if (depth == 3 && (event == E::object_end || event == E::value || event == E::array_end)) {
      if (event_error.empty()) record_event(parsed, device, index++, &out->events, &event_error);
      return false;  // recorded: not kept in the document
    }
    return true;
  };
  try {
    out->doc = json::parse(data, callback);
  } catch (const json::parse_error& e) {
    *error = "malformed JSON at byte " + std::to_string(e.byte) +
             " (truncated, or neither JSON nor a pickle): " + e.what();
    return false;
  }
  if (!event_error.empty()) {
    *error = event_error;
    return false;
  }
  out->format = "json";
  return true;
}

// A pickle is parsed whole (pickle_to_json), then its events are moved out of the document.
bool parse_pickle(const std::string& data, LoadedSnapshot* out, std::string* error) {
  if (!pickle_to_json(data, &out->doc, error)) return false;
  out->format = "pickle";
  if (!out->doc.is_object() || !out->doc.contains("device_traces")) return true;
  json& traces = out->doc["device_traces"];
  if (!traces.is_array()) {
    *error = "device_traces is not a list";
    return false;
  }
  for (std::size_t d = 0; d < traces.size(); ++d) {
    if (!traces[d].is_array()) {
      *error = "device_traces[" + std::to_string(d) + "] is not a list";
      return false;
    }
    for (std::size_t i = 0; i < traces[d].size(); ++i) {
      if (!record_event(traces[d][i], int(d), i, &out->events, error)) return false;
    }
    traces[d] = json::array();
  }
  return true;
}

// "segments", when present, must be a list of objects: everything that reads it relies on that.
bool check_segments(const json& doc, std::string* error) {
  auto segments = doc.find("segments");
  if (segments == doc.end()) return true;
  if (!segments->is_array()) {
    *error = "\"segments\" is not a list";
    return false;
  }
  for (std::size_t i = 0; i < segments->size(); ++i) {
    if (!(*segments)[i].is_object()) {
      *error = "segments[" + std::to_string(i) + "] is not an object";
      return false;
    }
  }
  return true;
}

}  // namespace

EventKind event_kind_from_name(const std::string& action) {
  for (const auto& [name, kind] : kKinds) {
    if (action == name) return kind;
  }
  return EventKind::other;
}

bool load_snapshot(const std::string& path, LoadedSnapshot* out, std::string* error) {
  std::string data;
  if (!read_file(path, &data, error)) return false;
  const std::size_t first = data.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    *error = path + " is empty";
    return false;
  }
  const bool ok = static_cast<unsigned char>(data[first]) == 0x80 ? parse_pickle(data, out, error)
                                                                  : parse_json(data, out, error);
  if (!ok) {
    *error = path + ": " + *error;
    return false;
  }
  if (out->doc.is_array()) out->doc = json{{"segments", std::move(out->doc)}};
  if (!out->doc.is_object()) {
    *error = path + " is not a snapshot: its top level is neither an object nor a segment list";
    return false;
  }
  if (!check_segments(out->doc, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

}  // namespace cudalloc::snapshot
