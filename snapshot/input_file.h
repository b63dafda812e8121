// The input layer of every reader of traces and snapshots (trace_reader, snapshot_loader): one
// way to open a file and one bound on nesting, so that every command refuses hostile input the
// same way and a reader written later (a linear streaming one) gets the same guards by using it.
//
// InputFile:
//   - regular files only: a FIFO without a writer would block the open forever, a device such
//     as /dev/zero never ends; a directory is named as such
//   - gzip or plain, told apart by zlib from the first bytes (gzip's magic number)
//   - at most max_input_bytes() bytes once decompressed: deflate packs up to ~1000 bytes into
//     one, so a 2 MB file can stand for 2 GiB
//   - a UTF-8 byte-order mark at the start is skipped
// parse_json_events / parse_json_document: JSON streamed through a SAX handler, or built into a
// document, from an InputFile; both refuse nesting past kMaxNesting as soon as it is reached.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace cudalloc::snapshot {

// The default bound on decompressed input: 7 times the largest trace recorded here (140 MB),
// and what caps the work a small hostile file can cause (docs/reliability.md, "Reader
// hardening": a document held in memory costs up to 16-30 times its text). Larger
// recordings (10^6 events with stack frames) need --max-input or CUDALLOC_MAX_INPUT.
constexpr std::uint64_t kDefaultMaxInputBytes = std::uint64_t{1} << 30;
// The environment variable that sets the bound (a size: 512M, 16G, ...).
constexpr const char* kMaxInputEnv = "CUDALLOC_MAX_INPUT";

// The bound in force: set_max_input_bytes's, else CUDALLOC_MAX_INPUT's, else the default.
std::uint64_t max_input_bytes();
// Sets the bound for the rest of the process (the CLI's --max-input). 0 restores the default.
void set_max_input_bytes(std::uint64_t bytes);
// `text` as a bound: a size of at least one byte, as parse_bytes reads it.
bool parse_max_input(const std::string& text, std::uint64_t* bytes);

// How far the reading of a file has got: `read` bytes of the file as it is stored (gzip or
// plain) out of `size`. Every InputFile calls it as it reads (about every 64 KiB of data) and
// once at the end (read == size). The program sets it once, before it reads (the CLI's
// progress on stderr); null, the default, reports nothing.
using ReadProgress = void (*)(const std::string& path, std::uint64_t read, std::uint64_t size);
void set_read_progress(ReadProgress report);

class InputFile {
 public:
  InputFile();
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Opens `path`; false with *error (without the path: callers name it) when it cannot be
  // opened or is not a regular file.
  bool open(const std::string& path, std::string* error);

  // The decompressed bytes after any byte-order mark. It stops early (EOF) when the input
  // fails; failure() then says why.
  std::istream& stream() { return *stream_; }
  // The first byte that is not white space, not consumed; EOF when there is none.
  int peek_content();
  // The rest of the input into *data; false with *error when the input failed.
  bool read_all(std::string* data, std::string* error);
  // Why the input stopped early (corrupt or truncated gzip data, a read error, past the
  // bound); empty while it has not.
  const std::string& failure() const;

 private:
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<std::istream> stream_;
};

// Every reader's bound on the nesting of JSON and pickle documents. The code that walks a
// document (copies, dump, the pickle writer, inspect, view) recurses through it; snapshots
// nest about 6 levels deep. The top-level container is level 1.
constexpr std::size_t kMaxNesting = 200;
inline bool within_nesting_bound(std::size_t level) { return level <= kMaxNesting; }
// "nested deeper than 200 levels (the bound of every reader)"
std::string nesting_error();

// A SAX handler whose refusals carry a message; parse errors are reported with their offset.
class JsonEvents : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string error;
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) override;
};

// Streams the JSON on `input` through `events`. False with *error: the input's failure, the
// nesting bound, or the handler's message, in that order.
bool parse_json_events(InputFile& input, JsonEvents* events, std::string* error);

// Where a value sits in a document being parsed: inside `depth` containers (1: an item of the
// top level), under the top-level object's key `top_key` ("" above it).
struct JsonPlace {
  std::size_t depth;
  const std::string& top_key;
};
// Offered each completed value inside the top level (scalars, and containers once closed); false
// leaves the value out of the document.
using JsonFilter = std::function<bool(const JsonPlace& place, nlohmann::json& value)>;

// Parses the JSON document on `input`, leaving out what `filter` (may be empty) refuses. False
// with *error as parse_json_events gives it.
bool parse_json_document(InputFile& input, const JsonFilter& filter, nlohmann::json* out,
                         std::string* error);

// Takes one trace event of a snapshot's device_traces (an item of an item of it): its device
// list's position, its position in that list, the event itself (movable). False with *error
// refuses it.
using TraceEventSink = std::function<bool(std::size_t device, std::size_t index,
                                          nlohmann::json& event, std::string* error)>;

// Parses a memory snapshot's JSON as parse_json_document does, except that each trace event
// goes to `sink` instead of into *out (whose device lists stay, emptied). A second top-level
// device_traces key (a parser would keep only the last) or the first event the sink refuses
// stops the delivery of events; the parse goes on, so that malformed JSON after it is reported
// first. False with *error: the parse's error, else the events' one.
bool parse_snapshot_document(InputFile& input, const TraceEventSink& sink, nlohmann::json* out,
                             std::string* error);

}  // namespace cudalloc::snapshot
