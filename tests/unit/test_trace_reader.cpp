#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "snapshot/pickle.h"
#include "snapshot/trace_reader.h"
#include "temp_files.h"

using namespace cudalloc;
using namespace cudalloc::snapshot;
using cudalloc::test::temp_file;

namespace {


const char* kTrace = R"({"segments": [], "meta": {"workload": "t", "native": {"peak_reserved": 9}},
  "device_traces": [[
    {"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0},
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": [{"name": "f", "line": 1}]},
    {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0},
    {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0}
  ], [
    {"action": "alloc", "addr": 8192, "size": 1024, "stream": 7},
    {"action": "snapshot", "addr": 0, "size": 0}
  ]]})";

}  // namespace

TEST_CASE("JSON traces stream into records with their meta", "[reader]") {
  for (bool gzip : {false, true}) {
    INFO(gzip);
    TraceFile t;
    std::string error;
    REQUIRE(read_trace(temp_file("trace.json", kTrace, gzip), &t, &error));
    CHECK(t.format == "json");
    REQUIRE(t.events.size() == 5);
    CHECK(t.events[1].action == TraceAction::alloc);
    CHECK(t.events[1].addr == 4096);
    CHECK(t.events[3].action == TraceAction::free_completed);
    CHECK(t.events[4].device == 1);
    CHECK(t.events[4].stream == 7);
    CHECK(t.other_events == 1);
    CHECK(t.meta["workload"] == "t");
    CHECK(t.meta["native"]["peak_reserved"] == 9);
  }
}

TEST_CASE("a pickled snapshot reads like its JSON", "[reader][pickle]") {
  const auto doc = nlohmann::json::parse(kTrace);
  TraceFile t;
  std::string error;
  REQUIRE(read_trace(temp_file("trace.pickle", json_to_pickle(doc)), &t, &error));
  CHECK(t.format == "pickle");
  CHECK(t.events.size() == 5);
  nlohmann::json back;
  REQUIRE(read_snapshot(temp_file("snap.pickle", json_to_pickle(doc)), &back, &error));
  CHECK(back == doc);
}

TEST_CASE("RMM logs read as alloc and free events", "[reader][rmm]") {
  TraceFile t;
  std::string error;
  REQUIRE(read_trace(temp_file("rmm.csv",
                               "Thread,Time,Action,Pointer,Size,Stream\n"
                               "1,0.1,allocate,0x7f0000000000,1024,0x0\n"
                               "1,0.2,free,0x7f0000000000,1024,0x0\n"),
                     &t, &error));
  CHECK(t.format == "rmm-csv");
  REQUIRE(t.events.size() == 2);
  CHECK(t.events[0].addr == 0x7f0000000000ull);
  CHECK(t.events[1].action == TraceAction::free_completed);
  CHECK_FALSE(read_trace(temp_file("bad.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,zz,1,0\n"),
                         &t, &error));
  CHECK(error.find("line 2") != std::string::npos);
}

TEST_CASE("truncated and malformed traces fail with where and why", "[reader][errors]") {
  const std::string full = kTrace;
  struct Case {
    std::string content;
    const char* expect;
  };
  for (const Case& c : {Case{full.substr(0, full.size() / 2), "byte"},
                        Case{"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1}]]}", "'size'"},
                        Case{"{\"device_traces\": [[{\"addr\": 1, \"size\": 2}]]}", "without an action"},
                        Case{"{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": \"x\", \"size\": 2}]]}", "'addr'"},
                        Case{"garbage", "not a JSON snapshot"},
                        Case{"", "not a JSON snapshot"}}) {
    INFO(c.content);
    TraceFile t;
    std::string error;
    CHECK_FALSE(read_trace(temp_file("bad.json", c.content), &t, &error));
    CHECK(error.find(c.expect) != std::string::npos);
  }
  // A gzip stream cut short.
  const std::string path = temp_file("cut.json.gz", full, true);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  TraceFile t;
  std::string error;
  CHECK_FALSE(read_trace(temp_file("cut2.json.gz", bytes.substr(0, bytes.size() - 12)), &t, &error));
  CHECK_FALSE(error.empty());
  CHECK_FALSE(read_trace("/nonexistent/trace.json", &t, &error));
  CHECK(error.find("cannot open") != std::string::npos);
}

// Found with scripts/bad_inputs.sh (docs/reliability.md).
TEST_CASE("negative sizes and documents nested too deep are refused", "[trace][errors]") {
  TraceFile t;
  std::string error;
  const auto negative = temp_file(
      "negative.json", R"({"device_traces": [[{"action": "alloc", "addr": 1, "size": -1}]]})");
  CHECK_FALSE(read_trace(negative, &t, &error));
  CHECK(error.find("'size' must be an integer from 0 to") != std::string::npos);
  // A pickled trace holds signed integers: non-negative ones are fine.
  const auto pickled = temp_file(
      "signed.pickle",
      json_to_pickle(nlohmann::json::parse(R"({"device_traces": [[{"action": "alloc", "addr": 1,
                                     "size": 8, "stream": 0}]]})")));
  TraceFile p;
  REQUIRE(read_trace(pickled, &p, &error));
  CHECK(p.events.size() == 1);
  const auto deep = temp_file("deep.json", std::string(300, '[') + std::string(300, ']'));
  nlohmann::json doc;
  CHECK_FALSE(read_snapshot(deep, &doc, &error));
  CHECK(error.find("nested deeper than 200") != std::string::npos);
  std::remove(negative.c_str());
  std::remove(pickled.c_str());
  std::remove(deep.c_str());
}
