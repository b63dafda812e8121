#include "snapshot/snapshot_encode.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "snapshot/input_file.h"
#include "snapshot/pickle.h"
#include "snapshot/trace_reader.h"
#include "snapshot/values.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

// Each device's events, already encoded, in order: JSON items joined by commas, or pickle
// values.
struct EncodedTraces {
  SnapshotFormat format;
  std::vector<std::string> devices;
  std::size_t events = 0;

  void add(std::size_t device, const json& event) {
    if (devices.size() <= device) devices.resize(device + 1);
    std::string& out = devices[device];
    if (format == SnapshotFormat::json) {
      if (!out.empty()) out.push_back(',');
      out += event.dump();
    } else {
      pickle_value(out, event);
    }
    ++events;
  }
  const std::string& of(std::size_t device) const {
    static const std::string none;
    return device < devices.size() ? devices[device] : none;
  }
};

// Encodes events on a second thread while the first parses: parsing and encoding each take
// about half of a conversion, so the two overlap. Events travel in batches; the parser blocks
// when kMaxPending batches wait, which bounds the memory in flight.
class EncoderThread {
 public:
  explicit EncoderThread(EncodedTraces* traces) : traces_(traces), thread_([this] { run(); }) {}
  ~EncoderThread() { finish(); }
  EncoderThread(const EncoderThread&) = delete;
  EncoderThread& operator=(const EncoderThread&) = delete;

  void add(std::size_t device, json&& event) {
    batch_.emplace_back(device, std::move(event));
    if (batch_.size() == kBatch) hand_over();
  }
  // Encodes what is left and joins the thread; the traces are complete afterwards.
  void finish() {
    if (!thread_.joinable()) return;
    hand_over();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }

 private:
  using Batch = std::vector<std::pair<std::size_t, json>>;
  static constexpr std::size_t kBatch = 4096, kMaxPending = 8;

  void hand_over() {
    if (batch_.empty()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [this] { return pending_.size() < kMaxPending; });
    pending_.push_back(std::move(batch_));
    batch_ = Batch();
    lock.unlock();
    ready_.notify_all();
  }
  void run() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return !pending_.empty() || done_; });
      if (pending_.empty()) return;
      Batch batch = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      room_.notify_all();
      for (const auto& [device, event] : batch) traces_->add(device, event);
    }
  }

  EncodedTraces* traces_;
  Batch batch_;
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<Batch> pending_;
  bool done_ = false;
  std::thread thread_;  // last: it starts once the rest is constructed
};

// Parses the JSON document, handing each event of device_traces (depth 3 below it) to the
// encoder instead of keeping it; the device lists stay, emptied.
bool parse_streaming(InputFile& in, json* doc, EncodedTraces* traces, std::string* error) {
  EncoderThread encoder(traces);
  auto encode = [&](std::size_t device, std::size_t index, json& event, std::string* why) {
    if (!check_event(event, why)) {
      *why += " (device " + std::to_string(device) + ", event " + std::to_string(index) + ")";
      return false;
    }
    encoder.add(device, std::move(event));
    return true;
  };
  const bool parsed = parse_snapshot_document(in, encode, doc, error);
  encoder.finish();
  return parsed;
}

void write_json(const json& doc, const EncodedTraces& traces, std::string* out) {
  *out = "{";
  bool first = true;
  for (const auto& [key, value] : doc.items()) {
    if (!first) out->push_back(',');
    first = false;
    *out += json(key).dump() + ":";
    if (key != "device_traces" || !value.is_array()) {
      *out += value.dump();
      continue;
    }
    out->push_back('[');
    for (std::size_t d = 0; d < value.size(); ++d) *out += (d ? ",[" : "[") + traces.of(d) + "]";
    out->push_back(']');
  }
  out->push_back('}');
}

void write_pickle(const json& doc, const EncodedTraces& traces, std::string* out) {
  out->clear();
  pickle_begin(*out);
  pickle_open_dict(*out, !doc.empty());
  for (const auto& [key, value] : doc.items()) {
    pickle_value(*out, json(key));
    if (key != "device_traces" || !value.is_array()) {
      pickle_value(*out, value);
      continue;
    }
    pickle_open_list(*out, !value.empty());
    for (std::size_t d = 0; d < value.size(); ++d) {
      const std::string& events = traces.of(d);
      pickle_open_list(*out, !events.empty());
      if (events.empty()) continue;
      *out += events;
      pickle_close_list(*out);
    }
    if (!value.empty()) pickle_close_list(*out);
  }
  if (!doc.empty()) pickle_close_dict(*out);
  pickle_end(*out);
}

bool encode_json_input(InputFile& in, SnapshotFormat format, std::string* out,
                       std::string* error) {
  json doc;
  EncodedTraces traces{format, {}, 0};
  if (!parse_streaming(in, &doc, &traces, error)) return false;
  if (doc.is_array()) doc = json{{"segments", std::move(doc)}};  // as PyTorch's tools read it
  if (!check_document(doc, error)) return false;
  if (!doc.is_object()) {
    *out = format == SnapshotFormat::json ? doc.dump() : json_to_pickle(doc);
    return true;
  }
  if (format == SnapshotFormat::json) write_json(doc, traces, out);
  else write_pickle(doc, traces, out);
  return true;
}

}  // namespace

bool encode_snapshot(const std::string& path, SnapshotFormat format, std::string* out,
                     std::string* error) {
  InputFile in;
  if (!in.open(path, error)) {
    *error = path + ": " + *error;
    return false;
  }
  if (in.peek_content() != 0x80) {
    if (encode_json_input(in, format, out, error)) return true;
    *error = path + ": " + *error;
    return false;
  }
  json doc;  // a pickle: read whole, as every reader does
  if (!read_snapshot(path, &doc, error)) return false;
  *out = format == SnapshotFormat::json ? doc.dump() : json_to_pickle(doc);
  return true;
}

}  // namespace cudalloc::snapshot
