// The input layer and value checks shared by every reader (snapshot/input_file.h,
// snapshot/values.h): each hostile input is refused the same way by read_trace (replay),
// read_snapshot (inspect, convert) and load_snapshot (view, diff).
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "snapshot/input_file.h"
#include "snapshot/pickle.h"
#include "snapshot/snapshot_loader.h"
#include "snapshot/trace_reader.h"
#include "temp_files.h"

using namespace cudalloc::snapshot;
using cudalloc::test::temp_file;
using cudalloc::test::temp_path;
using nlohmann::json;

namespace {


struct Outcome {
  bool ok;
  std::string error;
};

// The three readers on one path.
std::vector<std::pair<const char*, Outcome>> read_everywhere(const std::string& path) {
  std::vector<std::pair<const char*, Outcome>> out;
  const auto run = [&](const char* name, const std::function<bool(std::string*)>& read) {
    std::string error;
    const bool ok = read(&error);
    out.push_back({name, {ok, error}});
  };
  run("read_trace", [&](std::string* e) { TraceFile t; return read_trace(path, &t, e); });
  run("read_snapshot", [&](std::string* e) { json d; return read_snapshot(path, &d, e); });
  run("load_snapshot", [&](std::string* e) { LoadedSnapshot s; return load_snapshot(path, &s, e); });
  return out;
}

// Every reader refuses `path` with a message holding `expect`.
void refused_everywhere(const std::string& path, const std::string& expect) {
  for (const auto& [reader, outcome] : read_everywhere(path)) {
    INFO(reader << ": " << outcome.error);
    CHECK_FALSE(outcome.ok);
    CHECK(outcome.error.find(expect) != std::string::npos);
  }
}

void accepted_everywhere(const std::string& path) {
  for (const auto& [reader, outcome] : read_everywhere(path)) {
    INFO(reader << ": " << outcome.error);
    CHECK(outcome.ok);
  }
}

std::string trace_with_size(const std::string& size) {
  return R"({"segments": [], "device_traces": [[{"action": "alloc", "addr": 4096, "size": )" +
         size + R"(, "stream": 0}]]})";
}

std::string nested_meta(int levels) {  // the top object is level 1, "meta" holds the rest
  return R"({"segments": [], "device_traces": [], "meta": )" + std::string(levels - 1, '[') +
         std::string(levels - 1, ']') + "}";
}

}  // namespace

TEST_CASE("every reader refuses nesting past 200 levels, and takes 200", "[reader][input]") {
  accepted_everywhere(temp_file("depth200.json", nested_meta(200)));
  refused_everywhere(temp_file("depth201.json", nested_meta(201)), "nested deeper than 200 levels");
  // 10^6 levels used to overflow the stack of view, diff and replay (under "meta").
  refused_everywhere(temp_file("deep.json", nested_meta(1000000)), "nested deeper than 200 levels");
  // Pickles: the same bound.
  json doc = json::array();
  for (int i = 0; i < 200; ++i) doc = json::array({doc});
  json out;
  std::string error;
  CHECK_FALSE(pickle_to_json(json_to_pickle(doc), &out, &error));  // 201 levels
  CHECK(error.find("nested deeper than 200 levels") != std::string::npos);
  REQUIRE(pickle_to_json(json_to_pickle(doc[0]), &out, &error));  // 200 levels
  CHECK(out == doc[0]);
}

TEST_CASE("readers take regular files only: FIFOs, directories and devices are named",
          "[reader][input]") {
  const std::string fifo = temp_path("fifo");
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  refused_everywhere(fifo, "is a FIFO (named pipe), not a trace or snapshot file");  // no hang
  ::unlink(fifo.c_str());
  refused_everywhere("/tmp", "is a directory, not a trace or snapshot file");
  refused_everywhere("/dev/zero", "is a character device");
  refused_everywhere(temp_path("missing.json"), "cannot open: No such file");
}

TEST_CASE("decompressed input is bounded, with the bound and the way to raise it named",
          "[reader][input]") {
  const std::string padded = trace_with_size("512") + std::string(2 << 20, ' ');  // > 2 MiB
  const std::string bomb = temp_file("bomb.json.gz", padded, true);
  set_max_input_bytes(1 << 20);
  refused_everywhere(bomb, "larger than 1.00 MiB once decompressed, the bound on input (1048576 "
                           "bytes); raise it with --max-input BYTES or CUDALLOC_MAX_INPUT");
  set_max_input_bytes(padded.size());  // exactly the bound: accepted
  accepted_everywhere(bomb);
  set_max_input_bytes(padded.size() - 1);
  refused_everywhere(bomb, "larger than");
  set_max_input_bytes(0);  // back to the environment's or the default
  CHECK(max_input_bytes() == kDefaultMaxInputBytes);
  ::setenv(kMaxInputEnv, "2M", 1);
  CHECK(max_input_bytes() == 2u << 20);
  ::setenv(kMaxInputEnv, "lots", 1);
  CHECK(max_input_bytes() == kDefaultMaxInputBytes);
  ::unsetenv(kMaxInputEnv);
  std::uint64_t bytes = 0;
  CHECK_FALSE(parse_max_input("0", &bytes));
  CHECK(parse_max_input("16G", &bytes));
  CHECK(bytes == std::uint64_t{16} << 30);
}

TEST_CASE("a UTF-8 byte-order mark is skipped by every reader", "[reader][input]") {
  accepted_everywhere(temp_file("bom.json", "\xEF\xBB\xBF" + trace_with_size("512")));
  accepted_everywhere(temp_file("bom.json.gz", "\xEF\xBB\xBF" + trace_with_size("512"), true));
  TraceFile t;
  std::string error;
  REQUIRE(read_trace(temp_file("bom.csv", "\xEF\xBB\xBFThread,Time,Action,Pointer,Size,Stream\n"
                                          "1,0,allocate,0x10,8,0\n"),
                     &t, &error));
  CHECK(t.events.size() == 1);
}

TEST_CASE("sizes outside 0..2^50 are refused in every format, by every reader",
          "[reader][input]") {
  const std::string range = "'size' must be an integer from 0 to 1125899906842624";
  for (const char* size : {"-5", "18446744073709551615", "1125899906842625", "1e30", "\"8\""}) {
    INFO(size);
    refused_everywhere(temp_file("size.json", trace_with_size(size)),
                       range + " (2^50 bytes, the largest request), not ");
  }
  accepted_everywhere(temp_file("max.json", trace_with_size("1125899906842624")));
  // Pickles hold signed integers.
  const json doc = json::parse(trace_with_size("-5"));
  refused_everywhere(temp_file("negative.pickle", json_to_pickle(doc)), range);
  // Segments and blocks of a snapshot (read_trace reads only events).
  const std::string seg = R"({"segments": [{"address": 0, "total_size": 2097152, "device": 0,
      "blocks": [{"address": 0, "size": -5, "state": "active_allocated"}]}]})";
  json d;
  LoadedSnapshot s;
  std::string error;
  CHECK_FALSE(read_snapshot(temp_file("block.json", seg), &d, &error));
  CHECK(error.find("segments[0].blocks[0]: " + range) != std::string::npos);
  CHECK_FALSE(load_snapshot(temp_file("block.json", seg), &s, &error));
  CHECK(error.find("segments[0].blocks[0]: " + range) != std::string::npos);
}

TEST_CASE("RMM CSV: CRLF line ends are read, sizes outside 0..2^50 refused", "[reader][rmm]") {
  const std::string header = "Thread,Time,Action,Pointer,Size,Stream\r\n";
  TraceFile t;
  std::string error;
  REQUIRE(read_trace(temp_file("crlf.csv", header + "1,0,allocate,0x10,8,0x0\r\n1,0,free,0x10,8,0x0\r\n"),
                     &t, &error));
  REQUIRE(t.events.size() == 2);
  CHECK(t.events[0].size == 8);
  CHECK(t.events[1].action == cudalloc::TraceAction::free_completed);
  for (const char* size : {"-5", "18446744073709551615", "99999999999999999999", "1125899906842625",
                           "abc", "8x", ""}) {
    INFO(size);
    TraceFile bad;
    CHECK_FALSE(read_trace(temp_file("bad.csv", header + "1,0,allocate,0x10," + size + ",0\n"), &bad,
                           &error));
    CHECK(error.find("'Size' must be an integer from 0 to 1125899906842624") != std::string::npos);
    CHECK(error.find("on RMM log line 2") != std::string::npos);
  }
}

TEST_CASE("device numbers outside 0..2^31 - 1 are refused by the document readers",
          "[reader][input]") {
  for (const char* device : {"4294967296", "2147483648", "-1"}) {
    INFO(device);
    const std::string seg =
        std::string(R"({"segments": [{"device": )") + device + R"(, "total_size": 0}]})";
    json d;
    LoadedSnapshot s;
    std::string error;
    CHECK_FALSE(read_snapshot(temp_file("device.json", seg), &d, &error));
    CHECK(error.find("segments[0]: 'device' must be an integer from 0 to 2147483647") !=
          std::string::npos);
    CHECK_FALSE(load_snapshot(temp_file("device.json", seg), &s, &error));
    CHECK(error.find("segments[0]: 'device' must be an integer from 0 to 2147483647") !=
          std::string::npos);
  }
}

TEST_CASE("cudalloc's own section is checked too: device numbers and slab sizes",
          "[reader][input]") {
  const std::string slab = R"({"segments": [], "cudalloc": {"devices": [{"device": 0,
      "slabs": [{"address": 4096, "bytes": -1}]}]}})";
  json d;
  std::string error;
  CHECK_FALSE(read_snapshot(temp_file("slab.json", slab), &d, &error));
  CHECK(error.find("cudalloc.devices[0].slabs[0]: 'bytes' must be an integer from 0") !=
        std::string::npos);
}

TEST_CASE("documents are built as json::parse builds them", "[reader][input]") {
  const std::string text = R"({"segments": [{"address": 1, "blocks": [{"size": 2}, {"size": 3}],
      "device": 0}], "meta": {"a": [1, 2.5, "x", null, true, {"b": []}], "a2": {}},
      "device_traces": [[{"action": "alloc", "addr": 1, "size": 2}], []]})";
  json doc;
  std::string error;
  REQUIRE(read_snapshot(temp_file("doc.json", text), &doc, &error));
  CHECK(doc == json::parse(text));
  // load_snapshot leaves the events out and keeps each device's list.
  LoadedSnapshot s;
  REQUIRE(load_snapshot(temp_file("doc.json", text), &s, &error));
  CHECK(s.doc["device_traces"] == json::parse("[[], []]"));
  CHECK(s.doc["meta"] == json::parse(text)["meta"]);
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].size == 2);
}
