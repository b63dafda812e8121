// The viewer's model (timeline downsampling, segment-map capping), its page escaping, the
// snapshot loader and the snapshot diff.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>

#include "snapshot/snapshot_loader.h"
#include "view/html_page.h"
#include "view/segment_map.h"
#include "view/snapshot_diff.h"
#include "view/snapshot_fields.h"
#include "view/event_history.h"
#include "view/peak_reserved.h"
#include "view/timeline.h"
#include "view/trace_completeness.h"

using namespace cudalloc;
using namespace cudalloc::view;
using nlohmann::json;
using snapshot::EventKind;
using snapshot::SnapshotEvent;

namespace {

SnapshotEvent event(EventKind kind, std::uint64_t addr, std::uint64_t size,
                    std::int64_t reserved = -1) {
  SnapshotEvent e;
  e.kind = kind;
  e.addr = addr;
  e.size = size;
  e.reserved = reserved;
  return e;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = "/tmp/cudalloc_view_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

json block(std::uint64_t addr, std::uint64_t size, const char* state) {
  return {{"address", addr}, {"size", size}, {"state", state}};
}

}  // namespace

TEST_CASE("timeline: a one-event peak survives downsampling to a few buckets", "[view]") {
  std::vector<SnapshotEvent> events;
  events.push_back(event(EventKind::segment_alloc, 0, 1000));
  for (int i = 0; i < 10000; ++i) {
    const bool spike = i == 7777;
    events.push_back(event(EventKind::alloc, 1, spike ? 900 : 10));
    events.push_back(event(EventKind::free_completed, 1, spike ? 900 : 10));
  }
  const Timeline t = build_timeline(events, 0, {}, 50);
  REQUIRE(t.events == events.size());
  REQUIRE(t.x.size() <= 50);
  CHECK(t.peak_live.bytes == 900);
  CHECK(t.peak_live.event == 1 + 2 * 7777);
  CHECK(*std::max_element(t.live_max.begin(), t.live_max.end()) == 900);
  CHECK(*std::min_element(t.live_min.begin(), t.live_min.end()) == 0);
  CHECK(t.has_reserved);
  CHECK(t.peak_reserved.bytes == 1000);
}

TEST_CASE("timeline: a trace cut from a ring buffer ends at the snapshot's state", "[view]") {
  // The trace starts mid-run: its first event frees memory allocated before it.
  const std::vector<SnapshotEvent> events = {event(EventKind::free_completed, 1, 100),
                                             event(EventKind::alloc, 2, 30)};
  const Timeline lifted = build_timeline(events, 0, {}, 10);
  CHECK(lifted.live_min.front() == 0);  // lifted so that nothing is below zero
  const Timeline anchored = build_timeline(events, 0, {true, 230, 500}, 10);
  CHECK(anchored.live_max.back() == 230);
  CHECK(anchored.peak_live.bytes == 300);  // before the first event's free
  CHECK(anchored.reserved_max.back() == 500);
}

TEST_CASE("timeline: segment_map and segment_unmap change reserved memory", "[view]") {
  const std::vector<SnapshotEvent> events = {event(EventKind::segment_map, 0, 64),
                                             event(EventKind::segment_map, 64, 64),
                                             event(EventKind::segment_unmap, 64, 64)};
  const Timeline t = build_timeline(events, 0, {}, 10);
  CHECK(t.peak_reserved.bytes == 128);
  CHECK(t.reserved_max.back() == 64);
}

TEST_CASE("timeline: recorded reserved_bytes are reserved memory, not the mappings' sum",
          "[view]") {
  // One physical page mapped at two addresses: two segment_map events, one page reserved.
  const std::vector<SnapshotEvent> events = {event(EventKind::segment_map, 0, 64, 64),
                                             event(EventKind::alloc, 0, 64, 64),
                                             event(EventKind::segment_map, 128, 64, 64),
                                             event(EventKind::segment_unmap, 0, 64, 64)};
  const Timeline t = build_timeline(events, 0, {true, 64, 64}, 10);
  CHECK(t.reserved_recorded);
  CHECK(t.peak_reserved.bytes == 64);  // the segment events alone would say 128
  CHECK(t.reserved_min.front() == 0);  // before the first page
  CHECK(t.reserved_max.back() == 64);
  // cudalloc's stats win over the trace for the panel; without them the trace's peak counts.
  const json info = {{"stats", {{"reserved_bytes", {{"peak", 96}}}, {"active_bytes", {{"peak", 64}}}}}};
  CHECK(device_peaks(t, &info).reserved == 96);
  CHECK(device_peaks(t, &info).source == "cudalloc stats");
  CHECK(device_peaks(t, nullptr).reserved == 64);
  CHECK(device_peaks(t, nullptr).source == "trace");
}

TEST_CASE("timeline: each oom event keeps the request and the state when it failed", "[view]") {
  SnapshotEvent oom = event(EventKind::oom, /*device_free*/ 20, 500, 100);
  const std::vector<SnapshotEvent> events = {event(EventKind::segment_alloc, 0, 100, 100),
                                             event(EventKind::alloc, 0, 80, 100), oom,
                                             event(EventKind::free_completed, 0, 80, 100)};
  const Timeline t = build_timeline(events, 0, {}, 10);
  REQUIRE(t.ooms.size() == 1);
  CHECK(t.ooms[0].event == 2);
  CHECK(t.ooms[0].size == 500);
  CHECK(t.ooms[0].device_free == 20);
  CHECK(t.ooms[0].live == 80);
  CHECK(t.ooms[0].reserved == 100);
  CHECK(timeline_json(t)["oom_count"] == 1);
}

TEST_CASE("trace completeness: dropped events counted, or frees of blocks never seen", "[view]") {
  const std::vector<SnapshotEvent> cut = {event(EventKind::free_completed, 8, 16),
                                          event(EventKind::alloc, 32, 16),
                                          event(EventKind::free_completed, 32, 16)};
  const json info = {{"trace_dropped", 1234567}};
  const TraceCompleteness ring = trace_completeness(cut, 0, &info, 1000);
  CHECK_FALSE(ring.complete());
  CHECK(trace_note(ring).find("trace:1000") != std::string::npos);
  CHECK(trace_note(ring).find("dropped 1,234,567") != std::string::npos);
  const TraceCompleteness pytorch = trace_completeness(cut, 0, nullptr, 0);
  CHECK(pytorch.unseen_frees == 1);
  CHECK(trace_note(pytorch).find("1 free of a block allocated before") != std::string::npos);
  CHECK(trace_note(pytorch).find("max_entries") != std::string::npos);
  CHECK(trace_completeness_json(pytorch)["dropped"].is_null());
  const std::vector<SnapshotEvent> whole(cut.begin() + 1, cut.end());
  const json none = {{"trace_dropped", 0}};
  CHECK(trace_completeness(whole, 0, &none, 1000).complete());
  CHECK(trace_note(trace_completeness(whole, 0, &none, 1000)).empty());
  CHECK(trace_capacity(json{{"cudalloc", {{"settings", {{"trace", "1000"}}}}}}) == 1000);
}

TEST_CASE("event history: the last events, as offsets from the lowest address", "[view]") {
  std::vector<SnapshotEvent> events;
  for (std::uint64_t i = 0; i < 10; ++i) events.push_back(event(EventKind::alloc, 0x1000 + i, 1));
  events.push_back(event(EventKind::oom, /*device_free*/ 5, 7));
  events[3].stream = 9;
  const json h = event_history_json(events, 0, 4);
  CHECK(h["first"] == 7);
  CHECK(h["count"] == 4);
  CHECK(h["base"] == "0x1007");
  CHECK(h["offset"] == json::array({0, 1, 2, 0}));  // the oom's device_free is no address
  CHECK(h["kind"].back() == int(EventKind::oom));
  CHECK(h["streams"] == json::array({"0x0"}));
  // Addresses 2^53 apart or more: the window starts after the last one too far away.
  events[8].addr = std::uint64_t{1} << 60;
  const json near = event_history_json(events, 0, 4);
  CHECK(near["first"] == 9);
  CHECK(near["count"] == 2);
}

TEST_CASE("script_safe_json: no string can close the script element", "[view]") {
  const json doc = {{"text", "</script><script>alert(1)</script> & <!-- \u2028"}};
  const std::string safe = script_safe_json(doc);
  CHECK(safe.find('<') == std::string::npos);
  CHECK(safe.find('>') == std::string::npos);
  CHECK(safe.find('&') == std::string::npos);
  CHECK(safe.find("\\u2028") != std::string::npos);
  CHECK(json::parse(safe) == doc);  // the same data once parsed
}

TEST_CASE("render_page: markers in the data are not template markers", "[view]") {
  const std::string page = render_page({{"x", "@DATA@ /*@SCRIPT@*/"}}, "a <b> @TITLE@");
  CHECK(page.find("a &lt;b&gt; @TITLE@") != std::string::npos);
  CHECK(page.find("@DATA@ /*@SCRIPT@*/") != std::string::npos);  // inside the data, once
  CHECK(page.find("<script type=\"application/json\" id=\"model\">") != std::string::npos);
}

TEST_CASE("segment map: past the block budget, runs merge and small segments are left out",
          "[view]") {
  json small = {{"address", 1000}, {"total_size", 40}, {"blocks", json::array()}};
  for (int i = 0; i < 4; ++i)
    small["blocks"].push_back(block(1000 + 10 * i, 10, i < 2 ? "active_allocated" : "inactive"));
  json big = {{"address", 0}, {"total_size", 400}, {"blocks", json::array()}};
  for (int i = 0; i < 40; ++i)
    big["blocks"].push_back(block(10 * i, 10, i % 2 ? "active_allocated" : "inactive"));
  const json all = segment_map_json({&big, &small}, {}, 100);
  CHECK(all["blocks_drawn"] == 44);
  const json merged = segment_map_json({&big, &small}, {}, 42);
  CHECK(merged["segments"].size() == 2);
  CHECK(merged["blocks_drawn"] == 42);  // the small segment's 4 blocks became 2 runs
  const json capped = segment_map_json({&big, &small}, {}, 41);
  CHECK(capped["segments"].size() == 1);
  CHECK(capped["segments_left_out"] == 1);
}

TEST_CASE("block states: slab objects are told apart by the slab ranges", "[view]") {
  const SlabRanges slabs = {{100, 200}, {300, 400}};
  CHECK(block_state_code("active_allocated", 150, slabs) == kSlab);
  CHECK(block_state_code("active_allocated", 250, slabs) == kAllocated);
  CHECK(block_state_code("active_allocated", 400, slabs) == kAllocated);
  CHECK(block_state_code("active_pending_free", 150, slabs) == kPending);
  CHECK(block_state_code("inactive", 150, slabs) == kFree);
}

TEST_CASE("load_snapshot: events leave the document, bad input says where", "[view]") {
  snapshot::LoadedSnapshot snap;
  std::string error;
  const auto good = temp_file("good.json", R"({"segments": [], "device_traces": [[
      {"action": "alloc", "addr": 1, "size": 8, "time_us": 5, "reserved_bytes": 64},
      {"action": "segment_unmap", "addr": 0, "size": 64}], [{"action": "weird"}],
      [{"action": "oom", "size": 99, "device_free": 7}]]})");
  REQUIRE(snapshot::load_snapshot(good, &snap, &error));
  REQUIRE(snap.events.size() == 4);
  CHECK(snap.events[0].time_us == 5);
  CHECK(snap.events[0].reserved == 64);
  CHECK(snap.events[1].reserved == -1);
  CHECK(snap.events[3].kind == EventKind::oom);
  CHECK(snap.events[3].addr == 7);  // device_free, as PyTorch keeps it
  CHECK(snap.events[1].kind == EventKind::segment_unmap);
  CHECK(snap.events[2].kind == EventKind::other);
  CHECK(snap.events[2].device == 1);
  CHECK(snap.doc["device_traces"] == json::array({json::array(), json::array(), json::array()}));

  snapshot::LoadedSnapshot bad;
  CHECK_FALSE(snapshot::load_snapshot(temp_file("cut.json", R"({"segments": [)"), &bad, &error));
  CHECK(error.find("malformed JSON at byte") != std::string::npos);
  CHECK_FALSE(snapshot::load_snapshot(
      temp_file("noaction.json", R"({"device_traces": [[{"size": 1}]]})"), &bad, &error));
  CHECK(error.find("device 0, event 0") != std::string::npos);
}

TEST_CASE("snapshot_diff: stats, segments and blocks, largest first", "[view]") {
  auto segment = [](std::uint64_t addr, std::uint64_t size, json blocks) {
    return json{
        {"device", 0}, {"address", addr}, {"total_size", size}, {"blocks", std::move(blocks)}};
  };
  const json before = {
      {"segments",
       {segment(0, 100, {block(0, 60, "active_allocated"), block(60, 40, "inactive")}),
        segment(1000, 50, json::array())}}};
  const json after = {
      {"segments",
       {segment(0, 200, {block(0, 60, "active_allocated"), block(60, 30, "active_allocated")}),
        segment(5000, 70, {block(5000, 70, "active_allocated")})}}};
  const json d = snapshot_diff(before, after)["devices"][0];
  CHECK(d["stats"]["reserved_bytes"]["delta"] == 270 - 150);
  CHECK(d["stats"]["allocations"]["delta"] == 2);
  CHECK(d["segments"]["added"][0]["address"] == "0x1388");
  CHECK(d["segments"]["removed"][0]["size_before"] == 50);
  CHECK(d["segments"]["resized"][0]["delta"] == 100);
  REQUIRE(d["blocks"]["allocated"].size() == 2);
  CHECK(d["blocks"]["allocated"][0]["size"] == 70);  // largest first
  CHECK(d["blocks"]["freed"].empty());
}

TEST_CASE("segment map: blocks with recorded stacks say where they were allocated", "[view]") {
  json frames = json::array({
      {{"filename", "/usr/lib/python3/site-packages/torch/nn/modules/linear.py"}, {"line", 125},
       {"name", "forward"}},
      {{"filename", "train.py"}, {"line", 42}, {"name", "make_buffers"}},
      {{"filename", "train.py"}, {"line", 90}, {"name", "main"}}});
  json a = block(0x1000, 0x400, "active_allocated");
  a["frames"] = frames;
  json b = block(0x1400, 0x400, "active_allocated");  // no stack
  json c = block(0x1800, 0x800, "active_allocated");
  c["frames"] = frames;
  json seg = {{"address", 0x1000}, {"total_size", 0x1000}, {"stream", 0},
              {"blocks", json::array({a, b, c})}};
  const json map = segment_map_json({&seg}, {}, 100);
  REQUIRE(map["sites"].size() == 1);  // one distinct stack, shared by two blocks
  const std::string site = map["sites"][0];
  CHECK(site.rfind("make_buffers (train.py:42)", 0) == 0);  // PyTorch's frame skipped
  CHECK(site.find("main (train.py:90)") != std::string::npos);
  const json& rows = map["segments"][0]["blocks"];
  CHECK(rows[0][5] == 0);
  CHECK(rows[1][5] == -1);
  CHECK(rows[2][5] == 0);
  CHECK(allocation_site(b).empty());
  CHECK(allocation_site(a, 1) == "make_buffers (train.py:42)");
}

TEST_CASE("segment map: the host tier is drawn as host memory, not device memory", "[view]") {
  json device_seg = {{"address", 0x10000}, {"total_size", 0x1000}, {"stream", 0},
                     {"blocks", json::array({block(0x10000, 0x1000, "active_allocated")})}};
  json host_seg = device_seg;
  host_seg["address"] = 0x20000;
  host_seg["host_size"] = 0x1000;
  host_seg["blocks"][0]["address"] = 0x20000;
  json mixed_seg = device_seg;
  mixed_seg["address"] = 0x30000;
  mixed_seg["host_size"] = 0x400;
  mixed_seg["blocks"][0]["address"] = 0x30000;
  const json map = segment_map_json({&device_seg, &host_seg, &mixed_seg}, {}, 100);
  REQUIRE(map["segments"].size() == 3);
  CHECK(map["segments"][0]["location"] == "device");
  CHECK(map["segments"][1]["location"] == "host");
  CHECK(map["segments"][1]["host_bytes"] == 0x1000);
  CHECK(map["segments"][2]["location"] == "mixed");
  CHECK(segment_device_bytes(mixed_seg) == 0xc00);
  json broken = device_seg;
  broken["host_size"] = 0x5000;  // more than the segment: capped, never a negative device size
  CHECK(segment_host_bytes(broken) == 0x1000);
  CHECK(segment_device_bytes(broken) == 0);
}
