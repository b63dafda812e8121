// PhysicalPages: creation within the budget, release, idle lists and the acquire policy,
// directly on a FakeDevice (with the Ledger, Budget and Staging it needs).
#include "component_fixture.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

PhysicalPage* create(PagedParts& p, Location where = Location::device) {
  PhysicalPage* phys = nullptr;
  REQUIRE(p.physical.create(where, &phys) == Error::ok);
  REQUIRE(phys != nullptr);
  return phys;
}

std::vector<PhysicalPage*> idle_order(const PhysicalPages::IdleList& list) {
  std::vector<PhysicalPage*> out;
  for (PhysicalPage* q = list.head; q != nullptr; q = q->idle_next) out.push_back(q);
  return out;
}

Request request(Growth growth = Growth::may_grow, Tier tier = Tier::device) {
  Request r;
  r.size = 2 * MiB;
  r.growth = growth;
  r.tier = tier;
  return r;
}

}  // namespace

TEST_CASE("physical pages: creation stays within the budget", "[component][physical_pages]") {
  PagedParts p(with_limit(6 * MiB));
  for (int i = 0; i < 3; ++i) create(p);
  CHECK(p.physical.count() == 3);
  CHECK(p.reserved() == std::int64_t(6 * MiB));
  CHECK(p.ledger.stats().reserved_count.current == 3);
  CHECK(p.fake.used_bytes(0) == 6 * MiB);
  PhysicalPage* over = nullptr;
  CHECK(p.physical.create(Location::device, &over) == Error::out_of_memory);
  CHECK(over == nullptr);
  CHECK(p.fake.calls(CallKind::create_physical) == 3);  // refused before the driver
  CHECK(p.physical.device_idle() == 0);                 // new pages are not idle
  CHECK(p.physical.device_owned() == 3);
}

TEST_CASE("physical pages: the device's own out of memory and errors", "[component][physical_pages]") {
  PagedParts p({}, small_device(4 * MiB));
  create(p);
  create(p);
  PhysicalPage* none = nullptr;
  CHECK(p.physical.create(Location::device, &none) == Error::out_of_memory);  // the fake is full
  p.fake.fail_call(CallKind::create_physical, 1, Status::device_error);
  CHECK(p.physical.create(Location::device, &none) == Error::device_error);
  CHECK(p.physical.count() == 2);
  CHECK(p.reserved() == std::int64_t(4 * MiB));
}

TEST_CASE("physical pages: release returns an idle page, or keeps it on failure",
          "[component][physical_pages]") {
  PagedParts p;
  PhysicalPage* a = create(p);
  PhysicalPage* b = create(p);
  PhysicalPage* c = create(p);
  p.physical.make_idle(*a);
  p.physical.make_idle(*b);
  p.fake.fail_call(CallKind::release_physical, 1, Status::device_error);
  CHECK_FALSE(p.physical.release(a));
  CHECK(p.physical.count() == 3);
  CHECK(p.physical.device_idle() == 2);  // still idle, for the next try
  CHECK(p.reserved() == std::int64_t(6 * MiB));
  REQUIRE(p.physical.release(a));
  CHECK(p.physical.count() == 2);
  CHECK(p.physical.device_idle() == 1);
  CHECK(p.reserved() == std::int64_t(4 * MiB));
  CHECK(p.fake.used_bytes(0) == 4 * MiB);
  CHECK(p.ledger.stats().device_frees.current == 1);
  // The list of pages stays dense: every page knows its position.
  for (std::size_t i = 0; i < p.physical.count(); ++i) CHECK(p.physical.all()[i]->index == i);
  CHECK(idle_order(p.physical.device_idle_list()) == std::vector<PhysicalPage*>{b});
  p.physical.make_idle(*c);
  CHECK(p.physical.release_idle() == 4 * MiB);
  CHECK(p.physical.count() == 0);
  CHECK(p.reserved() == 0);
}

TEST_CASE("physical pages: release_idle keeps pages that are still mapped",
          "[component][physical_pages]") {
  PagedParts p;
  Segment& seg = p.segment();
  REQUIRE(p.mapper.use(seg, seg.base, p.page, Request{}) == Error::ok);
  p.mapper.unuse(seg, seg.base, p.page);  // idle, mapped at its old address
  PhysicalPage* loose = create(p);
  p.physical.make_idle(*loose);
  REQUIRE(p.physical.device_idle() == 2);
  CHECK(p.physical.release_idle() == p.page);
  CHECK(p.physical.count() == 1);
  CHECK(p.physical.all()[0] == seg.pages[0].phys);
}

TEST_CASE("physical pages: idle lists keep the order pages became idle",
          "[component][physical_pages]") {
  PagedParts p;
  PhysicalPage* a = create(p);
  PhysicalPage* b = create(p);
  PhysicalPage* c = create(p);
  p.physical.make_idle(*b);
  p.physical.make_idle(*a);
  p.physical.make_idle(*c);
  CHECK(idle_order(p.physical.device_idle_list()) == std::vector<PhysicalPage*>{b, a, c});
  CHECK(b->idle_since < a->idle_since);
  CHECK(a->idle_since < c->idle_since);
  CHECK(p.physical.epoch() == c->idle_since);
  p.physical.take_idle(*a);  // from the middle
  CHECK(idle_order(p.physical.device_idle_list()) == std::vector<PhysicalPage*>{b, c});
  CHECK(p.physical.device_idle_list().tail == c);
  p.physical.take_idle(*c);  // the tail
  p.physical.take_idle(*b);  // the head
  CHECK(p.physical.device_idle_list().head == nullptr);
  CHECK(p.physical.device_idle_list().tail == nullptr);
  CHECK(p.physical.idle() == 0);
  p.physical.make_idle(*c);
  CHECK(idle_order(p.physical.device_idle_list()) == std::vector<PhysicalPage*>{c});
}

TEST_CASE("physical pages: acquire takes idle pages only past page_slack",
          "[component][physical_pages]") {
  // Slack is page_slack x reserved: 0.4 x 4 MiB = 1.6 MiB, less than one idle page.
  PagedParts p(with_limit(0, 0.4));
  PhysicalPage* a = create(p);
  create(p);
  p.physical.make_idle(*a);
  PhysicalPage* got = nullptr;
  REQUIRE(p.physical.acquire(Claim::fresh, request(), &got) == Error::ok);
  CHECK(got == a);
  CHECK(p.physical.count() == 2);

  // Slack 1.0 x 6 MiB: one idle page is within it, so new memory is taken.
  PagedParts q(with_limit(0, 1.0));
  PhysicalPage* b = create(q);
  create(q);
  create(q);
  q.physical.make_idle(*b);
  REQUIRE(q.physical.acquire(Claim::fresh, request(), &got) == Error::ok);
  CHECK(got != b);
  CHECK(q.physical.count() == 4);
  CHECK(q.physical.device_idle() == 1);
  // Without growth (cache_only) the idle page is taken anyway.
  REQUIRE(q.physical.acquire(Claim::fresh, request(Growth::cache_only), &got) == Error::ok);
  CHECK(got == b);
  CHECK(q.physical.count() == 4);
  // And with none idle, cache_only is out of memory without a driver call.
  const auto creates = q.fake.calls(CallKind::create_physical);
  CHECK(q.physical.acquire(Claim::fresh, request(Growth::cache_only), &got) ==
        Error::out_of_memory);
  CHECK(q.fake.calls(CallKind::create_physical) == creates);
}

TEST_CASE("physical pages: conflicts take the tail, fresh claims the head",
          "[component][physical_pages]") {
  PagedParts p;  // page_slack 0.02: any idle page is past it
  std::vector<PhysicalPage*> pages;
  for (int i = 0; i < 4; ++i) pages.push_back(create(p));
  for (PhysicalPage* q : pages) p.physical.make_idle(*q);
  PhysicalPage* got = nullptr;
  REQUIRE(p.physical.acquire(Claim::fresh, request(), &got) == Error::ok);
  CHECK(got == pages[0]);  // idle longest
  REQUIRE(p.physical.acquire(Claim::conflict, request(), &got) == Error::ok);
  CHECK(got == pages[3]);  // idle shortest
  CHECK(idle_order(p.physical.device_idle_list()) ==
        std::vector<PhysicalPage*>{pages[1], pages[2]});
  CHECK(p.physical.count() == 4);
  CHECK(p.fake.calls(CallKind::create_physical) == 4);
}

namespace {

// Chronic claims from a state of `pages` idle 2 MiB pages after a peak of `peak` allocated;
// returns how many of `claims` created memory.
std::size_t chronic_growth(double remap_growth, std::size_t pages, std::size_t peak,
                           int claims) {
  Settings s = with_limit(0, 0.0);
  s.remap_growth = remap_growth;
  PagedParts p(s, small_device(256 * MiB));
  for (std::size_t i = 0; i < pages; ++i) p.physical.make_idle(*create(p));
  p.peak_allocated(peak);
  PhysicalPage* got = nullptr;
  for (int i = 0; i < claims; ++i) {
    REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
  }
  return p.physical.count() - pages;
}

}  // namespace

TEST_CASE("physical pages: a chronic conflict grows while reserved stays within "
          "(1 + remap_growth) of the peak allocated", "[component][physical_pages]") {
  Settings s = with_limit(0, 0.0);
  s.remap_growth = 0.1;
  PagedParts p(s);
  std::vector<PhysicalPage*> pages;
  for (int i = 0; i < 6; ++i) pages.push_back(create(p));
  for (int i = 0; i < 5; ++i) p.physical.make_idle(*pages[i]);
  p.peak_allocated(20 * MiB);  // the bound: 22 MiB
  PhysicalPage* got = nullptr;
  REQUIRE(p.physical.acquire(Claim::conflict, request(), &got) == Error::ok);
  CHECK(got == pages[4]);  // a plain conflict takes an idle page
  std::size_t grew = 0;
  for (int i = 0; i < 8; ++i) {
    const std::size_t before = p.physical.count();
    REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
    grew += p.physical.count() - before;
  }
  // 12 MiB reserved: new pages while the next fits in 22 MiB (14, ..., 22), then idle ones.
  CHECK(grew == 5);
  CHECK(p.physical.count() == 11);
  CHECK(p.physical.device_idle() == 1);
  // The bound is overhead over the peak, not a count of pages made: when the memory grown
  // comes into use and the peak rises with it, chronic claims grow again.
  p.peak_allocated(30 * MiB);  // the bound: 33 MiB
  REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
  CHECK(p.physical.count() == 12);
  // A reset of the peak statistics (as torch.cuda.reset_peak_memory_stats at every step)
  // leaves the bound where it was.
  p.ledger.reset_peaks();
  REQUIRE(p.ledger.stats().allocated_bytes.peak == 0);
  REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
  CHECK(p.physical.count() == 13);
  // empty_cache restarts it from what is allocated now (nothing): a smaller phase after it
  // grows within its own peak, not within the larger one before.
  p.ledger.restart_high();
  CHECK(p.ledger.allocated_high() == 0);
  const std::size_t before = p.physical.count();
  for (int i = 0; i < 3; ++i) {
    REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
    p.physical.make_idle(*got);
  }
  CHECK(p.physical.count() == before);  // 26 MiB reserved, over any bound of a 0 B peak
  p.peak_allocated(24 * MiB);           // the bound: 26.4 MiB, 26 + 2 does not fit
  REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
  CHECK(p.physical.count() == before);
  p.physical.make_idle(*got);
  p.peak_allocated(26 * MiB);           // the bound: 28.6 MiB
  REQUIRE(p.physical.acquire(Claim::chronic, request(), &got) == Error::ok);
  CHECK(p.physical.count() == before + 1);
}

// remap_growth sets the overhead: 80 MiB idle after a peak of 80 MiB allocated grows 2 MiB
// pages while reserved stays within 88 MiB at 0.1 and 96 MiB at 0.2; 0 grows none (chronic
// claims take idle pages like conflicts), and neither does a bound the reserved memory
// already passes, however many claims come.
TEST_CASE("physical pages: remap_growth is the overhead allowed over the peak allocated",
          "[component][physical_pages]") {
  CHECK(chronic_growth(0.1, 40, 80 * MiB, 20) == 4);
  CHECK(chronic_growth(0.2, 40, 80 * MiB, 20) == 8);
  CHECK(chronic_growth(0.0, 40, 80 * MiB, 20) == 0);
  CHECK(chronic_growth(0.1, 40, 60 * MiB, 20) == 0);
}

TEST_CASE("physical pages: past the cap an idle page serves even within the slack",
          "[component][physical_pages]") {
  PagedParts p(with_limit(4 * MiB, 1.0));
  PhysicalPage* a = create(p);
  create(p);
  p.physical.make_idle(*a);
  PhysicalPage* got = nullptr;
  REQUIRE(p.physical.acquire(Claim::fresh, request(), &got) == Error::ok);
  CHECK(got == a);
  CHECK(p.physical.acquire(Claim::fresh, request(), &got) == Error::out_of_memory);
  CHECK(p.physical.host_count() == 0);  // no host page without Tier::host_pages
}

TEST_CASE("physical pages: host pages only for the host tier", "[component][physical_pages]") {
  PagedParts p(with_limit(2 * MiB));
  create(p);
  PhysicalPage* got = nullptr;
  CHECK(p.physical.acquire(Claim::fresh, request(), &got) == Error::out_of_memory);
  CHECK(p.physical.acquire(Claim::fresh, request(Growth::may_grow, Tier::host_segments), &got) ==
        Error::out_of_memory);
  REQUIRE(p.physical.acquire(Claim::fresh, request(Growth::may_grow, Tier::host_pages), &got) ==
          Error::ok);
  CHECK(got->host);
  CHECK(got->home != 0);  // written through its home mapping when it moves
  CHECK(p.physical.host_count() == 1);
  CHECK(p.ledger.stats().host_reserved_bytes.current == std::int64_t(2 * MiB));
  CHECK(p.reserved() == std::int64_t(2 * MiB));  // host memory is not reserved device memory
  CHECK(p.fake.host_used_bytes() == 2 * MiB);
  Location where = Location::device;
  REQUIRE(p.fake.location_of(got->home, &where));
  CHECK(where == Location::host);
  // Ownership of a host page is host memory in use; of a device page it is not.
  Page page;
  p.physical.set_owner(*got, &page);
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(2 * MiB));
  p.physical.clear_owner(*got);
  CHECK(p.ledger.stats().host_active_bytes.current == 0);
  p.physical.set_owner(*p.physical.all()[0], &page);
  CHECK(p.ledger.stats().host_active_bytes.current == 0);
  p.physical.clear_owner(*p.physical.all()[0]);
  // An idle host page is reused before a new one is created, and released with its home.
  p.physical.make_idle(*got);
  PhysicalPage* again = nullptr;
  REQUIRE(p.physical.acquire_host(&again) == Error::ok);
  CHECK(again == got);
  CHECK(p.physical.host_count() == 1);
  const std::uintptr_t home = got->home;
  p.physical.make_idle(*got);
  p.physical.release_idle();
  CHECK(p.physical.host_count() == 0);
  CHECK(p.ledger.stats().host_reserved_bytes.current == 0);
  CHECK_FALSE(p.fake.location_of(home, &where));
}

TEST_CASE("physical pages: host pages within host_limit", "[component][physical_pages]") {
  Settings s = with_limit(2 * MiB);
  s.host_limit = 4 * MiB;
  PagedParts p(s);
  PhysicalPage* got = nullptr;
  REQUIRE(p.physical.acquire_host(&got) == Error::ok);
  REQUIRE(p.physical.acquire_host(&got) == Error::ok);
  const auto creates = p.fake.calls(CallKind::create_physical);
  CHECK(p.physical.acquire_host(&got) == Error::out_of_memory);
  CHECK(p.fake.calls(CallKind::create_physical) == creates);
  CHECK(p.physical.host_supported());  // a limit, not the driver
}

TEST_CASE("physical pages: without host-located memory the host tier uses pinned memory",
          "[component][physical_pages]") {
  FakeDevice::Options o = small_device();
  o.host_physical = false;
  PagedParts p(with_limit(2 * MiB), o);
  create(p);
  REQUIRE(p.physical.host_supported());
  PhysicalPage* got = nullptr;
  CHECK(p.physical.acquire(Claim::fresh, request(Growth::may_grow, Tier::host_pages), &got) ==
        Error::out_of_memory);
  CHECK_FALSE(p.physical.host_supported());
  CHECK(p.physical.host_count() == 0);
  CHECK(p.ledger.stats().host_reserved_bytes.current == 0);
  // Known now: no more driver calls for host pages.
  const auto creates = p.fake.calls(CallKind::create_physical);
  CHECK(p.physical.acquire_host(&got) == Error::out_of_memory);
  p.physical.probe_host();
  CHECK(p.fake.calls(CallKind::create_physical) == creates);
}

TEST_CASE("physical pages: probe_host finds out once, and keeps the probe idle",
          "[component][physical_pages]") {
  PagedParts p;
  p.physical.probe_host();
  CHECK(p.physical.host_supported());
  CHECK(p.physical.host_count() == 1);
  CHECK(p.physical.host_idle_list().count == 1);
  p.physical.probe_host();  // a host page exists: nothing more to learn
  CHECK(p.physical.host_count() == 1);
  CHECK(p.fake.calls(CallKind::create_physical) == 1);
}
