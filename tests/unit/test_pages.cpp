// Paged segments on the fake device: physical pages only under blocks in use, idle pages
// serving any later request, stream ordering of page moves, faults, empty_cache, limits.
// The harness runs the invariant checker (pages included) after every operation.
#include <cstring>
#include <vector>

#include "harness.h"
#include "lcg.h"
#include "snapshot/snapshot_json.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle S = 0x51;
constexpr StreamHandle T = 0x52;
constexpr std::size_t kPage = 2 * MiB;

// Pages of kPage (the fake's granularity): the tests here count pages and place blocks on
// 2 MiB boundaries; those about page_size set their own.
Settings paged(double slack = 0.0) {
  Settings s = granular_pages();
  s.page_slack = slack;
  return s;
}

void fill(void* p, std::size_t n, unsigned char value) { std::memset(p, value, n); }

bool holds(const void* p, std::size_t n, unsigned char value) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

std::int64_t pages(std::size_t n) { return static_cast<std::int64_t>(n * kPage); }

}  // namespace

TEST_CASE("a device without virtual memory gets plain segments", "[pages]") {
  FakeDevice::Options no_vmm = fake_options();
  no_vmm.granularity = 0;
  Harness h(Settings{}, no_vmm);
  CHECK_FALSE(h.alloc->paged());
  void* p = h.get(8 * MiB);
  CHECK(h.fake.calls(CallKind::malloc) == 1);
  CHECK(h.fake.calls(CallKind::reserve) == 0);
  h.put(p);
  Harness off(plain_settings());
  CHECK_FALSE(off.alloc->paged());
  Harness on;
  CHECK(on.alloc->paged());
}

TEST_CASE("only the pages under blocks in use hold memory", "[pages]") {
  Harness h(paged());
  void* a = h.get(5 * MiB);
  CHECK(h.stats().reserved_bytes.current == pages(3));
  CHECK(h.stats().mapped_bytes.current == pages(3));
  CHECK(h.fake.used_bytes(0) == 3 * kPage);
  fill(a, 5 * MiB, 0xab);
  CHECK(holds(a, 5 * MiB, 0xab));
  h.put(a);
  // The pages stay mapped where they are, idle, ready for the next step.
  CHECK(h.stats().reserved_bytes.current == pages(3));
  const auto maps = h.stats().page_maps.total;
  void* again = h.get(5 * MiB);
  CHECK(again == a);
  CHECK(h.stats().page_maps.total == maps);
  h.put(again);
}

TEST_CASE("idle pages serve a request elsewhere in the address space", "[pages]") {
  Harness h(paged());
  void* a = h.get(6 * MiB);       // pages 0-2
  void* keep = h.get(1 * MiB);    // page 3
  fill(keep, 1 * MiB, 0x5a);
  h.put(a);                       // pages 0-2 idle
  void* b = h.get(8 * MiB);       // too big for the hole: pages 3-7, four of them new
  CHECK(addr(b) >= addr(keep) + 1 * MiB);
  CHECK(h.stats().reserved_bytes.current == pages(5));  // three idle pages moved, one new
  CHECK(h.stats().device_allocs.total == 5);
  fill(b, 8 * MiB, 0xc3);
  CHECK(holds(keep, 1 * MiB, 0x5a));
  CHECK(holds(b, 8 * MiB, 0xc3));
  h.put(b);
  h.put(keep);
}

TEST_CASE("medium sizes share pages", "[pages]") {
  Harness h(paged());
  std::vector<void*> blocks;
  const std::size_t size = 300 * KiB;  // above slab_max, below a page
  for (int i = 0; i < 40; ++i) blocks.push_back(h.get(size));
  const std::int64_t live = h.stats().allocated_bytes.current;
  CHECK(h.stats().reserved_bytes.current <= live + pages(1));
  for (void* p : blocks) h.put(p);
}

TEST_CASE("a page moves to another stream only behind an event of the first",
          "[pages][streams]") {
  Harness h(paged(), fake_options(100 * MiB));
  h.fake.set_manual_streams(true);
  void* a = h.get(4 * MiB, S);
  h.fake.enqueue_work(0, S);  // S's kernel still uses `a`
  h.put(a);
  void* b = h.get(4 * MiB, T);  // T's own range, backed by S's idle pages
  CHECK(h.stats().reserved_bytes.current == pages(2));
  const auto waits = h.fake.waits();
  REQUIRE_FALSE(waits.empty());
  for (const auto& w : waits) {
    CHECK(w.waiter == T);
    CHECK(w.on == S);
    CHECK(w.until == 1);  // after S's kernel
  }
  h.put(b);
}

TEST_CASE("a repeating workload maps nothing after its first steps", "[pages]") {
  Harness h(Settings{}, fake_options(4 * GiB));
  // A step: activations grow, then are freed in reverse while gradients of other sizes come
  // and go, then an optimizer temporary.
  auto step = [&] {
    std::vector<void*> acts;
    for (std::size_t i = 1; i <= 24; ++i) acts.push_back(h.get(i * 3 * MiB + i * 7 * KiB));
    std::vector<void*> grads;
    for (std::size_t i = 24; i >= 1; --i) {
      grads.push_back(h.get(i * 2 * MiB + 300 * KiB));
      h.put(acts[i - 1]);
      if (i % 3 == 0) {
        h.put(grads.back());
        grads.pop_back();
      }
    }
    void* tmp = h.get(40 * MiB);
    h.put(tmp);
    for (void* g : grads) h.put(g);
  };
  for (int i = 0; i < 3; ++i) step();
  const auto maps = h.stats().page_maps.total;
  const auto unmaps = h.stats().page_unmaps.total;
  for (int i = 0; i < 5; ++i) step();
  CHECK(h.stats().page_maps.total == maps);
  CHECK(h.stats().page_unmaps.total == unmaps);
}

TEST_CASE("device faults in paging fail the request cleanly", "[pages][faults]") {
  const CallKind kind = GENERATE(CallKind::create_physical, CallKind::map, CallKind::set_access,
                                 CallKind::reserve);
  INFO(device::call_kind_name(kind));
  Harness h(paged());
  void* keep = h.get(3 * MiB, S);
  fill(keep, 3 * MiB, 0x77);
  h.fake.fail_call(kind, 1, device::Status::device_error);
  void* p = nullptr;
  // Stream T needs a range of its own (reserve) and new pages (create, map, set_access).
  CHECK(h.try_get(8 * MiB, T, &p) == Error::device_error);
  CHECK(p == nullptr);
  CHECK(holds(keep, 3 * MiB, 0x77));
  void* q = h.get(8 * MiB, T);  // the fault is gone: the same request succeeds
  fill(q, 8 * MiB, 0x11);
  CHECK(holds(keep, 3 * MiB, 0x77));
  h.put(q);
  h.put(keep);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("empty_cache unmaps and releases every unused page", "[pages]") {
  Harness h(paged());
  void* a = h.get(10 * MiB);
  void* b = h.get(3 * MiB);  // pages 5-6
  fill(b, 3 * MiB, 0x42);
  h.put(a);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == pages(2));
  CHECK(h.stats().mapped_bytes.current == pages(2));
  CHECK(h.fake.used_bytes(0) == 2 * kPage);
  CHECK(holds(b, 3 * MiB, 0x42));
  h.put(b);
  SECTION("an unmap fault keeps the page until the next empty_cache") {
    h.fake.fail_call(CallKind::unmap, 1, device::Status::device_error);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    h.check();
    CHECK(h.stats().reserved_bytes.current == pages(1));
  }
  SECTION("a release fault keeps the page until the next empty_cache") {
    h.fake.fail_call(CallKind::release_physical, 1, device::Status::device_error);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    h.check();
    CHECK(h.stats().reserved_bytes.current == pages(1));
    CHECK(h.stats().mapped_bytes.current == 0);
  }
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().mapped_bytes.current == 0);
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("limit counts physical pages, and idle pages are reused under it", "[pages][limits]") {
  Settings s = paged();
  s.limit = 8 * MiB;
  Harness h(s);
  void* a = h.get(6 * MiB);
  void* p = nullptr;
  CHECK(h.try_get(4 * MiB, 0, &p) == Error::out_of_memory);  // 3 + 2 pages > 4
  h.put(a);
  void* b = h.get(8 * MiB);  // the three idle pages and one more
  CHECK(h.stats().reserved_bytes.current == pages(4));
  void* c = nullptr;
  CHECK(h.try_get(1 * MiB, S, &c) == Error::out_of_memory);
  h.put(b);
  void* d = h.get(1 * MiB, S);  // another stream's range, backed by an idle page
  CHECK(h.stats().reserved_bytes.current == pages(4));
  h.put(d);
}

TEST_CASE("with 8 MiB pages too, a page moves to another stream only behind an event of the "
          "first", "[pages][streams][page_size]") {
  Settings s = paged();
  s.page_size = 8 * MiB;
  Harness h(s, fake_options(100 * MiB));
  h.fake.set_manual_streams(true);
  void* a = h.get(4 * MiB, S);  // one 8 MiB page
  fill(a, 4 * MiB, 0x5a);
  h.fake.enqueue_work(0, S);  // S's kernel still uses `a`
  h.put(a);
  void* b = h.get(4 * MiB, T);  // T's own range, backed by S's idle page
  CHECK(h.stats().reserved_bytes.current == static_cast<std::int64_t>(8 * MiB));
  const auto waits = h.fake.waits();
  REQUIRE_FALSE(waits.empty());
  for (const auto& w : waits) {
    CHECK(w.waiter == T);
    CHECK(w.on == S);
    CHECK(w.until == 1);  // after S's kernel
  }
  h.put(b);
}

TEST_CASE("a page whose physical page serves elsewhere is remapped after its stream settles",
          "[pages][streams]") {
  Harness h(paged(), fake_options(100 * MiB));
  h.fake.set_manual_streams(true);
  void* a = h.get(2 * MiB, S);   // page 0
  void* gap = h.get(2 * MiB, S); // page 1
  h.fake.enqueue_work(0, S);     // a kernel using `a`
  device::EventHandle after_a = 0;
  REQUIRE(h.fake.event_create(0, &after_a) == device::Status::ok);
  REQUIRE(h.fake.event_record(0, after_a, S) == device::Status::ok);
  h.put(a);                      // page 0 idle
  void* b = h.get(4 * MiB, S);   // pages 2-3: one takes page 0's physical page (a checkpoint)
  h.fake.enqueue_work(0, S);     // a kernel using `b`
  void* again = h.get(2 * MiB, S);  // page 0 again: its physical page now serves page 2 or 3
  CHECK(again == a);
  CHECK(h.stats().page_unmaps.total == 1);
  CHECK(h.stats().page_waits.total == 1);
  // The host waited for `a`'s kernel before unmapping, and not for `b`'s, queued later.
  CHECK(h.fake.event_query(after_a) == device::Status::ok);
  CHECK_FALSE(h.fake.stream_idle(0, S));
  h.put(again);
  h.put(b);
  h.put(gap);
}

TEST_CASE("a snapshot shows runs of pages in use, adding up to reserved memory", "[pages][snapshot]") {
  Harness h(paged());
  void* a = h.get(3 * MiB);   // pages 0-1
  void* gap = h.get(4 * MiB); // pages 1-3
  void* b = h.get(1 * MiB);   // page 3
  h.put(gap);                 // page 2 idle but mapped: still shown, once
  void* far = h.get(64 * MiB);  // pages 4-35 (the tail)
  h.put(a);
  const DeviceState st = h.alloc->state();
  std::size_t shown = 0;
  for (const SegmentState& s : st.segments) {
    CHECK(s.paged);
    CHECK(s.size % kPage == 0);
    std::uintptr_t at = s.base;
    for (const BlockState& blk : s.blocks) {
      CHECK(blk.addr == at);
      at += blk.size;
    }
    CHECK(at == s.base + s.size);  // blocks cover the run exactly
    shown += s.size;
  }
  CHECK(static_cast<std::int64_t>(shown) == h.stats().reserved_bytes.current);
  h.put(b);
  h.put(far);
}

TEST_CASE("a snapshot lists each paged segment's pages as runs of one state", "[pages][snapshot]") {
  Settings s = paged();
  s.offload = Offload::host;
  Harness h(s);
  void* a = h.get(kPage);  // pages 0, 1, 2
  void* b = h.get(kPage);
  void* c = h.get(kPage);
  REQUIRE(h.alloc->offload(b, 0) == Error::ok);
  h.check();
  DeviceState st = h.alloc->state();
  check_page_runs(h, st);
  REQUIRE(st.segments.size() == 1);
  const std::vector<PageRun>& runs = st.segments[0].pages;
  REQUIRE(runs.size() == 3);  // device, host, device: one entry per run, not per page
  CHECK((runs[0].size == kPage && runs[0].mapped && !runs[0].host));
  CHECK((runs[1].addr == addr(b) && runs[1].size == kPage && runs[1].mapped && runs[1].host));
  CHECK((runs[2].size == kPage && runs[2].mapped && !runs[2].host));
  CHECK(st.segments[0].host_bytes == kPage);

  // The snapshot's segment says the same, with the location of each mapped run.
  const nlohmann::json doc = snapshot::snapshot_json({st}, "");
  const nlohmann::json& pages = doc["segments"][0]["pages"];
  REQUIRE(pages.size() == 3);
  std::uint64_t total = 0;
  for (const nlohmann::json& run : pages) {
    CHECK(run["mapped"] == true);
    total += run["size"].get<std::uint64_t>();
  }
  CHECK(total == doc["segments"][0]["total_size"]);
  CHECK(pages[0]["location"] == "device");
  CHECK(pages[1]["location"] == "host");
  CHECK(pages[1]["address"] == addr(b));

  // b's page, freed and released, is unmapped: the segment is cut there, into two runs of
  // pages in use, each one device-located run.
  h.put(b);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  st = h.alloc->state();
  CHECK(check_page_runs(h, st) == static_cast<std::size_t>(h.stats().mapped_bytes.current));
  REQUIRE(st.segments.size() == 2);
  for (const SegmentState& seg : st.segments) {
    REQUIRE(seg.pages.size() == 1);
    CHECK((seg.pages[0].mapped && !seg.pages[0].host && seg.pages[0].size == seg.size));
  }
  h.put(a);
  h.put(c);
}

TEST_CASE("page_size sets the unit of paged memory, a multiple of the granularity",
          "[pages][page_size]") {
  struct Case {
    std::size_t setting, unit;
  };
  for (const Case c : {Case{0, kPage}, Case{1, kPage}, Case{3 * MiB, 4 * MiB},
                       Case{8 * MiB, 8 * MiB}, Case{16 * MiB, 16 * MiB}}) {
    INFO("page_size " << c.setting);
    Settings s = paged();
    s.page_size = c.setting;
    Harness h(s);
    REQUIRE(h.alloc->paged());
    void* a = h.get(5 * MiB);
    const std::size_t unit_pages = round_up(5 * MiB, c.unit) / c.unit;
    CHECK(h.stats().reserved_bytes.current == static_cast<std::int64_t>(unit_pages * c.unit));
    CHECK(h.fake.calls(CallKind::create_physical) == unit_pages);
    CHECK(h.fake.calls(CallKind::map) == unit_pages);
    CHECK(h.fake.used_bytes(0) == unit_pages * c.unit);
    // A second block on the same pages maps nothing; bytes stay apart.
    void* b = h.get(1 * MiB);
    fill(a, 5 * MiB, 0x11);
    fill(b, 1 * MiB, 0x22);
    CHECK(holds(a, 5 * MiB, 0x11));
    CHECK(holds(b, 1 * MiB, 0x22));
    h.put(a);
    h.put(b);
    // Freed pages stay mapped and serve the next step without a driver call.
    const auto maps = h.stats().page_maps.total;
    h.put(h.get(5 * MiB));
    CHECK(h.stats().page_maps.total == maps);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    CHECK(h.stats().reserved_bytes.current == 0);
  }
}

TEST_CASE("the default page is 8 MiB", "[pages][page_size]") {
  Harness h;  // default settings: Settings::page_size
  REQUIRE(h.alloc->paged());
  CHECK(Settings{}.page_size == 8 * MiB);
  h.put(h.get(5 * MiB));
  CHECK(h.stats().reserved_bytes.current == static_cast<std::int64_t>(8 * MiB));
  CHECK(h.fake.calls(CallKind::create_physical) == 1);
  CHECK(h.fake.calls(CallKind::map) == 1);
}

TEST_CASE("larger pages map less on a workload whose sizes keep changing, bytes intact",
          "[pages][page_size]") {
  // A varied workload on two streams (sizes from 100 KiB to 40 MiB, frees in random order),
  // with each allocation's ends tagged and checked at its free; the harness validates every
  // invariant after each operation. The same operations with 8 MiB pages map fewer pages
  // and reserve at most the peak in use plus the slack the larger unit allows.
  auto run = [](std::size_t page_size) {
    Settings s = paged(0.02);
    s.page_size = page_size;
    Harness h(s);
    struct Live {
      void* p;
      std::size_t size;
      unsigned char tag;
    };
    std::vector<Live> live;
    Lcg rng{0x9e3779b97f4a7c15ull};
    constexpr std::size_t kTag = 4 * KiB;
    auto tag_ends = [&](const Live& l) {
      const std::size_t n = std::min(kTag, l.size);
      auto* p = static_cast<unsigned char*>(l.p);
      fill(p, n, l.tag);
      fill(p + l.size - n, n, l.tag);
    };
    auto ends_tagged = [&](const Live& l) {
      const std::size_t n = std::min(kTag, l.size);
      auto* p = static_cast<unsigned char*>(l.p);
      return holds(p, n, l.tag) && holds(p + l.size - n, n, l.tag);
    };
    std::int64_t peak_live = 0;
    for (int op = 0; op < 1500; ++op) {
      if (live.size() < 24 && (live.empty() || rng.below(3) != 0)) {
        const std::size_t size = 100 * KiB + rng.below(40 * MiB);
        const StreamHandle stream = rng.below(4) == 0 ? T : S;
        Live l{h.get(size, stream), size, static_cast<unsigned char>(op)};
        tag_ends(l);
        live.push_back(l);
        peak_live = std::max(peak_live, h.stats().allocated_bytes.current);
      } else {
        const std::size_t i = rng.below(live.size());
        CHECK(ends_tagged(live[i]));
        h.put(live[i].p);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    for (const Live& l : live) {
      CHECK(ends_tagged(l));
      h.put(l.p);
    }
    struct Result {
      std::int64_t maps, peak_reserved, peak_live;
    };
    return Result{h.stats().page_maps.total, h.stats().reserved_bytes.peak, peak_live};
  };
  const auto small = run(0);
  const auto large = run(8 * MiB);
  CHECK(large.maps < small.maps);
  CHECK(small.peak_reserved >= small.peak_live);
  CHECK(large.peak_reserved >= large.peak_live);
  INFO("2 MiB pages: " << small.maps << " maps, peak reserved " << small.peak_reserved
       << "; 8 MiB: " << large.maps << ", " << large.peak_reserved);
  // At most one extra 8 MiB page per live allocation (24) beyond the 2 MiB run's peak.
  CHECK(large.peak_reserved <= small.peak_reserved + static_cast<std::int64_t>(24 * 8 * MiB));
}
