#include <unistd.h>

#include <algorithm>

#include "harness.h"
#include "snapshot/snapshot_json.h"

using namespace cudalloc;
using namespace cudalloc::test;
using nlohmann::json;

namespace {

Settings traced(std::size_t events) {
  Settings s;
  s.trace = events;
  return s;
}

// Every segment's blocks cover it exactly, in address order.
void check_cover(const json& seg) {
  std::uint64_t at = seg["address"];
  for (const json& b : seg["blocks"]) {
    REQUIRE(b["address"] == at);
    at += b["size"].get<std::uint64_t>();
  }
  CHECK(at == seg["address"].get<std::uint64_t>() + seg["total_size"].get<std::uint64_t>());
}

}  // namespace

TEST_CASE("a snapshot describes segments, blocks and slab objects in PyTorch's schema",
          "[snapshot]") {
  Harness h(plain_settings(traced(100)));
  h.fake.set_manual_streams(true);
  void* a = h.get(1000);
  void* b = h.get(1000);
  void* big = h.get(3 * MiB);
  void* pend = h.get(5 * MiB, 1);
  REQUIRE(h.alloc->record_stream(pend, 2) == Error::ok);
  h.fake.enqueue_work(0, 2);
  h.put(pend);  // pending until stream 2's work completes
  h.put(a);
  const json doc = snapshot::snapshot_json({h.alloc->state()}, "trace:100");
  REQUIRE(doc["segments"].size() == 3);
  std::uint64_t reserved = 0, allocated = 0, active = 0;
  int pending = 0, small_segments = 0;
  for (const json& seg : doc["segments"]) {
    check_cover(seg);
    reserved += seg["total_size"].get<std::uint64_t>();
    allocated += seg["allocated_size"].get<std::uint64_t>();
    active += seg["active_size"].get<std::uint64_t>();
    small_segments += seg["segment_type"] == "small";
    for (const json& blk : seg["blocks"]) pending += blk["state"] == "active_pending_free";
  }
  const json& stats = doc["cudalloc"]["devices"][0]["stats"];
  CHECK(reserved == stats["reserved_bytes"]["current"].get<std::uint64_t>());
  CHECK(allocated == stats["allocated_bytes"]["current"].get<std::uint64_t>());
  CHECK(active == stats["active_bytes"]["current"].get<std::uint64_t>());
  CHECK(pending == 1);
  CHECK(small_segments == 1);
  // The slab shows b as one 1024-byte block (a's slot is free again).
  bool found_b = false;
  for (const json& seg : doc["segments"]) {
    for (const json& blk : seg["blocks"]) {
      if (blk["address"] == addr(b)) {
        found_b = true;
        CHECK(blk["size"] == 1024);
        CHECK(blk["requested_size"] == 1000);
        CHECK(blk["state"] == "active_allocated");
      }
    }
  }
  CHECK(found_b);
  CHECK(doc["cudalloc"]["devices"][0]["slabs"].size() == 1);
  CHECK(doc["allocator_settings"]["trace"] == "100");
  // Settings stay numbers for machines (the viewer reads them); people get units elsewhere.
  CHECK(doc["allocator_settings"]["slab_max"] == "262144");
  CHECK(doc["cudalloc"]["settings"]["large_segment"] == "20971520");
  CHECK(doc["cudalloc"]["schema_version"] == snapshot::kSchemaVersion);
  // Trace: alloc x4, segment_alloc x3, free_requested x2, free_completed x1 (a).
  const json& trace = doc["device_traces"][0];
  int counts[6] = {};
  for (const json& e : trace) {
    TraceAction action;
    REQUIRE(trace_action_from_name(e["action"].get<std::string>().c_str(), &action));
    ++counts[int(action)];
  }
  CHECK(counts[int(TraceAction::alloc)] == 4);
  CHECK(counts[int(TraceAction::segment_alloc)] == 3);
  CHECK(counts[int(TraceAction::free_requested)] == 2);
  CHECK(counts[int(TraceAction::free_completed)] == 1);
  h.fake.complete_all();
  h.put(b);
  h.put(big);
}

TEST_CASE("the trace ring keeps the newest events in order", "[snapshot][trace]") {
  TraceRing ring(3);
  for (std::uintptr_t i = 1; i <= 5; ++i) ring.record(TraceAction::alloc, i, i, 0, 0);
  const auto events = ring.events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].addr == 3);
  CHECK(events[2].addr == 5);
  CHECK(ring.dropped() == 2);
  CHECK_FALSE(TraceRing(0).enabled());
}

TEST_CASE("out-of-memory events are traced with the device's free memory", "[snapshot][trace]") {
  Settings s = traced(10);
  s.limit = 4 * MiB;
  Harness h(plain_settings(s));
  void* p = nullptr;
  CHECK(h.try_get(8 * MiB, 0, &p) == Error::out_of_memory);
  const json doc = snapshot::snapshot_json({h.alloc->state()}, "");
  const json& last = doc["device_traces"][0].back();
  CHECK(last["action"] == "oom");
  CHECK(last["size"] == 8 * MiB);
  CHECK(last["device_free"] == 4 * MiB);
}

TEST_CASE("trace events carry reserved memory as the stats count it, when they happened",
          "[snapshot][trace]") {
  Settings s = traced(100);
  s.limit = 4 * MiB;
  Harness h(plain_settings(s));
  void* small = h.get(2 * MiB);
  void* p = nullptr;
  CHECK(h.try_get(8 * MiB, 0, &p) == Error::out_of_memory);
  h.put(small);
  h.alloc->empty_cache();
  const json doc = snapshot::snapshot_json({h.alloc->state()}, "");
  const json& trace = doc["device_traces"][0];
  std::int64_t highest = 0;
  for (const json& e : trace) highest = std::max(highest, e["reserved_bytes"].get<std::int64_t>());
  const json& stats = doc["cudalloc"]["devices"][0]["stats"]["reserved_bytes"];
  CHECK(highest == stats["peak"].get<std::int64_t>());
  CHECK(trace.back()["reserved_bytes"] == stats["current"]);
  // The oom event says what was free then (the small block's segment held), not what is free
  // at the snapshot (all of the cap, once the cache is empty).
  CHECK(stats["current"] == 0);
  const auto oom = std::find_if(trace.begin(), trace.end(),
                                [](const json& e) { return e["action"] == "oom"; });
  REQUIRE(oom != trace.end());
  const auto held = (*oom)["reserved_bytes"].get<std::uint64_t>();
  CHECK(held >= 2 * MiB);
  CHECK((*oom)["device_free"] == 4 * MiB - held);
}

TEST_CASE("%p in snapshot paths is the process id", "[snapshot]") {
  CHECK(snapshot::expand_path("/tmp/s_%p.json") ==
        "/tmp/s_" + std::to_string(::getpid()) + ".json");
  CHECK(snapshot::expand_path("plain%") == "plain%");
  CHECK(snapshot::expand_path("keep_%n.json") == "keep_%n.json");  // %n: OOM snapshots only
}

TEST_CASE("out-of-memory snapshots get one file name per error", "[snapshot]") {
  using snapshot::oom_snapshot_path;
  const std::string pid = std::to_string(::getpid());
  CHECK(oom_snapshot_path("/tmp/oom.json", 1) == "/tmp/oom.json");
  CHECK(oom_snapshot_path("/tmp/oom.json", 2) == "/tmp/oom.2.json");
  CHECK(oom_snapshot_path("/tmp/oom.json", 17) == "/tmp/oom.17.json");
  // Where that name is taken (another process with the same setting): the process id.
  CHECK(snapshot::oom_snapshot_fallback("/tmp/oom.json", 42, 1) == "/tmp/oom.p42.json");
  CHECK(snapshot::oom_snapshot_fallback("/tmp/oom.2.json", 42, 3) == "/tmp/oom.2.p42-3.json");
  CHECK(snapshot::oom_snapshot_fallback("/tmp/oom.json.gz", 7, 1) == "/tmp/oom.p7.json.gz");
  CHECK(snapshot::oom_snapshot_fallback("/tmp/oom", 7, 2) == "/tmp/oom.p7-2");
  CHECK(oom_snapshot_path("/tmp/oom.json.gz", 3) == "/tmp/oom.3.json.gz");
  CHECK(oom_snapshot_path("/tmp/oom.gz", 3) == "/tmp/oom.3.gz");
  CHECK(oom_snapshot_path("oom", 2) == "oom.2");
  CHECK(oom_snapshot_path("/tmp/dir.d/oom", 2) == "/tmp/dir.d/oom.2");  // no extension
  CHECK(oom_snapshot_path("/tmp/.oom", 2) == "/tmp/.oom.2");            // nor here
  CHECK(oom_snapshot_path("/tmp/oom_%p.json", 2) == "/tmp/oom_" + pid + ".2.json");
  // With %n every name carries the number, the first one's too, and nothing is inserted.
  CHECK(oom_snapshot_path("/tmp/oom_%n.json", 1) == "/tmp/oom_1.json");
  CHECK(oom_snapshot_path("/tmp/oom_%p_%n.json", 12) == "/tmp/oom_" + pid + "_12.json");
  CHECK(oom_snapshot_path("/tmp/%n/oom.json", 3) == "/tmp/3/oom.json");
}
