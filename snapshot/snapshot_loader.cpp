#include "snapshot/snapshot_loader.h"

#include <unordered_map>

#include "snapshot/input_file.h"
#include "snapshot/pickle.h"
#include "snapshot/values.h"

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

// Interns the alloc events' stacks: each distinct "frames" list is kept once.
class StackTable {
 public:
  explicit StackTable(std::vector<json>* stacks) : stacks_(stacks) {}
  // The id of `e`'s frames (1-based), or 0 when it has none.
  std::uint32_t id_of(json& e) {
    auto frames = e.find("frames");
    if (frames == e.end() || !frames->is_array() || frames->empty()) return 0;
    // The key only tells stacks apart: invalid UTF-8 (a pickle's filename) is replaced, not
    // an exception.
    auto [it, added] = ids_.try_emplace(frames->dump(-1, ' ', false, json::error_handler_t::replace), 0);
    if (added) {
      stacks_->push_back(std::move(*frames));
      it->second = std::uint32_t(stacks_->size());
    }
    return it->second;
  }

 private:
  std::vector<json>* stacks_;
  std::unordered_map<std::string, std::uint32_t> ids_;
};

// One trace event; false with a message when check_event refuses it (the same checks as the
// trace reader's). Absent fields read as 0.
bool record_event(json& e, int device, std::size_t index, std::vector<SnapshotEvent>* out,
                  StackTable& stacks, std::string* error) {
  if (!check_event(e, error)) {
    *error += " (device " + std::to_string(device) + ", event " + std::to_string(index) + ")";
    return false;
  }
  if (device >= int(kMaxTraceDevices)) {
    *error = "more than " + std::to_string(kMaxTraceDevices) + " device lists in device_traces";
    return false;
  }
  const auto field = [&e](const char* key) {
    auto it = e.find(key);
    return it != e.end() ? it->get<std::uint64_t>() : 0;  // checked by check_event
  };
  SnapshotEvent r;
  r.kind = event_kind_from_name(e["action"].get_ref<const std::string&>());
  r.addr = field("addr");
  r.size = field("size");
  r.stream = field("stream");
  if (auto t = e.find("time_us"); t != e.end() && t->is_number())
    r.time_us = t->get<std::int64_t>();
  if (e.contains("reserved_bytes")) r.reserved = std::int64_t(field("reserved_bytes"));
  if (r.kind == EventKind::oom && e.contains("device_free")) r.addr = field("device_free");
  if (r.kind == EventKind::alloc) r.stack = stacks.id_of(e);
  r.device = std::int16_t(device);
  out->push_back(r);
  return true;
}

// Parses the JSON, handing each event of device_traces to record_event instead of keeping it.
bool parse_json(InputFile& in, LoadedSnapshot* out, std::string* error) {
  StackTable stacks(&out->stacks);
  auto record = [&](std::size_t device, std::size_t index, json& event, std::string* why) {
    if (device >= kMaxTraceDevices) {
      *why = "more than " + std::to_string(kMaxTraceDevices) + " device lists in device_traces";
      return false;
    }
    return record_event(event, int(device), index, &out->events, stacks, why);
  };
  if (!parse_snapshot_document(in, record, &out->doc, error)) return false;
  out->format = "json";
  return true;
}

// A pickle is parsed whole (pickle_to_json), then its events are moved out of the document.
bool parse_pickle(InputFile& in, LoadedSnapshot* out, std::string* error) {
  std::string data;
  if (!in.read_all(&data, error) || !pickle_to_json(data, &out->doc, error)) return false;
  out->format = "pickle";
  if (!out->doc.is_object() || !out->doc.contains("device_traces")) return true;
  json& traces = out->doc["device_traces"];
  StackTable stacks(&out->stacks);
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
      if (!record_event(traces[d][i], int(d), i, &out->events, stacks, error)) return false;
    }
    traces[d] = json::array();
  }
  return true;
}

bool parse_input(InputFile& in, LoadedSnapshot* out, std::string* error) {
  const int first = in.peek_content();
  if (first == 0x80) return parse_pickle(in, out, error);
  if (first == std::char_traits<char>::eof() && in.failure().empty()) {
    *error = "is empty";
    return false;
  }
  return parse_json(in, out, error);
}

}  // namespace

EventKind event_kind_from_name(const std::string& action) {
  for (const auto& [name, kind] : kKinds) {
    if (action == name) return kind;
  }
  return EventKind::other;
}

bool load_snapshot(const std::string& path, LoadedSnapshot* out, std::string* error) {
  InputFile in;
  bool ok = in.open(path, error) && parse_input(in, out, error);
  if (ok && out->doc.is_array()) out->doc = json{{"segments", std::move(out->doc)}};
  if (ok && !out->doc.is_object()) {
    *error = "is not a snapshot: its top level is neither an object nor a segment list";
    ok = false;
  }
  ok = ok && check_document(out->doc, error);
  if (!ok) *error = path + ": " + *error;
  return ok;
}

}  // namespace cudalloc::snapshot
