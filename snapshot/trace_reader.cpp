#include "snapshot/trace_reader.h"

#include <zlib.h>

#include <cstring>
#include <istream>
#include <memory>
#include <sstream>
#include <streambuf>

#include "snapshot/pickle.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

// A read-only streambuf over zlib's gzFile, which reads gzip and plain files alike.
class GzipBuffer : public std::streambuf {
 public:
  explicit GzipBuffer(gzFile file) : file_(file) {}
  ~GzipBuffer() override { gzclose(file_); }
  GzipBuffer(const GzipBuffer&) = delete;
  GzipBuffer& operator=(const GzipBuffer&) = delete;
  bool failed() const { return failed_; }

 protected:
  int_type underflow() override {
    const int n = gzread(file_, buffer_, sizeof buffer_);
    if (n <= 0) {
      int code = Z_OK;
      gzerror(file_, &code);
      failed_ = n < 0 || code != Z_OK;
      return traits_type::eof();
    }
    setg(buffer_, buffer_, buffer_ + n);
    return traits_type::to_int_type(buffer_[0]);
  }

 private:
  gzFile file_;
  char buffer_[1 << 16];
  bool failed_ = false;
};

struct OpenFile {
  std::unique_ptr<GzipBuffer> buffer;
  std::unique_ptr<std::istream> stream;
};

bool open_file(const std::string& path, OpenFile* f, std::string* error) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  gzbuffer(file, 1 << 17);
  f->buffer = std::make_unique<GzipBuffer>(file);
  f->stream = std::make_unique<std::istream>(f->buffer.get());
  return true;
}

// The first non-blank byte, without consuming it.
int peek_kind(std::istream& in) {
  int c = in.peek();
  while (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
    in.get();
    c = in.peek();
  }
  return c;
}

// ---- Streaming JSON: device_traces go straight into records, "meta" into a document ----

class TraceSax : public nlohmann::json_sax<json> {
 public:
  explicit TraceSax(TraceFile* out) : out_(out) {}
  std::string error;

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
    if (depth_ == 1) top_key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error = "malformed JSON at byte " + std::to_string(position) + ": " + e.what();
    return false;
  }

 private:
  bool in_traces() const { return top_key_ == "device_traces"; }
  bool in_meta() const { return top_key_ == "meta"; }

  bool open(json container) {
    ++depth_;
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
  json event_;
  std::uint64_t index_ = 0;
  std::vector<json*> building_;
};

bool record_event(const json& e, int device, std::uint64_t index, TraceFile* out,
                  std::string* error) {
  const auto where = " (device " + std::to_string(device) + ", event " + std::to_string(index) + ")";
  auto it = e.find("action");
  if (it == e.end() || !it->is_string()) {
    *error = "trace event without an action" + where;
    return false;
  }
  TraceAction action;
  if (!trace_action_from_name(it->get_ref<const std::string&>().c_str(), &action)) {
    ++out->other_events;  // snapshot, segment_map, ...: not needed to replay
    return true;
  }
  TraceRecord r{action, 0, 0, 0, device};
  for (auto [field, target] : {std::pair{"addr", &r.addr}, {"size", &r.size}, {"stream", &r.stream}}) {
    auto f = e.find(field);
    if (f == e.end() && std::strcmp(field, "stream") == 0) continue;  // optional
    if (f == e.end() && action == TraceAction::oom && std::strcmp(field, "addr") == 0) continue;
    // JSON gives unsigned numbers, pickles signed ones: either, but never below zero (a size
    // of -1 would read as 2^64 - 1).
    if (f == e.end() || !f->is_number_integer() ||
        (!f->is_number_unsigned() && f->get<std::int64_t>() < 0)) {
      *error = std::string("trace event without a non-negative integer '") + field + "'" + where;
      return false;
    }
    *target = f->get<std::uint64_t>();
  }
  out->events.push_back(r);
  return true;
}

bool TraceSax::finish_event() {
  if (!record_event(event_, device_, index_++, out_, &error)) return false;
  event_ = json();
  return true;
}

bool read_json_stream(std::istream& in, TraceFile* out, std::string* error) {
  TraceSax sax(out);
  const bool ok = json::sax_parse(in, &sax, json::input_format_t::json, true, true);
  if (!ok) {
    *error = sax.error.empty() ? "malformed JSON" : sax.error;
    return false;
  }
  out->format = "json";
  return true;
}

// ---- RMM CSV ---------------------------------------------------------------------------

bool parse_number(const std::string& text, std::uint64_t* v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoull(text.c_str(), &end, text.rfind("0x", 0) == 0 ? 16 : 10);
  return errno == 0 && *end == '\0';
}

bool read_rmm_csv(std::istream& in, TraceFile* out, std::string* error) {
  std::string line;
  std::getline(in, line);
  if (line.rfind("Thread,Time,Action,Pointer,Size,Stream", 0) != 0) {
    *error = "not an RMM log: the header is not Thread,Time,Action,Pointer,Size,Stream";
    return false;
  }
  for (std::uint64_t row = 2; std::getline(in, line); ++row) {
    if (line.empty() || line == "\r") continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string col; std::getline(ss, col, ',');) cols.push_back(col);
    TraceRecord r{TraceAction::alloc, 0, 0, 0, 0};
    const std::string& action = cols.size() > 2 ? cols[2] : std::string();
    if (cols.size() < 6 || !parse_number(cols[3], &r.addr) || !parse_number(cols[4], &r.size) ||
        !parse_number(cols[5], &r.stream)) {
      *error = "malformed RMM log line " + std::to_string(row) + ": " + line;
      return false;
    }
    if (action == "allocate") {
      r.action = TraceAction::alloc;
    } else if (action == "free") {
      r.action = TraceAction::free_completed;
    } else if (action == "allocate failure") {
      r.action = TraceAction::oom;
    } else {
      *error = "unknown action '" + action + "' on RMM log line " + std::to_string(row);
      return false;
    }
    out->events.push_back(r);
  }
  out->format = "rmm-csv";
  return true;
}

bool read_all(std::istream& in, std::string* data, GzipBuffer& buffer, std::string* error) {
  std::ostringstream ss;
  ss << in.rdbuf();
  *data = std::move(ss).str();
  if (buffer.failed()) {
    *error = "corrupt or truncated gzip data";
    return false;
  }
  return true;
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
      if (!events[i].is_object()) {
        *error = "device " + std::to_string(d) + ", event " + std::to_string(i) + " is not an object";
        return false;
      }
      if (!record_event(events[i], int(d), i, out, error)) return false;
    }
  }
  return true;
}

bool read_snapshot(const std::string& path, json* out, std::string* error) {
  OpenFile f;
  if (!open_file(path, &f, error)) return false;
  const int kind = peek_kind(*f.stream);
  std::string data;
  if (!read_all(*f.stream, &data, *f.buffer, error)) return false;
  if (kind == 0x80) return pickle_to_json(data, out, error);
  // Consumers of the document (inspect, convert's pickle writer, dump) recurse through it:
  // nesting is bounded as in the pickle reader. Snapshots nest about 6 levels deep.
  constexpr int kMaxDepth = 200;
  bool too_deep = false;
  *out = json::parse(data, [&](int depth, json::parse_event_t, json&) {
    too_deep = too_deep || depth > kMaxDepth;
    return true;
  }, false);
  if (out->is_discarded()) {
    *error = path + " is neither JSON nor a pickle, or it is truncated";
    return false;
  }
  if (too_deep) {
    *out = json();
    *error = path + ": nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  if (out->is_array()) *out = json{{"segments", std::move(*out)}};
  return true;
}

bool read_trace(const std::string& path, TraceFile* out, std::string* error) {
  OpenFile f;
  if (!open_file(path, &f, error)) return false;
  const int kind = peek_kind(*f.stream);
  bool ok = false;
  if (kind == '{') {
    ok = read_json_stream(*f.stream, out, error);
  } else if (kind == 'T') {
    ok = read_rmm_csv(*f.stream, out, error);
  } else if (kind == 0x80) {
    std::string data;
    json doc;
    ok = read_all(*f.stream, &data, *f.buffer, error) && pickle_to_json(data, &doc, error) &&
         trace_from_document(doc, out, error);
    out->format = "pickle";
  } else {
    *error = path + ": not a JSON snapshot, a pickle or an RMM log";
  }
  if (ok && f.buffer->failed()) {
    *error = "corrupt or truncated gzip data in " + path;
    ok = false;
  }
  return ok;
}

}  // namespace cudalloc::snapshot
