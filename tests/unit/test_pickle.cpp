#include <catch2/catch.hpp>

#include "snapshot/pickle.h"
#include "snapshot/snapshot_encode.h"
#include "temp_files.h"

using namespace cudalloc::snapshot;
using nlohmann::json;

namespace {
// pickle.dumps(d, protocol=4) of a small snapshot-shaped dict, made by CPython 3.11: FRAME,
// MEMOIZE, BINGET, SHORT_BINUNICODE, LONG1, BININT1/2, TUPLE2, BINFLOAT, NEWTRUE, NONE.
const std::string kPythonPickle(
    "\x80\x04\x95\x70\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e\x74\x73"
    "\x94\x5d\x94\x7d\x94\x28\x8c\x06\x64\x65\x76\x69\x63\x65\x94\x4b\x00\x8c\x07\x61\x64\x64\x72\x65"
    "\x73\x73\x94\x8a\x06\x00\xc0\x44\x4a\x54\x7f\x8c\x0a\x74\x6f\x74\x61\x6c\x5f\x73\x69\x7a\x65\x94"
    "\x4a\x00\x00\x20\x00\x8c\x06\x62\x6c\x6f\x63\x6b\x73\x94\x5d\x94\x7d\x94\x28\x68\x05\x8a\x06\x00"
    "\xc0\x44\x4a\x54\x7f\x8c\x04\x73\x69\x7a\x65\x94\x4d\x00\x02\x8c\x05\x73\x74\x61\x74\x65\x94\x8c"
    "\x10\x61\x63\x74\x69\x76\x65\x5f\x61\x6c\x6c\x6f\x63\x61\x74\x65\x64\x94\x8c\x06\x66\x72\x61\x6d"
    "\x65\x73\x94\x5d\x94\x75\x61\x8c\x0f\x73\x65\x67\x6d\x65\x6e\x74\x5f\x70\x6f\x6f\x6c\x5f\x69\x64"
    "\x94\x4b\x00\x4b\x00\x86\x94\x75\x61\x8c\x0d\x64\x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73"
    "\x94\x5d\x94\x5d\x94\x28\x7d\x94\x28\x8c\x06\x61\x63\x74\x69\x6f\x6e\x94\x8c\x05\x61\x6c\x6c\x6f"
    "\x63\x94\x8c\x04\x61\x64\x64\x72\x94\x8a\x06\x00\xc0\x44\x4a\x54\x7f\x68\x0a\x4d\x00\x02\x8c\x06"
    "\x73\x74\x72\x65\x61\x6d\x94\x4b\x00\x8c\x07\x74\x69\x6d\x65\x5f\x75\x73\x94\x4b\x01\x68\x0d\x5d"
    "\x94\x75\x7d\x94\x28\x68\x15\x8c\x0e\x66\x72\x65\x65\x5f\x63\x6f\x6d\x70\x6c\x65\x74\x65\x64\x94"
    "\x68\x17\x8a\x06\x00\xc0\x44\x4a\x54\x7f\x68\x0a\x4d\x00\x02\x68\x18\x4b\x00\x68\x19\x4b\x02\x68"
    "\x0d\x5d\x94\x75\x65\x61\x8c\x04\x6d\x65\x74\x61\x94\x7d\x94\x28\x8c\x01\x78\x94\x47\x3f\xf8\x00"
    "\x00\x00\x00\x00\x00\x8c\x03\x6e\x65\x67\x94\x4a\xfd\xff\xff\xff\x8c\x03\x62\x69\x67\x94\x8a\x06"
    "\x00\x00\x00\x00\x00\x01\x8c\x01\x74\x94\x88\x8c\x01\x6e\x94\x4e\x75\x75\x2e", 379);
}  // namespace

TEST_CASE("a pickle written by Python reads as the same document", "[pickle]") {
  json doc;
  std::string error;
  REQUIRE(pickle_to_json(kPythonPickle, &doc, &error));
  CHECK(doc["segments"][0]["address"] == 140000000000000ull);
  CHECK(doc["segments"][0]["total_size"] == 2097152);
  CHECK(doc["segments"][0]["blocks"][0]["state"] == "active_allocated");
  CHECK(doc["segments"][0]["segment_pool_id"] == json::array({0, 0}));
  CHECK(doc["device_traces"][0][1]["action"] == "free_completed");
  CHECK(doc["device_traces"][0][1]["size"] == 512);  // through a memo reference
  CHECK(doc["meta"]["x"] == 1.5);
  CHECK(doc["meta"]["neg"] == -3);
  CHECK(doc["meta"]["big"] == (1ll << 40));
  CHECK(doc["meta"]["t"] == true);
  CHECK(doc["meta"]["n"].is_null());
}

TEST_CASE("json -> pickle -> json is the identity on snapshot values", "[pickle]") {
  const json doc = {{"segments", json::array({{{"address", 0x7f0000000000ull},
                                               {"size", 1},
                                               {"neg", -70000},
                                               {"huge", (1ll << 62) + 5},
                                               {"blocks", json::array()},
                                               {"frac", 0.25},
                                               {"name", "üñï"},
                                               {"none", nullptr},
                                               {"flag", false}}})},
                    {"empty", json::object()}};
  json back;
  std::string error;
  REQUIRE(pickle_to_json(json_to_pickle(doc), &back, &error));
  CHECK(back == doc);
}

TEST_CASE("the pickle writer uses only opcodes MemoryViz.js reads", "[pickle]") {
  const std::string p = json_to_pickle({{"a", json::array({1, 1ll << 40, -1, "s", 1.5, true, nullptr})}});
  CHECK(p.substr(0, 2) == std::string("\x80\x02", 2));
  CHECK(p.back() == '.');
  // LONG1 arguments stay within 8 bytes.
  for (std::size_t i = 0; i + 1 < p.size(); ++i) {
    if (static_cast<unsigned char>(p[i]) == 0x8a) CHECK(static_cast<unsigned char>(p[i + 1]) <= 8);
  }
}

TEST_CASE("malformed pickles are errors with a byte offset", "[pickle][errors]") {
  json doc;
  std::string error;
  CHECK_FALSE(pickle_to_json(kPythonPickle.substr(0, 100), &doc, &error));
  CHECK(error.find("byte") != std::string::npos);
  CHECK_FALSE(pickle_to_json("", &doc, &error));
  CHECK_FALSE(pickle_to_json("\x80\x02" "cos\nsystem\n.", &doc, &error));  // GLOBAL
  CHECK(error.find("Python objects") != std::string::npos);
  CHECK_FALSE(pickle_to_json("\x80\x02" "e.", &doc, &error));  // APPENDS without MARK
  CHECK_FALSE(pickle_to_json(std::string("\x80\x02\x8b\xff\xff\xff\x7f", 7), &doc, &error));
  CHECK_FALSE(pickle_to_json("\x80\x02h\x05.", &doc, &error));  // unknown memo entry
}

// Inputs found by fuzzing (tests/fuzz/regressions/fuzz_pickle/): each used to hang, leak or be
// accepted as something it is not.
TEST_CASE("hostile pickles are refused quickly and cleanly", "[pickle][errors][fuzz]") {
  json doc;
  std::string error;
  // BINUNICODE8 whose 8-byte length makes the read position wrap around: used to loop forever.
  std::string wraps("\x80\x02\x8d", 3);
  for (int i = 0; i < 8; ++i) wraps.push_back(i == 0 ? '\xf7' : '\xff');
  CHECK_FALSE(pickle_to_json(wraps, &doc, &error));
  CHECK(error.find("truncated") != std::string::npos);
  // An APPEND that fails used to be skipped, and the rest of the pickle read on.
  CHECK_FALSE(pickle_to_json("\x80\x02]N}a.", &doc, &error));
  CHECK(error.find("APPEND") != std::string::npos);
  // 40 levels of lists holding the previous level twice (through the memo): 2^40 nodes.
  std::string laughs("\x80\x02]q\x00", 5);
  for (int i = 0; i < 40; ++i) laughs += std::string("(h\x00h\x00lq\x00", 8);
  laughs += '.';
  CHECK_FALSE(pickle_to_json(laughs, &doc, &error));
  CHECK(error.find("far larger") != std::string::npos);
  // LONG_BINPUT at index 57 million: used to grow the memo table to ~1 GB.
  CHECK_FALSE(pickle_to_json(std::string("\x80\x02}q\x00(tra(q\x03", 12), &doc, &error));
  CHECK(error.find("memo index too large") != std::string::npos);
  // A dict key that is a tuple holding bytes that are not UTF-8: naming the key used to throw
  // json's type_error out of pickle_to_json (cudalloc inspect aborted).
  REQUIRE(pickle_to_json(std::string("\x80\x02}X\x01\x00\x00\x00\xff\x85N\x85s.", 15), &doc,
                         &error));
  CHECK(doc.size() == 1);
  // A list appended to itself: refused (the leak it used to cause shows under ASan).
  CHECK_FALSE(pickle_to_json(std::string("\x80\x02]q\x00h\x00" "a.", 9), &doc, &error));
  CHECK(error.find("nested deeper than 200 levels") != std::string::npos);
}

TEST_CASE("encode_snapshot streams the events and writes what the whole document would be",
          "[pickle][snapshot]") {
  // 10,000 events cross the encoder's batches; a second device list is empty, a third short.
  json events = json::array();
  for (int i = 0; i < 10000; ++i) {
    json e = {{"action", i % 2 ? "free_completed" : "alloc"}, {"addr", 4096 * (i / 2)},
              {"size", 512}, {"stream", 0}, {"time_us", i}};
    if (i % 3 == 0) e["frames"] = json::array({{{"filename", "a.py"}, {"line", i}, {"name", "f"}}});
    events.push_back(std::move(e));
  }
  const json doc = {{"segments", json::array()}, {"meta", {{"x", 1.5}}},
                    {"device_traces", {events, json::array(), {{{"action", "oom"}, {"size", 7}}}}}};
  const std::string path = cudalloc::test::temp_file("encode.json", doc.dump());
  std::string out, error;
  REQUIRE(encode_snapshot(path, SnapshotFormat::json, &out, &error));
  CHECK(json::parse(out) == doc);
  REQUIRE(encode_snapshot(path, SnapshotFormat::pickle, &out, &error));
  json back;
  REQUIRE(pickle_to_json(out, &back, &error));
  CHECK(back == doc);
  CHECK(out == json_to_pickle(doc));  // byte for byte: the same opcodes

  const std::string bad = cudalloc::test::temp_file(
      "encode_bad.json", R"({"device_traces": [[{"action": "alloc", "size": -5}]]})");
  CHECK_FALSE(encode_snapshot(bad, SnapshotFormat::json, &out, &error));
  CHECK(error.find("device 0, event 0") != std::string::npos);
  CHECK(error.find("encode_bad.json") != std::string::npos);
}
