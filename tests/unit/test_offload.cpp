// The host tier on the fake device: spilling past the device budget, host_limit, moving live
// allocations between device and host memory at the same address, promotion, faults in the
// middle of a move, and the pinned-memory fallback. The harness runs the invariant checker
// (tiers included) after every operation.
#include <cstring>
#include <vector>

#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;
using device::Location;

namespace {

constexpr StreamHandle S = 0x61;
constexpr StreamHandle T = 0x62;
constexpr std::size_t kPage = 2 * MiB;

// Pages of kPage: the tests here count spilled and promoted bytes in 2 MiB pages.
Settings offload_settings(std::size_t limit, std::size_t host_limit = 0, double promote = 0) {
  Settings s = granular_pages();
  s.limit = limit;
  s.offload = Offload::host;
  s.host_limit = host_limit;
  s.promote = promote;
  s.page_slack = 0;
  return s;
}

struct Residency {
  std::size_t device = 0;
  std::size_t host = 0;
};

Residency residency(Harness& h, const void* p) {
  Residency r;
  const Error err = h.alloc->residency(p, &r.device, &r.host);
  INFO(last_error_message());
  REQUIRE(err == Error::ok);
  return r;
}

// Where the fake device says every page of [p, p + n) lives: true when all are `where`.
bool lives_on(Harness& h, const void* p, std::size_t n, Location where) {
  for (std::uintptr_t va = addr(p); va < addr(p) + n; va += kPage) {
    Location at = Location::device;
    if (!h.fake.location_of(va, &at) || at != where) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a request past the device budget is served from host memory", "[offload]") {
  Harness h(offload_settings(8 * MiB));
  void* a = h.get(6 * MiB);
  CHECK(residency(h, a).device == 6 * MiB);
  void* b = h.get(6 * MiB);  // does not fit the 8 MiB budget next to a
  const Residency rb = residency(h, b);
  CHECK(rb.device + rb.host == 6 * MiB);
  CHECK(rb.host >= 4 * MiB);
  const Stats s = h.stats();
  CHECK(s.reserved_bytes.peak <= static_cast<std::int64_t>(8 * MiB));
  CHECK(s.spills.total == 1);
  CHECK(s.host_active_bytes.current >= static_cast<std::int64_t>(4 * MiB));
  CHECK(h.fake.used_bytes(0) <= 8 * MiB);
  CHECK(h.fake.host_used_bytes() == static_cast<std::size_t>(s.host_reserved_bytes.current));
  // The snapshot shows what lives where: its segments add up to the memory of both tiers.
  const DeviceState st = h.alloc->state();
  std::size_t total = 0, host = 0;
  for (const SegmentState& seg : st.segments) {
    total += seg.size;
    host += seg.host_bytes;
  }
  CHECK(total == static_cast<std::size_t>(s.reserved_bytes.current + s.host_reserved_bytes.current));
  CHECK(host == static_cast<std::size_t>(s.host_reserved_bytes.current));
  fill_pattern(a, 6 * MiB, 1);
  fill_pattern(b, 6 * MiB, 2);
  CHECK(holds_pattern(a, 6 * MiB, 1));
  CHECK(holds_pattern(b, 6 * MiB, 2));
  h.put(b);
  h.put(a);
  CHECK(h.stats().host_active_bytes.current == 0);
}

TEST_CASE("without offload the same request is out of memory", "[offload]") {
  Settings s = offload_settings(8 * MiB);
  s.offload = Offload::none;
  Harness h(s);
  void* a = h.get(6 * MiB);
  void* b = nullptr;
  CHECK(h.try_get(6 * MiB, 0, &b) == Error::out_of_memory);
  CHECK(b == nullptr);
  CHECK(h.stats().host_reserved_bytes.peak == 0);
  h.put(a);
}

TEST_CASE("host_limit caps the host tier; past it the error is a clean out of memory",
          "[offload]") {
  Harness h(offload_settings(4 * MiB, 4 * MiB));
  void* a = h.get(4 * MiB);
  void* b = h.get(4 * MiB);  // all of it on the host
  CHECK(residency(h, b).host == 4 * MiB);
  void* c = nullptr;
  CHECK(h.try_get(2 * MiB, 0, &c) == Error::out_of_memory);
  CHECK(std::string(last_error_message()).find("host tier 4.00 MiB held, host_limit 4.00 MiB") !=
        std::string::npos);
  CHECK(h.stats().host_reserved_bytes.current <= static_cast<std::int64_t>(4 * MiB));
  h.put(b);
  c = h.get(2 * MiB);  // room on the host again
  h.put(c);
  h.put(a);
}

TEST_CASE("a freed spilled page is not reused once the device has room", "[offload]") {
  Harness h(offload_settings(8 * MiB));
  void* a = h.get(6 * MiB);
  void* b = h.get(6 * MiB);
  h.put(a);
  h.put(b);
  // The same addresses come back, and now fit the device: no page of them stays on the host.
  void* c = h.get(6 * MiB);
  CHECK(residency(h, c).host == 0);
  CHECK(lives_on(h, c, 6 * MiB, Location::device));
  h.put(c);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().host_reserved_bytes.current == 0);
  CHECK(h.fake.host_used_bytes() == 0);
}

TEST_CASE("offload and prefetch keep the address and every byte", "[offload]") {
  Harness h(offload_settings(0));
  const std::size_t n = 5 * MiB + 4096;
  void* p = h.get(n, S);
  fill_pattern(p, n, 7);
  REQUIRE(h.alloc->offload(p, S) == Error::ok);
  h.check();
  CHECK(residency(h, p).host == round_up(n, DeviceAllocator::kBlockRound));
  CHECK(lives_on(h, p, n, Location::host));
  CHECK(holds_pattern(p, n, 7));
  CHECK(h.stats().page_offloads.total == 3);
  // The device pages it left are idle and serve the next request without new memory.
  const auto reserved = h.stats().reserved_bytes.current;
  void* q = h.get(4 * MiB, S);
  CHECK(h.stats().reserved_bytes.current == reserved);
  fill_pattern(p, n, 9);  // kernels (here the host) write the offloaded memory at its address
  REQUIRE(h.alloc->prefetch(p, S) == Error::ok);
  h.check();
  CHECK(residency(h, p).device == round_up(n, DeviceAllocator::kBlockRound));
  CHECK(lives_on(h, p, n, Location::device));
  CHECK(holds_pattern(p, n, 9));
  CHECK(h.stats().page_prefetches.total == 3);
  CHECK(h.fake.bad_copies() == 0);
  // Moving to where it already is does nothing.
  REQUIRE(h.alloc->prefetch(p, S) == Error::ok);
  CHECK(h.stats().page_prefetches.total == 3);
  h.put(q);
  h.put(p);
}

TEST_CASE("a small allocation moves with the neighbours on its page", "[offload]") {
  Harness h(offload_settings(0));
  void* a = h.get(1000, S);
  void* b = h.get(1000, S);
  fill_pattern(a, 1000, 3);
  fill_pattern(b, 1000, 4);
  REQUIRE(h.alloc->offload(a, S) == Error::ok);
  h.check();
  CHECK(residency(h, a).host == residency(h, a).host + residency(h, a).device);
  CHECK(holds_pattern(a, 1000, 3));
  CHECK(holds_pattern(b, 1000, 4));
  h.put(a);
  h.put(b);
}

TEST_CASE("a move waits for the work queued on its stream and on the allocation's",
          "[offload]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(offload_settings(0), o);
  void* p = h.get(4 * MiB, S);
  fill_pattern(p, 4 * MiB, 5);
  h.fake.enqueue_work(0, S);  // a kernel still using p
  h.fake.enqueue_work(0, T);
  REQUIRE(h.alloc->offload(p, T) == Error::ok);
  h.check();
  // The copy ran on T after S's kernel (T was made to wait for S) and the host waited for it.
  CHECK(h.fake.stream_idle(0, S));
  CHECK(h.fake.stream_idle(0, T));
  CHECK(h.fake.bad_copies() == 0);
  CHECK(holds_pattern(p, 4 * MiB, 5));
  h.put(p);
}

TEST_CASE("promote moves spilled pages back once the device has room", "[offload]") {
  Harness h(offload_settings(8 * MiB));
  void* a = h.get(6 * MiB);
  void* b = h.get(6 * MiB);
  fill_pattern(b, 6 * MiB, 6);
  REQUIRE(residency(h, b).host > 0);
  REQUIRE(h.alloc->promote() == Error::ok);  // no room yet: nothing moves, no error
  CHECK(residency(h, b).host > 0);
  h.put(a);
  REQUIRE(h.alloc->promote() == Error::ok);
  h.check();
  CHECK(residency(h, b).host == 0);
  CHECK(lives_on(h, b, 6 * MiB, Location::device));
  CHECK(holds_pattern(b, 6 * MiB, 6));
  CHECK(h.stats().host_active_bytes.current == 0);
  CHECK(h.stats().reserved_bytes.current <= static_cast<std::int64_t>(8 * MiB));
  h.put(b);
}

TEST_CASE("with promote set, a free that makes room brings spilled pages back", "[offload]") {
  Harness h(offload_settings(8 * MiB, 0, 0.9));
  void* a = h.get(6 * MiB);
  void* b = h.get(6 * MiB);
  fill_pattern(b, 6 * MiB, 8);
  REQUIRE(residency(h, b).host > 0);
  void* c = h.get(512 * KiB);
  h.put(c);  // still no room: b stays
  CHECK(residency(h, b).host > 0);
  h.put(a);  // 6 MiB in use of 8: below 0.9 of the budget
  CHECK(residency(h, b).host == 0);
  CHECK(holds_pattern(b, 6 * MiB, 8));
  CHECK(h.stats().page_prefetches.total >= 2);
  h.put(b);
}

TEST_CASE("a fault in the middle of a move leaves the allocation valid", "[offload][faults]") {
  const CallKind kind = GENERATE(CallKind::create_physical, CallKind::reserve, CallKind::map,
                                 CallKind::set_access, CallKind::copy, CallKind::unmap,
                                 CallKind::event_record, CallKind::event_synchronize);
  const int nth = GENERATE(1, 2, 3, 4, 5, 6);
  // Any one failed call is survived. Two in a row are survived where a range call falls back
  // to page-by-page calls (set_access); a map that fails and then cannot map the old page
  // back loses the page, and the call says so (not tested: that is not a valid state).
  const int count = GENERATE(1, 2);
  if (count == 2 && kind != CallKind::set_access) return;
  CAPTURE(device::call_kind_name(kind), nth, count);
  Harness h(offload_settings(0));
  const std::size_t n = 3 * kPage;
  void* p = h.get(n, S);
  fill_pattern(p, n, 11);
  const bool to_host = nth % 2 == 1;
  if (!to_host) REQUIRE(h.alloc->offload(p, S) == Error::ok);
  h.fake.fail_call(kind, nth,
                   kind == CallKind::create_physical ? device::Status::out_of_memory
                                                     : device::Status::device_error,
                   count);
  const Error err = to_host ? h.alloc->offload(p, S) : h.alloc->prefetch(p, S);
  CAPTURE(err, last_error_message());
  h.check();
  const Residency r = residency(h, p);
  CHECK(r.device + r.host == n);
  CHECK(holds_pattern(p, n, 11));
  CHECK(h.fake.bad_copies() == 0);
  h.fake.clear_faults();
  REQUIRE((to_host ? h.alloc->offload(p, S) : h.alloc->prefetch(p, S)) == Error::ok);
  h.check();
  CHECK((to_host ? residency(h, p).host : residency(h, p).device) == n);
  CHECK(holds_pattern(p, n, 11));
  h.put(p);
  // Nothing leaks, not even a staging or home page whose unmap failed.
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.fake.used_bytes(0) == 0);
  CHECK(h.fake.host_used_bytes() == 0);
}

TEST_CASE("without host-located pages the host tier is pinned memory", "[offload]") {
  FakeDevice::Options o = fake_options();
  o.host_physical = false;
  const bool paged = GENERATE(true, false);
  CAPTURE(paged);
  Settings s = offload_settings(8 * MiB);
  s.vmm = paged;
  Harness h(s, o);
  void* a = h.get(6 * MiB);
  void* b = h.get(6 * MiB);
  void* c = h.get(100);  // small requests spill too
  CHECK(residency(h, b).host == 6 * MiB);
  CHECK(h.stats().spills.total >= 1);
  CHECK(h.fake.calls(CallKind::host_alloc) >= 1);
  fill_pattern(b, 6 * MiB, 12);
  CHECK(holds_pattern(b, 6 * MiB, 12));
  CHECK(h.alloc->offload(b, 0) == Error::not_supported);
  CHECK(h.alloc->offload(a, 0) == Error::not_supported);
  h.check();
  h.put(b);
  h.put(c);
  h.put(a);
  // A request that fits the device never lands in the pinned memory left over.
  void* d = h.get(2 * MiB);
  CHECK(residency(h, d).host == 0);
  h.put(d);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().host_reserved_bytes.current == 0);
  CHECK(h.fake.host_used_bytes() == 0);
}

TEST_CASE("moving a pointer that is not a live allocation is an error", "[offload]") {
  Harness h(offload_settings(0));
  void* p = h.get(4 * MiB);
  CHECK(h.alloc->offload(static_cast<char*>(p) + 512, 0) == Error::invalid_pointer);
  h.put(p);
  CHECK(h.alloc->offload(p, 0) == Error::invalid_pointer);
  CHECK(h.alloc->prefetch(nullptr, 0) == Error::invalid_pointer);
  std::size_t d = 0, host = 0;
  CHECK(h.alloc->residency(p, &d, &host) == Error::invalid_pointer);
  h.check();
}

TEST_CASE("reset returns host memory too", "[offload]") {
  Harness h(offload_settings(4 * MiB));
  h.get(4 * MiB);
  void* b = h.get(4 * MiB);
  REQUIRE(residency(h, b).host == 4 * MiB);
  REQUIRE(h.alloc->reset() == Error::ok);
  h.check();
  CHECK(h.stats().host_reserved_bytes.current == 0);
  CHECK(h.fake.host_used_bytes() == 0);
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("a workload that spills the same addresses every step maps nothing once warm",
          "[offload]") {
  Harness h(offload_settings(16 * MiB));
  std::int64_t moves_before = 0;
  for (int step = 0; step < 6; ++step) {
    if (step == 2) moves_before = h.stats().page_maps.total + h.stats().page_unmaps.total;
    std::vector<void*> ptrs;
    for (int i = 0; i < 6; ++i) {
      ptrs.push_back(h.get(4 * MiB));
      fill_pattern(ptrs.back(), 4 * MiB, static_cast<unsigned>(step * 8 + i));
    }
    for (int i = 0; i < 6; ++i) CHECK(holds_pattern(ptrs[i], 4 * MiB, static_cast<unsigned>(step * 8 + i)));
    CHECK(h.stats().host_active_bytes.current == static_cast<std::int64_t>(8 * MiB));
    for (auto it = ptrs.rbegin(); it != ptrs.rend(); ++it) h.put(*it);
  }
  CHECK(h.stats().page_maps.total + h.stats().page_unmaps.total == moves_before);
  CHECK(h.stats().spills.total == 12);
}

TEST_CASE("a move into an idle page waits for the stream that used the page last",
          "[offload]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(offload_settings(0), o);
  void* p = h.get(4 * MiB, S);
  fill_pattern(p, 4 * MiB, 13);
  REQUIRE(h.alloc->offload(p, S) == Error::ok);
  // The device pages p left serve x on stream T, whose kernel is still queued when x is freed:
  // the pages are idle, still mapped at x's address, last used by T.
  void* x = h.get(4 * MiB, T);
  h.fake.enqueue_work(0, T);
  h.put(x);
  REQUIRE_FALSE(h.fake.stream_idle(0, T));
  const std::size_t waits_before = h.fake.waits().size();
  REQUIRE(h.alloc->prefetch(p, S) == Error::ok);
  h.check();
  bool s_waited_for_t = false;
  const auto waits = h.fake.waits();
  for (std::size_t i = waits_before; i < waits.size(); ++i) {
    s_waited_for_t = s_waited_for_t || (waits[i].waiter == S && waits[i].on == T);
  }
  CHECK(s_waited_for_t);
  CHECK(h.fake.stream_idle(0, T));  // the host waited for the copy, which came after T's work
  CHECK(residency(h, p).device == 4 * MiB);
  CHECK(holds_pattern(p, 4 * MiB, 13));
  CHECK(h.fake.bad_copies() == 0);
  h.put(p);
}
