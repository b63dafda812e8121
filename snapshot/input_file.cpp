#include "snapshot/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <streambuf>

#include "snapshot/values.h"
#include "util/units.h"

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

std::atomic<std::uint64_t> g_max_input_bytes{0};  // 0: not set, use the environment's
std::atomic<ReadProgress> g_read_progress{nullptr};

// What a file that is not a regular one is, for the message that refuses it.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// Opens `path` for reading without blocking: open(2) of a FIFO with no writer would wait for
// one forever, so the descriptor is opened non-blocking and checked before anything reads it.
int open_regular_file(const std::string& path, std::uint64_t* size, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *error = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *error = std::string("is ") + file_kind(st.st_mode) +
             ", not a trace or snapshot file (readers take regular files only)";
  } else {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = std::uint64_t(st.st_size);
    return fd;
  }
  ::close(fd);
  return -1;
}

}  // namespace

// A read-only streambuf over zlib's gzFile (which reads gzip and plain files alike), counting
// the bytes it hands out against the bound, and reporting how far it has read the file.
class InputFile::Buffer : public std::streambuf {
 public:
  struct Source {
    std::string path;
    std::uint64_t size;  // of the file as stored
  };
  Buffer(gzFile file, std::uint64_t bound, Source source)
      : file_(file), bound_(bound), source_(std::move(source)) {}
  ~Buffer() override { gzclose(file_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const std::string& failure() const { return failure_; }

 protected:
  int_type underflow() override {
    if (!failure_.empty()) return traits_type::eof();
    const int n = gzread(file_, buffer_, sizeof buffer_);
    report(n > 0 ? std::uint64_t(std::max<z_off_t>(0, gzoffset(file_))) : source_.size);
    if (n <= 0) {
      int code = Z_OK;
      const char* message = gzerror(file_, &code);
      if (code == Z_ERRNO) {
        failure_ = std::string("read error: ") + std::strerror(errno);
      } else if (n < 0 || code != Z_OK) {
        failure_ = std::string("corrupt or truncated gzip data (") + message + ")";
      }
      return traits_type::eof();
    }
    if (std::uint64_t(n) > bound_ - delivered_) {
      failure_ = "larger than " + format_bytes(bound_) +
                 " once decompressed, the bound on input (" + std::to_string(bound_) +
                 " bytes); raise it with --max-input BYTES or " + kMaxInputEnv;
      return traits_type::eof();
    }
    char* start = buffer_;
    // A UTF-8 byte-order mark opens some files written on Windows; it is no part of the data.
    if (delivered_ == 0 && n >= 3 && std::memcmp(buffer_, "\xEF\xBB\xBF", 3) == 0) start += 3;
    delivered_ += std::uint64_t(n);
    setg(start, start, buffer_ + n);
    return gptr() < egptr() ? traits_type::to_int_type(*gptr()) : underflow();
  }

 private:
  void report(std::uint64_t read) const {
    if (ReadProgress progress = g_read_progress.load(); progress != nullptr) {
      progress(source_.path, std::min(read, source_.size), source_.size);
    }
  }

  gzFile file_;
  std::uint64_t bound_;
  Source source_;
  std::uint64_t delivered_ = 0;  // decompressed bytes read so far, a byte-order mark included
  std::string failure_;
  char buffer_[1 << 16];
};

InputFile::InputFile() = default;
InputFile::~InputFile() = default;

void set_read_progress(ReadProgress report) { g_read_progress.store(report); }

bool InputFile::open(const std::string& path, std::string* error) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, &size, error);
  if (fd < 0) return false;
  gzFile file = gzdopen(fd, "rb");
  if (file == nullptr) {
    ::close(fd);
    *error = "cannot open: out of memory";
    return false;
  }
  gzbuffer(file, 1 << 17);
  buffer_ = std::make_unique<Buffer>(file, max_input_bytes(), Buffer::Source{path, size});
  stream_ = std::make_unique<std::istream>(buffer_.get());
  return true;
}

int InputFile::peek_content() {
  int c = stream_->peek();
  while (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
    stream_->get();
    c = stream_->peek();
  }
  return c;
}

bool InputFile::read_all(std::string* data, std::string* error) {
  data->assign(std::istreambuf_iterator<char>(*stream_), {});
  if (!failure().empty()) {
    *error = failure();
    return false;
  }
  return true;
}

const std::string& InputFile::failure() const {
  static const std::string none;
  return buffer_ ? buffer_->failure() : none;
}

std::uint64_t max_input_bytes() {
  if (const std::uint64_t set = g_max_input_bytes.load(std::memory_order_relaxed)) return set;
  std::uint64_t bytes = 0;
  const char* env = std::getenv(kMaxInputEnv);
  return env != nullptr && parse_max_input(env, &bytes) ? bytes : kDefaultMaxInputBytes;
}

void set_max_input_bytes(std::uint64_t bytes) {
  g_max_input_bytes.store(bytes, std::memory_order_relaxed);
}

bool parse_max_input(const std::string& text, std::uint64_t* bytes) {
  std::size_t parsed = 0;
  if (!parse_bytes(text, &parsed) || parsed == 0) return false;
  *bytes = parsed;
  return true;
}

// ---- JSON with the nesting bound ---------------------------------------------------------

std::string nesting_error() {
  return "nested deeper than " + std::to_string(kMaxNesting) + " levels (the bound of every reader)";
}

bool JsonEvents::parse_error(std::size_t position, const std::string&,
                             const nlohmann::detail::exception& e) {
  error = "malformed JSON at byte " + std::to_string(position) +
          " (truncated, or neither JSON nor a pickle): " + e.what();
  return false;
}

namespace {

// Forwards every event to `inner`, refusing a container past the nesting bound before the
// handler sees it.
class NestingGuard : public nlohmann::json_sax<json> {
 public:
  explicit NestingGuard(JsonEvents* inner) : inner_(inner) {}
  bool too_deep = false;

  bool null() override { return inner_->null(); }
  bool boolean(bool v) override { return inner_->boolean(v); }
  bool number_integer(number_integer_t v) override { return inner_->number_integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return inner_->number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) override { return inner_->number_float(v, s); }
  bool string(string_t& v) override { return inner_->string(v); }
  bool binary(binary_t& v) override { return inner_->binary(v); }
  bool key(string_t& k) override { return inner_->key(k); }
  bool start_object(std::size_t n) override { return open() && inner_->start_object(n); }
  bool start_array(std::size_t n) override { return open() && inner_->start_array(n); }
  bool end_object() override { return close() && inner_->end_object(); }
  bool end_array() override { return close() && inner_->end_array(); }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) override {
    return inner_->parse_error(position, token, e);
  }

 private:
  bool open() {
    too_deep = !within_nesting_bound(++level_);
    return !too_deep;
  }
  bool close() {
    --level_;
    return true;
  }
  JsonEvents* inner_;
  std::size_t level_ = 0;
};

// Builds a document from SAX events as json::parse does, offering each value inside the top
// level to `filter`. Not nlohmann's callback parser: in 3.11.2 it scans the enclosing
// container after every object it closes, quadratic in a list of 10^6 events.
//
// Only the last value of each open container is itself open, so growing a container (which may
// move its elements) never moves a value on the stack.
class DocumentBuilder : public JsonEvents {
 public:
  DocumentBuilder(json* root, const JsonFilter& filter) : root_(root), filter_(filter) {}

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool v) override { return add(json(v)); }
  bool number_integer(number_integer_t v) override { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(json(v)); }
  bool string(string_t& v) override { return add(json(std::move(v))); }
  bool binary(binary_t& v) override { return add(json::binary(std::move(v))); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    if (open_.size() == 1) top_key_ = key_;
    return true;
  }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

 private:
  struct Open {
    json* value;
    std::string key;  // its key in the enclosing object
  };
  json* place(json v) {
    if (open_.empty()) return &(*root_ = std::move(v));
    json& parent = *open_.back().value;
    if (!parent.is_array()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }
  // Offers the value just completed (the last of the innermost open container) to the filter.
  void offer(json* value, const std::string& key) {
    if (open_.empty() || !filter_ || filter_(JsonPlace{open_.size(), top_key_}, *value)) return;
    json& parent = *open_.back().value;
    if (parent.is_array()) parent.erase(parent.size() - 1);
    else parent.erase(key);
  }
  bool add(json v) {
    offer(place(std::move(v)), key_);
    return true;
  }
  bool open(json container) {
    open_.push_back({place(std::move(container)), key_});
    return true;
  }
  bool close() {
    const Open done = std::move(open_.back());
    open_.pop_back();
    offer(done.value, done.key);
    return true;
  }

  json* root_;
  const JsonFilter& filter_;
  std::vector<Open> open_;
  std::string key_;
  std::string top_key_;
};

}  // namespace

bool parse_json_events(InputFile& input, JsonEvents* events, std::string* error) {
  NestingGuard guard(events);
  // The input may have stopped early in white space after complete JSON: its failure counts.
  const bool parsed = json::sax_parse(input.stream(), &guard, json::input_format_t::json, true, true);
  if (parsed && input.failure().empty()) return true;
  *error = !input.failure().empty() ? input.failure()
           : guard.too_deep         ? nesting_error()
           : !events->error.empty() ? events->error
                                    : "malformed JSON";
  return false;
}

bool parse_json_document(InputFile& input, const JsonFilter& filter, json* out,
                         std::string* error) {
  DocumentBuilder builder(out, filter);
  if (parse_json_events(input, &builder, error)) return true;
  *out = json();
  return false;
}

bool parse_snapshot_document(InputFile& input, const TraceEventSink& sink, json* out,
                             std::string* error) {
  std::size_t device = 0, index = 0, traces_seen = 0;
  std::string event_error;
  auto keep = [&](const JsonPlace& place, json& value) {
    if (place.top_key != "device_traces") return true;
    if (place.depth == 1 && ++traces_seen > 1 && event_error.empty()) {
      event_error = kDuplicateTraces;
    }
    if (place.depth == 2) {  // a device's list, emptied by now: the next one begins
      ++device;
      index = 0;
    }
    if (place.depth != 3) return true;
    if (event_error.empty() && !sink(device, index, value, &event_error) &&
        event_error.empty()) {
      event_error = "trace event " + std::to_string(index) + " of device list " +
                    std::to_string(device) + " refused";
    }
    ++index;
    return false;  // taken by the sink: not kept in the document
  };
  if (!parse_json_document(input, keep, out, error)) return false;
  if (event_error.empty()) return true;
  *error = event_error;
  return false;
}

}  // namespace cudalloc::snapshot
