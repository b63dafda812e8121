#include "snapshot/trace_reader.h"

#include <cstring>
#include <istream>
#include <sstream>
#include <tuple>

#include "snapshot/input_file.h"
#include "snapshot/pickle.h"
#include "snapshot/values.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

// ---- Streaming JSON: device_traces go straight into records, "meta" into a document ----

class TraceSax : public JsonEvents {
 public:
  explicit TraceSax(TraceFile* out) : out_(out) {}

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool string(string_t& v) override { return scalar(json(v)); }
  bool binary(binary_t&) override { return scalar(json(nullptr)); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    key_ = k;
    if (depth_ == 1) {
      top_key_ = k;
      top_keys_.push_back(k);
    }
    return true;
  }

 private:
  bool in_traces() const { return top_key_ == "device_traces"; }

 public:
  const std::vector<std::string>& top_keys() const { return top_keys_; }

 private:
  bool in_meta() const { return top_key_ == "meta"; }

  // device_traces must be a list (level 2) of lists (3) of objects (4), as trace_from_document
  // requires of a whole document. `level` is where a value sits: the depth of a container
  // opening there, one more than the depth for a scalar.
  bool check_traces_shape(int level, bool is_array, bool is_object) {
    if (!in_traces() || level < 2 || level > 4 || (level == 4 ? is_object : is_array)) return true;
    error = level == 2   ? std::string("\"device_traces\" is not a list")
            : level == 3 ? "device_traces[" + std::to_string(device_ + 1) + "] is not a list"
                         : "trace event that is not an object (device " + std::to_string(device_) +
                               ", event " + std::to_string(index_) + ")";
    return false;
  }

  bool open(json container) {
    ++depth_;
    if (!check_traces_shape(depth_, container.is_array(), container.is_object())) return false;
    if (depth_ == 3 && in_traces()) {
      ++device_;
      index_ = 0;
    }
    if (depth_ == 4 && in_traces()) event_ = json::object();
    if (in_meta() && depth_ >= 2) return build(std::move(container));
    return true;
  }
  bool close() {
    if (in_meta() && depth_ >= 2) building_.pop_back();
    if (depth_ == 4 && in_traces() && !finish_event()) return false;
    --depth_;
    return true;
  }
  bool scalar(json v) {
    if (!check_traces_shape(depth_ + 1, false, false)) return false;
    if (in_traces() && depth_ == 4) {
      event_[key_] = std::move(v);
      return true;
    }
    if (in_meta() && depth_ >= 2) return build(std::move(v));
    return true;
  }
  // Adds a value to the document under construction (containers become current).
  bool build(json v) {
    const bool container = v.is_structured();
    json* slot = nullptr;
    if (building_.empty()) {
      out_->meta = std::move(v);
      slot = &out_->meta;
    } else if (building_.back()->is_array()) {
      building_.back()->push_back(std::move(v));
      slot = &building_.back()->back();
    } else {
      slot = &((*building_.back())[key_] = std::move(v));
    }
    if (container) building_.push_back(slot);
    return true;
  }
  bool finish_event();

  TraceFile* out_;
  int depth_ = 0;
  int device_ = -1;
  std::string key_;
  std::string top_key_;
  std::vector<std::string> top_keys_;  // the document's keys, in order
  json event_;
  std::uint64_t index_ = 0;
  std::vector<json*> building_;
};

// Replay needs the address and size of every event it replays (an oom event has no address),
// the stream when there is one.
bool record_event(const json& e, int device, std::uint64_t index, TraceFile* out,
                  std::string* error) {
  const auto where = " (device " + std::to_string(device) + ", event " + std::to_string(index) + ")";
  if (!check_event(e, error)) {
    *error += where;
    return false;
  }
  TraceAction action;
  if (!trace_action_from_name(e["action"].get_ref<const std::string&>().c_str(), &action)) {
    ++out->other_events;  // snapshot, segment_map, ...: not needed to replay
    return true;
  }
  TraceRecord r{action, 0, 0, 0, device};
  for (auto [field, target] : {std::pair{"addr", &r.addr}, {"size", &r.size}, {"stream", &r.stream}}) {
    auto f = e.find(field);
    if (f != e.end()) {
      *target = f->get<std::uint64_t>();  // checked by check_event
    } else if (std::strcmp(field, "size") == 0 ||
               (std::strcmp(field, "addr") == 0 && action != TraceAction::oom)) {
      *error = std::string("trace event without '") + field + "'" + where;
      return false;
    }
  }
  out->events.push_back(r);
  return true;
}

bool TraceSax::finish_event() {
  if (!record_event(event_, device_, index_++, out_, &error)) return false;
  event_ = json();
  return true;
}

bool read_json_stream(InputFile& in, TraceFile* out, std::string* error) {
  TraceSax sax(out);
  if (!parse_json_events(in, &sax, error)) return false;
  if (!is_snapshot_keys(sax.top_keys())) {
    *error = not_a_snapshot(sax.top_keys());
    return false;
  }
  out->format = "json";
  return true;
}

// ---- RMM CSV ---------------------------------------------------------------------------

// A line without the carriage return of CRLF line ends.
std::string without_cr(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// One row after the header: Thread,Time,Action,Pointer,Size,Stream.
bool read_rmm_row(const std::string& line, std::uint64_t row, TraceRecord* r, std::string* error) {
  const std::string where = " on RMM log line " + std::to_string(row);
  std::vector<std::string> cols;
  std::stringstream ss(line);
  for (std::string col; std::getline(ss, col, ',');) cols.push_back(col);
  if (cols.size() < 6) {
    *error = "malformed RMM log line " + std::to_string(row) + " (fewer than 6 columns): " + line;
    return false;
  }
  if (cols[2] == "allocate") {
    r->action = TraceAction::alloc;
  } else if (cols[2] == "free") {
    r->action = TraceAction::free_completed;
  } else if (cols[2] == "allocate failure") {
    r->action = TraceAction::oom;
  } else {
    *error = "unknown action '" + cols[2] + "'" + where;
    return false;
  }
  for (auto [col, name, kind, target] :
       {std::tuple{3, "Pointer", ValueKind::address, &r->addr},
        {4, "Size", ValueKind::size, &r->size}, {5, "Stream", ValueKind::address, &r->stream}}) {
    if (!read_value(number_from_text(cols[std::size_t(col)]), kind, name, target, error)) {
      *error += where;
      return false;
    }
  }
  return true;
}

bool read_rmm_csv(InputFile& in, TraceFile* out, std::string* error) {
  std::string line;
  std::getline(in.stream(), line);
  if (without_cr(line).rfind("Thread,Time,Action,Pointer,Size,Stream", 0) != 0) {
    *error = "not an RMM log: the header is not Thread,Time,Action,Pointer,Size,Stream";
    return false;
  }
  for (std::uint64_t row = 2; std::getline(in.stream(), line); ++row) {
    line = without_cr(std::move(line));
    if (line.empty()) continue;
    TraceRecord r{TraceAction::alloc, 0, 0, 0, 0};
    if (!read_rmm_row(line, row, &r, error)) return false;
    out->events.push_back(r);
  }
  if (!in.failure().empty()) {
    *error = in.failure();
    return false;
  }
  out->format = "rmm-csv";
  return true;
}

// A whole document: a pickle, or JSON.
bool read_document(InputFile& in, json* out, std::string* error) {
  if (in.peek_content() == 0x80) {
    std::string data;
    return in.read_all(&data, error) && pickle_to_json(data, out, error);
  }
  return parse_json_document(in, nullptr, out, error);
}

bool read_trace_input(InputFile& in, TraceFile* out, std::string* error) {
  const int kind = in.peek_content();
  if (kind == '{') return read_json_stream(in, out, error);
  if (kind == 'T') return read_rmm_csv(in, out, error);
  if (kind == 0x80) {
    json doc;
    out->format = "pickle";
    return read_document(in, &doc, error) && trace_from_document(doc, out, error);
  }
  *error = in.failure().empty() ? "not a JSON snapshot, a pickle or an RMM log" : in.failure();
  return false;
}

}  // namespace

bool trace_from_document(const json& doc, TraceFile* out, std::string* error) {
  if (!doc.is_object()) {
    *error = "the snapshot is not an object with device_traces";
    return false;
  }
  if (auto meta = doc.find("meta"); meta != doc.end()) out->meta = *meta;
  auto traces = doc.find("device_traces");
  if (traces == doc.end() || !traces->is_array()) {
    *error = "the snapshot has no device_traces (record with trace:N or _record_memory_history)";
    return false;
  }
  for (std::size_t d = 0; d < traces->size(); ++d) {
    const json& events = (*traces)[d];
    if (!events.is_array()) {
      *error = "device_traces[" + std::to_string(d) + "] is not a list";
      return false;
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (!record_event(events[i], int(d), i, out, error)) return false;
    }
  }
  return true;
}

bool read_snapshot(const std::string& path, json* out, std::string* error) {
  InputFile in;
  bool ok = in.open(path, error) && read_document(in, out, error);
  if (ok && out->is_array()) *out = json{{"segments", std::move(*out)}};
  ok = ok && check_document(*out, error);
  if (!ok) {
    *out = json();
    *error = path + ": " + *error;
  }
  return ok;
}

bool read_trace(const std::string& path, TraceFile* out, std::string* error) {
  InputFile in;
  const bool ok = in.open(path, error) && read_trace_input(in, out, error);
  if (!ok) *error = path + ": " + *error;
  return ok;
}

}  // namespace cudalloc::snapshot
