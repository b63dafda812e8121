#include <catch2/catch.hpp>

#include "core/log.h"
#include "replay/curves.h"
#include "replay/expandable_model.h"
#include "replay/plan.h"
#include "replay/pytorch_model.h"
#include "replay/runner.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::replay;
using snapshot::TraceRecord;

namespace {

TraceRecord alloc(std::uint64_t addr, std::uint64_t size) {
  return {TraceAction::alloc, addr, size, 0, 0};
}
TraceRecord release(std::uint64_t addr) { return {TraceAction::free_completed, addr, 0, 0, 0}; }

}  // namespace

TEST_CASE("a plan resolves addresses to reusable slots and tracks peak live bytes",
          "[replay]") {
  Plan plan;
  std::string error;
  REQUIRE(make_plan({alloc(1, 100), alloc(2, 300), release(1), alloc(1, 50),
                     {TraceAction::free_requested, 2, 300, 0, 0}, release(2), release(1)},
                    0, false, &plan, &error));
  CHECK(plan.ops.size() == 6);
  CHECK(plan.slots == 2);
  CHECK(plan.peak_live_bytes == 400);
  CHECK(plan.ignored_events == 1);
  CHECK(plan.ops[3].slot == plan.ops[0].slot);  // slot reused
}

TEST_CASE("inconsistent traces fail with the event index, or are skipped on request",
          "[replay][errors]") {
  const std::vector<TraceRecord> bad = {alloc(1, 100), release(9), alloc(1, 100), release(1)};
  Plan plan;
  std::string error;
  CHECK_FALSE(make_plan(bad, 0, false, &plan, &error));
  CHECK(error.find("event 1") != std::string::npos);
  CHECK(error.find("not live") != std::string::npos);
  Plan skipped;
  REQUIRE(make_plan(bad, 0, true, &skipped, &error));
  CHECK(skipped.skipped_events == 2);  // the unknown free and the double alloc
  CHECK(skipped.ops.size() == 2);
}

TEST_CASE("a plan refuses a size no device holds, even with --skip-inconsistent",
          "[replay][errors]") {
  for (const bool skip : {false, true}) {
    Plan plan;
    std::string error;
    CHECK_FALSE(make_plan({alloc(1, 100), alloc(2, UINT64_MAX), release(2), release(1)}, 0, skip,
                          &plan, &error));
    CHECK(error.find("malformed trace at event 1") != std::string::npos);
    CHECK(error.find("18446744073709551615 bytes") != std::string::npos);
  }
}

TEST_CASE("the PyTorch model follows PyTorch's segment and split rules", "[replay][pytorch]") {
  PytorchModel m(std::uint64_t(1) << 40);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* d = nullptr;
  REQUIRE(m.allocate(100, 0, &a));  // small pool: one 2 MiB segment
  CHECK(m.reserved() == 2 * MiB);
  REQUIRE(m.allocate(3 * MiB, 0, &b));  // 1..10 MiB: a 20 MiB segment
  REQUIRE(m.allocate(3 * MiB, 0, &c));  // split from it
  CHECK(m.reserved() == 22 * MiB);
  REQUIRE(m.allocate(11 * MiB + 1, 0, &d));  // best fit: the 14 MiB rest of that segment
  CHECK(m.reserved() == 22 * MiB);
  void* e = nullptr;
  REQUIRE(m.allocate(15 * MiB, 0, &e));  // nothing fits; >= 10 MiB: its own, 2 MiB rounded
  CHECK(m.reserved() == 38 * MiB);
  REQUIRE(m.allocate(3 * MiB, 1, &a));  // another stream never shares a block
  CHECK(m.reserved() == 58 * MiB);
  m.free(b);
  m.free(c);
  m.free(d);
  m.free(e);
  CHECK(m.peak_reserved() == 58 * MiB);
  CHECK(m.segment_allocs() == 4);
}

TEST_CASE("the PyTorch model releases free segments when out of memory", "[replay][pytorch]") {
  PytorchModel m(40 * MiB);
  void* a = nullptr;
  REQUIRE(m.allocate(30 * MiB, 0, &a));
  m.free(a);
  void* b = nullptr;
  REQUIRE(m.allocate(36 * MiB, 0, &b));
  CHECK(m.segment_frees() == 1);
  void* c = nullptr;
  CHECK_FALSE(m.allocate(8 * MiB, 0, &c));
}

TEST_CASE("both policies replay a plan and report their reserved memory", "[replay]") {
  std::vector<TraceRecord> events;
  for (std::uint64_t step = 0; step < 50; ++step) {
    for (std::uint64_t i = 0; i < 20; ++i) events.push_back(alloc(1000 + i, (i + 1) * 300 * KiB));
    for (std::uint64_t i = 0; i < 20; ++i) events.push_back(release(1000 + i));
  }
  Plan plan;
  std::string error;
  REQUIRE(make_plan(events, 0, false, &plan, &error));
  const PolicyResult c = run_cudalloc(plan, Settings{}, std::uint64_t(1) << 40);
  const PolicyResult p = run_pytorch(plan, std::uint64_t(1) << 40);
  CHECK(c.problem.empty());
  CHECK(c.oom_events == 0);
  CHECK(c.peak_reserved_bytes >= plan.peak_live_bytes);
  CHECK(p.peak_reserved_bytes >= plan.peak_live_bytes);
  CHECK(c.device_allocs > 0);
  // The simulated driver's time is told apart from the allocator's; the models make no calls.
  CHECK(c.device_ns_per_event > 0);
  CHECK(c.replay_ns_per_event > 0);
  CHECK(p.device_ns_per_event == 0);
  // Steady state: after the first step nothing is mapped or unmapped any more.
  CHECK(c.page_maps > 0);
  CHECK(c.late_page_maps == 0);
  CHECK(c.late_page_unmaps == 0);
  // Plain segments: after the first step every allocation is served from the cache.
  Settings plain;
  plain.vmm = false;
  const PolicyResult p2 = run_cudalloc(plan, plain, std::uint64_t(1) << 40);
  CHECK(p2.device_allocs < 20);
  CHECK(p2.page_maps == 0);
  const PolicyResult tight = run_cudalloc(plan, Settings{}, 8 * MiB);
  CHECK(tight.oom_events > 0);
  CHECK(tight.problem.empty());
}

// A size near 2^64 rounded up to 512 bytes wrapped to a 512-byte small-pool request: the model
// reported 2 MiB reserved for an allocation no device could hold.
TEST_CASE("PyTorch's model refuses a request larger than the device without wrapping",
          "[replay]") {
  PytorchModel model(std::uint64_t{1} << 40);
  void* handle = nullptr;
  CHECK_FALSE(model.allocate(UINT64_MAX, 0, &handle));
  CHECK_FALSE(model.allocate((std::uint64_t{1} << 40) + 1, 0, &handle));
  CHECK(model.reserved() == 0);
  CHECK(model.segment_allocs() == 0);
  REQUIRE(model.allocate(512, 0, &handle));
  CHECK(model.reserved() == 2 * MiB);
}

// PyTorch tries the driver, fails, releases its cache and fails again: a request larger than
// the device empties the cache of both models, as it does on the GPU.
TEST_CASE("a request larger than the device releases the models' cache", "[replay]") {
  PytorchModel native(64 * MiB);
  ExpandableModel expandable(64 * MiB);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(native.allocate(30 * MiB, 0, &a));
  REQUIRE(expandable.allocate(30 * MiB, 0, &b));
  native.free(a);
  expandable.free(b);
  CHECK(native.reserved() == 30 * MiB);
  CHECK(expandable.reserved() == 40 * MiB);
  CHECK_FALSE(native.allocate(65 * MiB, 0, &a));
  CHECK_FALSE(expandable.allocate(65 * MiB, 0, &b));
  CHECK(native.reserved() == 0);
  CHECK(expandable.reserved() == 0);
  CHECK(native.segment_frees() == 1);
  CHECK(expandable.page_unmaps() == 2);
}

TEST_CASE("the expandable model grows one segment per stream and pool by pages",
          "[replay][expandable]") {
  ExpandableModel m(std::uint64_t(1) << 40);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  REQUIRE(m.allocate(100, 0, &a));  // small pool: one 2 MiB page
  CHECK(m.reserved() == 2 * MiB);
  REQUIRE(m.allocate(3 * MiB, 0, &b));  // large pool: one 20 MiB page
  CHECK(m.reserved() == 22 * MiB);
  REQUIRE(m.allocate(3 * MiB, 0, &c));  // split from it: [0, 3) [3, 6) free [6, 20)
  CHECK(m.reserved() == 22 * MiB);
  void* d = nullptr;
  // The free tail (14 MiB) is extended by one page rather than a block mapped beside it.
  REQUIRE(m.allocate(15 * MiB, 0, &d));
  CHECK(m.reserved() == 42 * MiB);
  CHECK(m.segment_allocs() == 3);  // three map calls
  CHECK(m.page_maps() == 3);
  void* e = nullptr;
  REQUIRE(m.allocate(19 * MiB, 0, &e));  // the rest of the tail: 14 + 20 - 15 MiB
  CHECK(m.reserved() == 42 * MiB);
  void* f = nullptr;
  REQUIRE(m.allocate(50 * MiB, 0, &f));  // the request rounded up to pages: 60 MiB
  CHECK(m.reserved() == 102 * MiB);
  CHECK(m.page_maps() == 6);
  void* g = nullptr;
  REQUIRE(m.allocate(3 * MiB, 1, &g));  // another stream: its own segment
  CHECK(m.reserved() == 122 * MiB);
  m.free(b);
  void* h = nullptr;
  REQUIRE(m.allocate(3 * MiB, 1, &h));  // stream 1's rest, not stream 0's freed block
  CHECK(m.reserved() == 122 * MiB);
  void* i = nullptr;
  REQUIRE(m.allocate(3 * MiB, 0, &i));  // stream 0's freed block: freed memory stays mapped
  CHECK(m.reserved() == 122 * MiB);
  for (void* p : {a, c, d, e, f, g, h, i}) m.free(p);
  CHECK(m.reserved() == 122 * MiB);
  CHECK(m.segment_frees() == 0);
}

TEST_CASE("the expandable model splits small rests in the large pool and maps 2 MiB small pages",
          "[replay][expandable]") {
  ExpandableModel m(std::uint64_t(1) << 40);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  REQUIRE(m.allocate(1 * MiB, 0, &a));
  REQUIRE(m.allocate(1 * MiB, 0, &b));  // the rest of the first small page
  CHECK(m.reserved() == 2 * MiB);
  REQUIRE(m.allocate(512 * KiB, 0, &c));  // a second small page
  CHECK(m.reserved() == 4 * MiB);
  // Native PyTorch keeps a large block whole when the rest is 1 MiB or less; with expandable
  // segments any rest of 512 B or more splits off. 19.5 MiB leave 512 KiB free at the end of
  // the page; 1.5 MiB extend them by a page and leave exactly 19 MiB for the next request.
  void* d = nullptr;
  void* e = nullptr;
  void* f = nullptr;
  REQUIRE(m.allocate(19 * MiB + 512 * KiB, 0, &d));
  REQUIRE(m.allocate(1 * MiB + 512 * KiB, 0, &e));
  CHECK(m.reserved() == 44 * MiB);
  REQUIRE(m.allocate(19 * MiB, 0, &f));
  CHECK(m.reserved() == 44 * MiB);
}

TEST_CASE("the expandable model prefers a block that cannot grow over the segment's free tail",
          "[replay][expandable]") {
  ExpandableModel m(std::uint64_t(1) << 40);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  REQUIRE(m.allocate(16 * MiB, 0, &a));  // [0, 16) of a 20 MiB page
  REQUIRE(m.allocate(4 * MiB, 0, &b));   // [16, 20)
  REQUIRE(m.allocate(25 * MiB, 0, &c));  // [20, 45), free tail [45, 60)
  CHECK(m.reserved() == 60 * MiB);
  m.free(a);  // [0, 16) free, bounded by b
  // 15 MiB: the tail fits best but could grow, so the 16 MiB block is taken; the next 16 MiB
  // then finds only the 15 MiB tail and extends it by a page.
  void* d = nullptr;
  void* e = nullptr;
  REQUIRE(m.allocate(15 * MiB, 0, &d));
  CHECK(m.reserved() == 60 * MiB);
  REQUIRE(m.allocate(16 * MiB, 0, &e));
  CHECK(m.reserved() == 80 * MiB);
}

TEST_CASE("the expandable model unmaps only whole pages inside free blocks when out of memory",
          "[replay][expandable]") {
  ExpandableModel m(100 * MiB);  // a large segment spans 120 MiB of addresses (9/8, in pages)
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  REQUIRE(m.allocate(30 * MiB, 0, &a));  // [0, 30), free [30, 40)
  REQUIRE(m.allocate(30 * MiB, 0, &b));  // the tail extended: [30, 60)
  REQUIRE(m.allocate(5 * MiB, 0, &c));   // [60, 65), free [65, 80)
  CHECK(m.reserved() == 80 * MiB);
  m.free(a);  // free [0, 30): one whole page, [0, 20)
  // 40 MiB: extending [65, 80) needs two more pages (120 MiB > 100). The cache is released:
  // [0, 20) is unmapped, [20, 30) and [65, 80) hold no whole page and stay mapped. Retry.
  void* d = nullptr;
  REQUIRE(m.allocate(40 * MiB, 0, &d));  // [65, 105), free [105, 120)
  CHECK(m.reserved() == 100 * MiB);
  CHECK(m.peak_reserved() == 100 * MiB);
  CHECK(m.segment_frees() == 1);
  CHECK(m.page_unmaps() == 1);
  CHECK(m.page_maps() == 6);
  void* e = nullptr;
  REQUIRE(m.allocate(10 * MiB, 0, &e));  // [20, 30) is still mapped: no new page
  CHECK(m.reserved() == 100 * MiB);
  void* f = nullptr;
  CHECK_FALSE(m.allocate(50 * MiB, 0, &f));  // nothing left to unmap
  CHECK(m.reserved() == 100 * MiB);
  CHECK(m.segment_frees() == 1);
}

TEST_CASE("the expandable model releases a segment left wholly unmapped", "[replay][expandable]") {
  ExpandableModel m(100 * MiB);
  void* a = nullptr;
  REQUIRE(m.allocate(30 * MiB, 0, &a));
  m.free(a);
  CHECK(m.reserved() == 40 * MiB);
  void* b = nullptr;
  REQUIRE(m.allocate(70 * MiB, 1, &b));  // stream 1 needs 80 MiB: stream 0's pages go
  CHECK(m.reserved() == 80 * MiB);
  CHECK(m.page_unmaps() == 2);
  void* c = nullptr;
  REQUIRE(m.allocate(20 * MiB, 0, &c));  // stream 0 gets a segment again
  CHECK(m.reserved() == 100 * MiB);
  CHECK_FALSE(m.allocate(1, 0, &a));  // small pool: no page left for it
}

namespace {

// Ten events of one device, every kind: an ignored free_requested, segment_alloc and oom, and
// an inconsistent free (event 7), skipped.
std::vector<TraceRecord> curve_trace() {
  return {alloc(0x1000, 4 * MiB),
          {TraceAction::free_requested, 0x1000, 4 * MiB, 0, 0},
          release(0x1000),
          {TraceAction::segment_alloc, 0x9000, 20 * MiB, 0, 0},
          alloc(0x2000, 30 * MiB),
          alloc(0x3000, 100),
          release(0x2000),
          release(0xdead),
          alloc(0x4000, 8 * MiB),
          {TraceAction::oom, 0, 1, 0, 0}};
}

// Buckets [0, 2) [2, 2) [2, 5) [5, 9) [9, 12) [12, 20) [20, ...): one without events inside
// the trace, two after its end.
const std::vector<std::uint64_t> kBucketFirst = {0, 2, 2, 5, 9, 12, 20};

void check_curve(const ReservedCurve& c, const std::vector<std::int64_t>& min,
                 const std::vector<std::int64_t>& max) {
  INFO(c.policy);
  std::vector<std::int64_t> min_mib, max_mib;
  for (auto v : c.min) min_mib.push_back(v / std::int64_t(MiB));
  for (auto v : c.max) max_mib.push_back(v / std::int64_t(MiB));
  CHECK(min_mib == min);
  CHECK(max_mib == max);
  CHECK(c.skipped_events == 1);
}

}  // namespace

TEST_CASE("reserved curves hold each policy's reserved bytes per bucket of events",
          "[replay][curves]") {
  std::vector<ReservedCurve> curves;
  std::string error;
  Settings settings;
  settings.page_size = 0;  // the driver's granularity: the figures below are in 2 MiB pages
  REQUIRE(replay_curves(curve_trace(), settings, std::uint64_t(1) << 40, kBucketFirst, &curves,
                        &error));
  REQUIRE(curves.size() == 3);
  // cudalloc, paged: reserved is its 2 MiB physical pages: 4 MiB, then 30 MiB (the two idle
  // pages reused), a 2 MiB slab for 100 B, and 8 MiB from idle pages.
  CHECK(curves[0].policy == "cudalloc");
  check_curve(curves[0], {0, 4, 4, 32, 32, 32, 32}, {4, 4, 30, 32, 32, 32, 32});
  CHECK(curves[0].peak_reserved == 32 * MiB);
  CHECK(curves[0].page_maps == 16);
  // Native: a 20 MiB segment for 4 MiB, 30 MiB of its own, 2 MiB small; 8 MiB reuse.
  CHECK(curves[1].policy == "pytorch");
  check_curve(curves[1], {0, 20, 20, 52, 52, 52, 52}, {20, 20, 50, 52, 52, 52, 52});
  CHECK(curves[1].page_maps == 0);
  // Expandable: the free 20 MiB extended by a page for 30 MiB, a 2 MiB small page.
  CHECK(curves[2].policy == "expandable");
  check_curve(curves[2], {0, 20, 20, 42, 42, 42, 42}, {20, 20, 40, 42, 42, 42, 42});
  CHECK(curves[2].page_maps == 3);
  const double live = double(30 * MiB + 100);  // a2 and a3
  CHECK(curves[1].fragmentation == Approx(52 * MiB / live));
  CHECK(curves[2].fragmentation == Approx(42 * MiB / live));
  for (const auto& c : curves) CHECK(c.oom_events == 0);
}

TEST_CASE("reserved curves of a replay whose allocations fail", "[replay][curves]") {
  std::vector<ReservedCurve> curves;
  std::string error;
  REQUIRE(replay_curves(curve_trace(), Settings{}, 24 * MiB, kBucketFirst, &curves, &error));
  // 30 MiB never fit: the models release their cache (reserved 0 after event 4) and skip the
  // free at event 6; 100 B take a small page, 8 MiB a new 20 MiB segment / page.
  for (const std::size_t i : {1, 2}) {
    check_curve(curves[i], {0, 20, 0, 2, 22, 22, 22}, {20, 20, 20, 22, 22, 22, 22});
    CHECK(curves[i].oom_events == 1);
    // Against what was live in this replay (8 MiB + 100 B), not the trace's 30 MiB.
    CHECK(curves[i].fragmentation == Approx(22 * MiB / double(8 * MiB + 100)));
  }
  CHECK(curves[0].oom_events == 1);
  CHECK(curves[0].fragmentation >= 1.0);
}

TEST_CASE("reserved curves refuse broken buckets, several devices and malformed sizes",
          "[replay][curves][errors]") {
  std::vector<ReservedCurve> curves;
  std::string error;
  CHECK_FALSE(replay_curves(curve_trace(), Settings{}, GiB, {}, &curves, &error));
  CHECK(error.find("start with 0") != std::string::npos);
  CHECK_FALSE(replay_curves(curve_trace(), Settings{}, GiB, {0, 5, 3}, &curves, &error));
  CHECK(error.find("decreases at bucket 2") != std::string::npos);
  std::vector<TraceRecord> two = curve_trace();
  two[3].device = 1;
  CHECK_FALSE(replay_curves(two, Settings{}, GiB, {0}, &curves, &error));
  CHECK(error.find("devices 0 and 1") != std::string::npos);
  CHECK_FALSE(replay_curves({alloc(1, UINT64_MAX)}, Settings{}, GiB, {0}, &curves, &error));
  CHECK(error.find("malformed trace at event 0") != std::string::npos);
  CHECK(curves.empty());
  // No events: every bucket holds 0.
  REQUIRE(replay_curves({}, Settings{}, GiB, {0, 0, 3}, &curves, &error));
  for (const auto& c : curves) {
    CHECK(c.min == std::vector<std::int64_t>{0, 0, 0});
    CHECK(c.max == std::vector<std::int64_t>{0, 0, 0});
  }
}

TEST_CASE("a plan remembers the device event each op came from", "[replay][curves]") {
  std::vector<TraceRecord> events = curve_trace();
  events.insert(events.begin() + 1, TraceRecord{TraceAction::alloc, 0x7000, 512, 0, 1});
  Plan plan;
  std::string error;
  REQUIRE(make_plan(events, 0, true, &plan, &error));
  // Device 0's events 0, 2, 4, 5, 6, 8: the other device's record does not count.
  CHECK(plan.op_events == std::vector<std::uint64_t>{0, 2, 4, 5, 6, 8});
  CHECK(plan.op_events.size() == plan.ops.size());
}

TEST_CASE("a replay whose allocations fail reports the first and what it had live",
          "[replay][oom]") {
  // 30 MiB never fit in 24 MiB: its free is skipped, and the replay never had more than the
  // 10 MiB allocation live, where the trace had 40 MiB.
  const std::vector<TraceRecord> events = {alloc(1, 10 * MiB), alloc(2, 30 * MiB), release(2),
                                           release(1), alloc(3, 5 * MiB)};
  Plan plan;
  std::string error;
  REQUIRE(make_plan(events, 0, false, &plan, &error));
  CHECK(plan.peak_live_bytes == 40 * MiB);
  CHECK(served_peak_live(plan, {}) == 40 * MiB);
  CHECK(served_peak_live(plan, {1}) == 10 * MiB);
  CHECK(served_peak_live(plan, {0, 1}) == 5 * MiB);
  for (const PolicyResult& r : {run_cudalloc(plan, Settings{}, 24 * MiB),
                                run_pytorch(plan, 24 * MiB), run_expandable(plan, 24 * MiB)}) {
    INFO(r.policy);
    CHECK(r.oom_events == 1);
    CHECK(r.first_failed_size == 30 * MiB);
    CHECK(r.first_failed_event == 1);
    CHECK(r.served_peak_live_bytes == 10 * MiB);
    CHECK(r.peak_reserved_bytes >= r.served_peak_live_bytes);
  }
  const PolicyResult fine = run_pytorch(plan, GiB);
  CHECK(fine.oom_events == 0);
  CHECK(fine.served_peak_live_bytes == 40 * MiB);
}

TEST_CASE("cudalloc's replay quiets its warnings at the default level while it runs",
          "[replay][oom]") {
  const spdlog::level::level_enum before = log().level();
  log().set_level(spdlog::level::warn);
  {
    CudallocPolicy policy(0, Settings{}, 8 * MiB, false);
    CHECK(log().level() == spdlog::level::err);
    void* p = nullptr;
    CHECK_FALSE(policy.allocate(64 * MiB, 0, &p));  // counted by the replay, not warned of
  }
  CHECK(log().level() == spdlog::level::warn);
  log().set_level(spdlog::level::debug);  // CUDALLOC_LOG=debug asks for every message
  {
    CudallocPolicy policy(0, Settings{}, 8 * MiB, false);
    CHECK(log().level() == spdlog::level::debug);
  }
  log().set_level(before);
}
