// Fuzz target: the trace and snapshot readers (snapshot/trace_reader.h, snapshot_loader.h) on a
// whole file, as `cudalloc replay`, `inspect`, `convert`, `view` and `diff` read it: JSON,
// gzip-compressed JSON, pickle (plain or gzip) and RMM CSV, told apart by their first byte
// after decompression.
//
// The input bytes become the file's contents (an in-memory file, reused across runs), then:
//   read_trace     must not crash; an accepted trace names a known format, devices >= 0 and
//                  sizes within 0..2^50 (snapshot/values.h);
//   read_snapshot  must not crash; an accepted document must survive a pickle round trip
//                  (doc_compare.h), as `cudalloc convert` relies on;
//   load_snapshot  must not crash; it is never more lenient than read_snapshot, and its
//                  events obey the same bounds;
//   differential   when both accept a JSON document, read_trace's streaming reader and
//                  trace_from_document on the whole document must give the same events.
// Decompression is bounded to 1 MiB (the readers' own bound, set lower) so that a gzip input
// of a few kB stays quick to read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "doc_compare.h"
#include "snapshot/input_file.h"
#include "snapshot/snapshot_loader.h"
#include "snapshot/trace_reader.h"
#include "snapshot/values.h"

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

// load_snapshot: no crash; a message on refusal; accepted only what read_snapshot accepts.
void check_loader(const std::string& path, bool snapshot_ok) {
  cudalloc::snapshot::LoadedSnapshot loaded;
  std::string error;
  if (!cudalloc::snapshot::load_snapshot(path, &loaded, &error)) {
    if (error.empty()) violation("load_snapshot refused the input without a message");
    return;
  }
  if (!snapshot_ok) violation("load_snapshot accepted what read_snapshot refuses");
  for (const auto& e : loaded.events) {
    if (e.size > cudalloc::snapshot::kMaxSize || e.device < 0) {
      violation("load_snapshot gave an event past the readers' bounds");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cudalloc::snapshot::set_max_input_bytes(1 << 20);
  return 0;
}

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
      if (r.size > cudalloc::snapshot::kMaxSize) violation("read_trace gave a size past 2^50");
    }
  } else if (error.empty()) {
    violation("read_trace refused the input without a message");
  }

  nlohmann::json doc;
  error.clear();
  const bool snapshot_ok = cudalloc::snapshot::read_snapshot(path, &doc, &error);
  check_loader(path, snapshot_ok);
  if (!snapshot_ok) {
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
