// Fuzz target: the trace and snapshot readers (snapshot/trace_reader.h) on a whole file, as
// `cudalloc replay`, `inspect` and `convert` read it: JSON, gzip-compressed JSON, pickle (plain
// or gzip) and RMM CSV, told apart by their first byte after decompression.
//
// The input bytes become the file's contents (an in-memory file, reused across runs), then:
//   read_trace     must not crash; an accepted trace names a known format and devices >= 0;
//   read_snapshot  must not crash; an accepted document must survive a pickle round trip
//                  (doc_compare.h), as `cudalloc convert` relies on;
//   differential   when both accept a JSON document, read_trace's streaming reader and
//                  trace_from_document on the whole document must give the same events.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "doc_compare.h"
#include "snapshot/trace_reader.h"

namespace {

using cudalloc::snapshot::TraceFile;
using cudalloc::snapshot::TraceRecord;

[[noreturn]] void violation(const std::string& what) {
  std::fprintf(stderr, "fuzz_trace_reader: %s\n", what.c_str());
  std::abort();
}

// The path of a memory file holding exactly `data`.
const std::string& file_with(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("fuzz-trace", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 ||
      (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    violation("cannot write the in-memory input file");
  }
  return path;
}

bool same_events(const TraceFile& a, const TraceFile& b) {
  if (a.events.size() != b.events.size()) return false;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const TraceRecord& x = a.events[i];
    const TraceRecord& y = b.events[i];
    if (x.action != y.action || x.addr != y.addr || x.size != y.size || x.stream != y.stream ||
        x.device != y.device) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = file_with(data, size);

  TraceFile streamed;
  std::string error;
  const bool trace_ok = cudalloc::snapshot::read_trace(path, &streamed, &error);
  if (trace_ok) {
    if (streamed.format != "json" && streamed.format != "pickle" &&
        streamed.format != "rmm-csv") {
      violation("read_trace accepted an unknown format '" + streamed.format + "'");
    }
    for (const TraceRecord& r : streamed.events) {
      if (r.device < 0) violation("read_trace gave an event of a negative device");
    }
  } else if (error.empty()) {
    violation("read_trace refused the input without a message");
  }

  nlohmann::json doc;
  error.clear();
  if (!cudalloc::snapshot::read_snapshot(path, &doc, &error)) {
    if (error.empty()) violation("read_snapshot refused the input without a message");
    return 0;
  }
  cudalloc::fuzz::check_pickle_round_trip(doc, "fuzz_trace_reader");

  if (trace_ok && streamed.format == "json") {
    TraceFile whole;
    if (cudalloc::snapshot::trace_from_document(doc, &whole, &error) &&
        !same_events(streamed, whole)) {
      violation("the streaming JSON reader and the document reader disagree on the events");
    }
  }
  return 0;
}
