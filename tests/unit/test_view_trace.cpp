// The viewer's trace models: stacks interned by the loader, the flame summary, what was live
// at the peak and at each out-of-memory, the bands of the largest allocations, and the page
// maps per timeline bucket.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "snapshot/pickle.h"
#include "snapshot/snapshot_encode.h"
#include "snapshot/snapshot_loader.h"
#include "view/bands.h"
#include "view/flame.h"
#include "view/live_moments.h"
#include "view/segment_map.h"
#include "view/timeline.h"

using namespace cudalloc;
using namespace cudalloc::view;
using nlohmann::json;
using snapshot::EventKind;
using snapshot::LoadedSnapshot;

namespace {

json frame(const char* name, int line) {
  return {{"filename", std::string("/src/") + name + ".py"}, {"line", line}, {"name", name}};
}

// Frames innermost first, as PyTorch records them; a function's line is its name's length.
json stack(std::initializer_list<const char*> names) {
  json out = json::array();
  for (const char* n : names) out.push_back(frame(n, int(std::string(n).size())));
  return out;
}

LoadedSnapshot load(const json& doc) {
  const std::string path = "/tmp/cudalloc_view_trace_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << doc.dump();
  LoadedSnapshot snap;
  std::string error;
  REQUIRE(snapshot::load_snapshot(path, &snap, &error));
  ::unlink(path.c_str());
  return snap;
}

json ev(const char* action, std::uint64_t addr, std::uint64_t size, json frames = nullptr) {
  json e = {{"action", action}, {"addr", addr}, {"size", size}, {"stream", 0}};
  if (!frames.is_null()) e["frames"] = frames;
  return e;
}

const json* child(const json& node, const std::string& name) {
  for (const json& k : node["k"]) {
    if (k["n"] == name) return &k;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("loader: an alloc's frames are interned once and referred to by id", "[view]") {
  const json a = stack({"inner", "outer"});
  const LoadedSnapshot snap = load({{"device_traces", {{ev("alloc", 1, 8, a), ev("alloc", 2, 8, a),
                                                        ev("alloc", 3, 8),
                                                        ev("free_completed", 1, 8, a)}}}});
  REQUIRE(snap.events.size() == 4);
  REQUIRE(snap.stacks.size() == 1);
  CHECK(snap.stacks[0] == a);
  CHECK(snap.events[0].stack == 1);
  CHECK(snap.events[1].stack == 1);
  CHECK(snap.events[2].stack == 0);
  CHECK(snap.events[3].stack == 0);  // only allocs keep stacks
}

TEST_CASE("flame: bytes grouped top-down by frame, children adding up to their parent", "[view]") {
  const json a = stack({"alloc_a", "layer", "main"});
  const json b = stack({"alloc_b", "layer", "main"});
  const json c = stack({"other", "main"});
  const json f = flame_json({{100, &a}, {50, &b}, {30, &c}, {20, nullptr}}, 0);
  CHECK(f["n"] == "all");
  CHECK(f["b"] == 200);
  CHECK(f["c"] == 4);
  const json* main = child(f, "main (main.py:4)");
  REQUIRE(main != nullptr);
  CHECK((*main)["b"] == 180);
  CHECK((*main)["k"][0]["n"] == "layer (layer.py:5)");  // largest first
  CHECK((*main)["k"][0]["b"] == 150);
  CHECK((*main)["k"][0]["k"].size() == 2);
  const json* none = child(f, "(no stack recorded)");
  REQUIRE(none != nullptr);
  CHECK((*none)["b"] == 20);
}

TEST_CASE("flame: what a frame allocated itself beside its callees is a child of its own",
          "[view]") {
  const json callee = stack({"helper", "step", "main"});
  const json itself = stack({"step", "main"});
  const json f = flame_json({{100, &callee}, {60, &itself}, {50, &itself}}, 0);
  const json* step = child(*child(f, "main (main.py:4)"), "step (step.py:4)");
  REQUIRE(step != nullptr);
  CHECK((*step)["b"] == 210);
  REQUIRE((*step)["k"].size() == 2);
  CHECK((*step)["k"][0]["n"] == "(allocated in this frame)");  // largest first
  CHECK((*step)["k"][1]["n"] == "helper (helper.py:6)");
  const json& own = (*step)["k"][0];
  CHECK(own["b"] == 110);
  CHECK(own["c"] == 2);
  CHECK(own["k"].empty());
  // A leaf frame (no callees) gets no such child: it is all its own.
  CHECK((*step)["k"][1]["k"].empty());
  // Too small for a row of its own: with the small callers, so the rows still add up.
  const json tiny = flame_json({{1000, &callee}, {1, &itself}}, 0, {32, 12, 0.01});
  const json& rows = (*child(*child(tiny, "main (main.py:4)"), "step (step.py:4)"))["k"];
  REQUIRE(rows.size() == 2);
  CHECK(rows[1]["n"] == "(1 smaller caller)");
  CHECK(rows[0]["b"].get<int>() + rows[1]["b"].get<int>() == 1001);
  // Frames none of which is an object are no stack.
  const json nulls = json::array({nullptr});
  const json g = flame_json({{5, &nulls}}, 0);
  REQUIRE(child(g, "(no stack recorded)") != nullptr);
  CHECK((*child(g, "(no stack recorded)"))["b"] == 5);
}

TEST_CASE("flame: small callers are merged, depth is bounded, bytes before the trace named",
          "[view]") {
  std::vector<json> stacks;
  for (int i = 0; i < 30; ++i) stacks.push_back(stack({"leaf", i % 2 ? "odd" : "even"}));
  stacks.push_back(stack({"f9", "f8", "f7", "f6", "f5", "f4", "f3", "f2", "f1", "f0"}));
  std::vector<FlameInput> in;
  for (const json& s : stacks) in.push_back({10, &s});
  FlameLimits limits;
  limits.children = 1;
  limits.depth = 4;
  const json f = flame_json(in, 1000, limits);
  CHECK(f["b"] == 310 + 1000);
  REQUIRE(f["k"].size() == 2);
  CHECK(f["k"][0]["n"] == "(allocated before the trace began)");
  CHECK(f["k"][1]["n"] == "(3 smaller callers)");
  CHECK(f["k"][1]["b"] == 310);
  const json deep = flame_json(in, 0, {4, 12, 0.0});
  const json* f0 = child(deep, "f0 (f0.py:2)");
  REQUIRE(f0 != nullptr);
  std::size_t depth = 0;
  for (const json* n = &(*f0)["k"]; !n->empty(); n = &(*n)[0]["k"]) ++depth;
  CHECK(depth == 3);  // f1 .. f3 below f0: four levels in all
}

TEST_CASE("live moments: the largest allocations at the peak and at each oom", "[view]") {
  const json w = stack({"weights", "main"});
  const json x = stack({"activations", "main"});
  const LoadedSnapshot snap = load({{"device_traces",
      {{ev("alloc", 0x100, 400, w), ev("alloc", 0x200, 300, x), ev("alloc", 0x300, 200, x),
        ev("free_completed", 0x200, 300), ev("oom", 0, 5000), ev("free_completed", 0x300, 200)}}}});
  const Timeline t = build_timeline(snap.events, 0, {}, 100);
  const json m = live_moments_json(snap, 0, t, {2, 50});
  REQUIRE(m.size() == 2);
  CHECK(m[0]["label"] == "peak live");
  CHECK(m[0]["event"] == 2);
  CHECK(m[0]["live"] == 900);
  CHECK(m[0]["seen"] == 900);
  REQUIRE(m[0]["top"].size() == 2);
  CHECK(m[0]["top"][0]["address"] == "0x100");
  CHECK(m[0]["top"][0]["site"] == "weights (/src/weights.py:7)");
  CHECK(m[0]["top"][1]["size"] == 300);
  CHECK(m[1]["label"] == "out of memory");
  CHECK(m[1]["event"] == 4);
  CHECK(m[1]["request"] == 5000);
  CHECK(m[1]["allocations"] == 2);
  CHECK(m[1]["flame"]["b"] == 600);
}

TEST_CASE("live moments: bytes live before a cut trace began are named, not lost", "[view]") {
  // The trace starts with a free of a block it never saw allocated: 1000 bytes were live.
  const LoadedSnapshot snap = load({{"device_traces",
      {{ev("free_completed", 0x900, 1000), ev("alloc", 0x100, 50), ev("alloc", 0x200, 60)}}}});
  const Timeline t = build_timeline(snap.events, 0, {}, 100);
  const json m = live_moments_json(snap, 0, t);
  REQUIRE(m.size() == 1);
  CHECK(m[0]["live"] == 1000);  // the peak is before the first event
  CHECK(m[0]["flame"]["b"] == 1000);
  CHECK(child(m[0]["flame"], "(allocated before the trace began)") != nullptr);
}

TEST_CASE("bands: the allocations of largest area, in allocation order, live ones to the end",
          "[view]") {
  const LoadedSnapshot snap = load({{"device_traces",
      {{ev("alloc", 0x1, 10), ev("alloc", 0x2, 1000), ev("free_completed", 0x2, 1000),
        ev("alloc", 0x3, 100), ev("alloc", 0x4, 5), ev("free_completed", 0x4, 5),
        ev("segment_map", 0x0, 4096)}}}});
  const json b = allocation_bands_json(snap, 0, 2);
  CHECK(b["events"] == 7);
  CHECK(b["allocations"] == 4);
  REQUIRE(b["bands"].size() == 2);
  CHECK(b["bands"][0]["address"] == "0x2");  // 1000 B over events 1..2
  CHECK(b["bands"][0]["from"] == 1);
  CHECK(b["bands"][0]["to"] == 2);
  CHECK(b["bands"][1]["address"] == "0x3");  // 100 B from event 3 to the end
  CHECK(b["bands"][1]["to"] == 7);
  CHECK(allocation_bands_json(snap, 0, 0)["bands"].empty());
}

TEST_CASE("timeline: page maps and unmaps are counted per bucket", "[view]") {
  const LoadedSnapshot snap = load({{"device_traces",
      {{ev("segment_map", 0, 64), ev("segment_map", 64, 64), ev("alloc", 1, 8),
        ev("segment_unmap", 64, 64)}}}});
  const Timeline t = build_timeline(snap.events, 0, {}, 2);
  REQUIRE(t.maps.size() == t.x.size());
  std::uint64_t maps = 0, unmaps = 0;
  for (std::size_t i = 0; i < t.x.size(); ++i) {
    maps += t.maps[i];
    unmaps += t.unmaps[i];
  }
  CHECK(maps == 2);
  CHECK(unmaps == 1);
  CHECK(t.maps[0] == 2);
}

TEST_CASE("segment map: pages keep whether they are mapped and where", "[view]") {
  const json seg = {{"address", 0x1000000}, {"total_size", 6 << 20}, {"stream", 0},
                    {"blocks", json::array()},
                    {"pages", {{{"address", 0x1000000}, {"size", 2 << 20}, {"mapped", true},
                                {"location", "device"}},
                               {{"address", 0x1200000}, {"size", 2 << 20}, {"mapped", true},
                                {"location", "host"}},
                               {{"address", 0x1400000}, {"size", 2 << 20}, {"mapped", false}}}}};
  const json map = segment_map_json({&seg}, {}, 100);
  const json& pages = map["segments"][0]["pages"];
  REQUIRE(pages.size() == 3);
  CHECK(pages[0] == json({0, 2 << 20, 1}));
  CHECK(pages[1] == json({2 << 20, 2 << 20, 2}));  // host-located
  CHECK(pages[2] == json({4 << 20, 2 << 20, 0}));
}

TEST_CASE("loader and frames: bad text and odd field types are read, not thrown", "[view]") {
  // A pickle keeps a filename Python decoded with surrogateescape: bytes that are no UTF-8.
  const json bad_utf8 = json::array({{{"filename", "/src/\xed\xb3\x80.py"}, {"line", 3}, {"name", "f"}}});
  const json doc = {{"device_traces", {{ev("alloc", 1, 8, bad_utf8), ev("alloc", 2, 8, bad_utf8)}}}};
  const std::string path = "/tmp/cudalloc_view_trace_utf8_" + std::to_string(::getpid()) + ".pickle";
  std::ofstream(path, std::ios::binary) << snapshot::json_to_pickle(doc);
  LoadedSnapshot snap;
  std::string error;
  REQUIRE(snapshot::load_snapshot(path, &snap, &error));
  ::unlink(path.c_str());
  CHECK(snap.stacks.size() == 1);
  CHECK(snap.events[1].stack == 1);

  const json odd = {{"filename", nullptr}, {"line", "12"}, {"name", 5}};
  CHECK(frame_label(odd) == "? (?:0)");
  CHECK(frames_site(json::array({odd})) == "? (?:0)");
  const json odd_pages = {{"address", 0}, {"total_size", 2 << 20}, {"blocks", json::array()},
                          {"pages", {{{"address", 0}, {"size", 2 << 20}, {"mapped", true},
                                      {"location", 7}}}}};
  CHECK(segment_map_json({&odd_pages}, {}, 10)["segments"][0]["pages"][0][2] == 1);
}

TEST_CASE("readers refuse a document with device_traces twice", "[view]") {
  const std::string path = "/tmp/cudalloc_view_trace_dup_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 8}]],
                             "device_traces": [[{"action": "alloc", "addr": 2, "size": 8}]]})";
  LoadedSnapshot snap;
  std::string error, out;
  CHECK_FALSE(snapshot::load_snapshot(path, &snap, &error));
  CHECK(error.find("device_traces appears twice") != std::string::npos);
  CHECK_FALSE(snapshot::encode_snapshot(path, snapshot::SnapshotFormat::json, &out, &error));
  CHECK(error.find("device_traces appears twice") != std::string::npos);
  ::unlink(path.c_str());
}

TEST_CASE("live moments: an alloc again at a live address keeps both, as the timeline does",
          "[view]") {
  // Cut trace: 0x100 is allocated twice without a free seen between; one free follows.
  const LoadedSnapshot snap = load({{"device_traces",
      {{ev("alloc", 0x100, 100), ev("alloc", 0x100, 50), ev("free_completed", 0x100, 100),
        ev("oom", 0, 999)}}}});
  const Timeline t = build_timeline(snap.events, 0, {}, 100);
  const json m = live_moments_json(snap, 0, t);
  REQUIRE(m.size() == 2);
  CHECK(m[0]["live"] == 150);  // the peak, after the second alloc
  CHECK(m[0]["seen"] == 150);
  CHECK(m[1]["seen"] == 50);   // the free ended the earlier one
  CHECK(m[1]["top"][0]["size"] == 50);
}
