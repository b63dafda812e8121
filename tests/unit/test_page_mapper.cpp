// PageMapper: pages of paged segments mapped under blocks in use, directly on a FakeDevice
// with PhysicalPages, Staging, StreamSync, Ledger and StreamPools.
#include <cstring>

#include "component_fixture.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kSide = 0x5e;

void check_used(const PagedParts& p, const Segment& seg, std::size_t first, std::size_t count) {
  for (std::size_t i = first; i < first + count; ++i) {
    const Page& page = seg.pages[i];
    INFO("page " << i);
    CHECK(page.users == 1);
    REQUIRE(page.phys != nullptr);
    CHECK(page.accessible);
    CHECK(page.phys->owner == &page);
    Location where = Location::host;
    CHECK(p.fake.location_of(p.at(seg, i), &where));
    CHECK(where == Location::device);
  }
}

}  // namespace

TEST_CASE("page mapper: use maps the pages under a block, unuse makes them idle",
          "[component][page_mapper]") {
  PagedParts p;
  Segment& seg = p.segment();
  REQUIRE(seg.pages.size() == seg.size / p.page);
  // A block from the middle of page 1 to the middle of page 3: three pages.
  const std::uintptr_t addr = p.at(seg, 1) + p.page / 2;
  REQUIRE(p.mapper.use(seg, addr, 2 * p.page, Request{}) == Error::ok);
  check_used(p, seg, 1, 3);
  CHECK(seg.pages[0].phys == nullptr);
  CHECK(seg.pages[4].phys == nullptr);
  CHECK(p.maps() == 3);
  CHECK(p.reserved() == std::int64_t(3 * p.page));
  CHECK(p.ledger.stats().mapped_bytes.current == std::int64_t(3 * p.page));
  std::memset(reinterpret_cast<void*>(addr), 0x5a, 2 * p.page);  // really accessible
  // A neighbour on the same last page adds a user and maps nothing.
  REQUIRE(p.mapper.use(seg, p.at(seg, 3) + p.page / 2, p.page, Request{}) == Error::ok);
  CHECK(seg.pages[3].users == 2);
  CHECK(p.maps() == 4);  // page 4 only
  p.mapper.unuse(seg, addr, 2 * p.page);
  CHECK(seg.pages[1].users == 0);
  CHECK(seg.pages[3].users == 1);
  CHECK(p.physical.device_idle() == 2);
  CHECK(seg.pages[1].phys != nullptr);  // idle pages stay mapped where they are
  CHECK(seg.pages[1].phys->owner == nullptr);
  CHECK(p.ledger.stats().mapped_bytes.current == std::int64_t(4 * p.page));
  CHECK(p.mapper.address_of(seg.pages[2]) == p.at(seg, 2));
  CHECK_FALSE(p.mapper.unmapped(seg));
}

TEST_CASE("page mapper: repeating a step maps nothing after the first",
          "[component][page_mapper]") {
  PagedParts p;
  Segment& seg = p.segment();
  const std::uintptr_t a = p.at(seg, 0);
  const std::uintptr_t b = p.at(seg, 3) + 4096;
  auto step = [&] {
    REQUIRE(p.mapper.use(seg, a, 3 * p.page, Request{}) == Error::ok);
    REQUIRE(p.mapper.use(seg, b, 2 * p.page, Request{}) == Error::ok);
    p.mapper.unuse(seg, a, 3 * p.page);
    p.mapper.unuse(seg, b, 2 * p.page);
  };
  step();
  const auto maps = p.maps();
  const auto creates = p.fake.calls(CallKind::create_physical);
  const auto set_access = p.fake.calls(CallKind::set_access);
  CHECK(maps == 6);
  for (int i = 0; i < 10; ++i) step();
  CHECK(p.maps() == maps);
  CHECK(p.ledger.stats().page_unmaps.current == 0);
  CHECK(p.fake.calls(CallKind::create_physical) == creates);
  CHECK(p.fake.calls(CallKind::map) == std::uint64_t(maps));
  CHECK(p.fake.calls(CallKind::set_access) == set_access);
  CHECK(p.reserved() == std::int64_t(6 * p.page));
}

TEST_CASE("page mapper: a moving window under a cap shares physical pages without remapping",
          "[component][page_mapper]") {
  // Four pages of memory for a window of four pages that moves through sixteen: each address
  // gets a mapping once, then every physical page serves its addresses in turn.
  PagedParts p(with_limit(8 * MiB));
  Segment& seg = p.segment();
  auto cycle = [&] {
    for (std::size_t at = 0; at < 16; at += 4) {
      REQUIRE(p.mapper.use(seg, p.at(seg, at), 4 * p.page, Request{}) == Error::ok);
      check_used(p, seg, at, 4);
      p.mapper.unuse(seg, p.at(seg, at), 4 * p.page);
    }
  };
  cycle();
  CHECK(p.maps() == 16);
  CHECK(p.physical.count() == 4);
  for (int i = 0; i < 5; ++i) cycle();
  CHECK(p.maps() == 16);
  CHECK(p.reserved() == std::int64_t(8 * MiB));
  for (const PhysicalPage* q : p.physical.all()) CHECK(q->mappings.size() == 4);
}

namespace {

// A varlen cycle: each step uses a block at the start and one after a gap, their lengths
// varying from step to step; six pages in use at most, spanning up to eight. Returns the maps
// of each of `rounds` repetitions of the cycle.
std::vector<std::int64_t> varlen_rounds(PagedParts& p, int rounds) {
  struct Step {
    std::size_t first, gap, second;  // in pages
  };
  const Step steps[] = {{3, 0, 2}, {1, 2, 5}, {4, 1, 2}, {2, 3, 1}, {4, 0, 2}, {1, 4, 3}};
  Segment& seg = p.segment();
  std::vector<std::int64_t> maps;
  for (int r = 0; r < rounds; ++r) {
    const auto before = p.maps();
    for (const Step& s : steps) {
      const std::uintptr_t a = p.at(seg, 0);
      const std::uintptr_t b = p.at(seg, s.first + s.gap);
      REQUIRE(p.mapper.use(seg, a, s.first * p.page, Request{}) == Error::ok);
      REQUIRE(p.mapper.use(seg, b, s.second * p.page, Request{}) == Error::ok);
      p.mapper.unuse(seg, a, s.first * p.page);
      p.mapper.unuse(seg, b, s.second * p.page);
    }
    maps.push_back(p.maps() - before);
  }
  return maps;
}

}  // namespace

TEST_CASE("page mapper: a varlen cycle settles within a bound of remaps",
          "[component][page_mapper]") {
  // The ledger is told of the cycle's peak, six pages, which chronic growth is bounded by.
  SECTION("without a cap chronic conflicts grow memory until nothing is remapped") {
    Settings s;
    s.remap_growth = 0.5;  // up to nine pages
    PagedParts p(s);
    p.peak_allocated(6 * p.page);
    const auto maps = varlen_rounds(p, 8);
    CHECK(maps[0] == 11);  // eight addresses, three of them remapped
    for (std::size_t r = 2; r < maps.size(); ++r) CHECK(maps[r] == 0);
    // Eight addresses each with its own page: the growth stopped when the cycle did, inside
    // (1 + 0.5) x six.
    CHECK(p.reserved() == std::int64_t(8 * p.page));
  }
  SECTION("with no growth allowed the cycle keeps remapping") {
    Settings s;
    s.remap_growth = 0;
    PagedParts p(s);
    p.peak_allocated(6 * p.page);
    const auto maps = varlen_rounds(p, 8);
    for (std::size_t r = 2; r < maps.size(); ++r) CHECK(maps[r] > 0);
    CHECK(p.reserved() == std::int64_t(6 * p.page));
  }
  SECTION("with a cap at the peak in use a few pages are remapped every cycle") {
    PagedParts p(with_limit(12 * MiB));
    const auto maps = varlen_rounds(p, 8);
    for (std::size_t r = 2; r < maps.size(); ++r) CHECK(maps[r] <= 2);
    CHECK(p.reserved() == std::int64_t(12 * MiB));
  }
}

TEST_CASE("page mapper: unmapping an idle page waits for its stream",
          "[component][page_mapper]") {
  PagedParts p({}, manual_device());
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, seg.base, 3 * p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);  // a kernel still uses the block
  p.mapper.unuse(seg, seg.base, 2 * p.page);  // pages 0 and 1 idle
  REQUIRE(p.mapper.unmap(seg.pages[0]) == Error::ok);
  CHECK(p.ledger.stats().page_waits.current == 1);
  CHECK(p.fake.stream_idle(0, kSide));  // the host waited before the unmap
  CHECK(p.fake.calls(CallKind::event_synchronize) == 1);
  CHECK(seg.pages[0].phys == nullptr);
  CHECK(p.ledger.stats().page_unmaps.current == 1);
  // Page 1 became idle before that wait: unmapped without another one.
  p.fake.enqueue_work(0, kSide);
  REQUIRE(p.mapper.unmap(seg.pages[1]) == Error::ok);
  CHECK(p.ledger.stats().page_waits.current == 1);
  CHECK_FALSE(p.fake.stream_idle(0, kSide));
  // Page 2 becomes idle after it: it waits again.
  p.mapper.unuse(seg, p.at(seg, 2), p.page);
  REQUIRE(p.mapper.unmap(seg.pages[2]) == Error::ok);
  CHECK(p.ledger.stats().page_waits.current == 2);
  CHECK(p.fake.stream_idle(0, kSide));
  CHECK(p.mapper.unmapped(seg));
  CHECK(p.physical.device_idle() == 3);  // the physical pages stay, mapped nowhere
}

TEST_CASE("page mapper: a page that lost its memory is unmapped after a checkpoint, not "
          "after later work", "[component][page_mapper][stream_checkpoints]") {
  // Two pages of memory. Pages 0 and 2 are used and freed; page 1 then takes one of their
  // physical pages, which stays mapped where it was too: a checkpoint is recorded on the
  // stream. When the page that lost it is used again its mapping goes after the work queued
  // before the checkpoint, while the work queued after it stays queued.
  PagedParts p(with_limit(4 * MiB), manual_device());
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), p.page, Request{}) == Error::ok);
  REQUIRE(p.mapper.use(seg, p.at(seg, 2), p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);  // their last use
  EventHandle after_last_use = 0;
  REQUIRE(p.fake.event_create(0, &after_last_use) == Status::ok);
  REQUIRE(p.fake.event_record(0, after_last_use, kSide) == Status::ok);
  p.mapper.unuse(seg, p.at(seg, 0), p.page);
  p.mapper.unuse(seg, p.at(seg, 2), p.page);
  REQUIRE(p.mapper.use(seg, p.at(seg, 1), p.page, Request{}) == Error::ok);
  CHECK(p.mapper.checkpoints().count(kSide) == 1);
  Page& lost = seg.pages[0].phys == seg.pages[1].phys ? seg.pages[0] : seg.pages[2];
  REQUIRE(lost.phys == seg.pages[1].phys);
  p.fake.enqueue_work(0, kSide);  // page 1's kernel, queued after the checkpoint
  REQUIRE(p.mapper.use(seg, p.at(seg, static_cast<std::size_t>(&lost - seg.pages.data())),
                       p.page, Request{}) == Error::ok);
  CHECK(lost.phys != seg.pages[1].phys);
  CHECK(p.fake.event_query(after_last_use) == Status::ok);  // the old mapping's work is done
  CHECK_FALSE(p.fake.stream_idle(0, kSide));  // page 1's kernel was not waited for
  CHECK(p.ledger.stats().page_waits.current == 1);
  CHECK(p.fake.calls(CallKind::synchronize) == 0);
  // That checkpoint completed and went; the page whose memory the reused address took now
  // got one of its own.
  CHECK(p.mapper.checkpoints().count(kSide) == 1);
}

TEST_CASE("page mapper: an address that takes its memory back in place checkpoints the one it "
          "leaves", "[component][page_mapper][stream_checkpoints]") {
  // One physical page mapped at two addresses, used in turn without a map call: each time one
  // takes it back, the other, left mapped without users, gets a checkpoint for its unmap.
  PagedParts p(with_limit(4 * MiB), manual_device());
  Segment& seg = p.segment(kSide);
  auto use = [&](std::size_t i) {
    REQUIRE(p.mapper.use(seg, p.at(seg, i), p.page, Request{}) == Error::ok);
  };
  auto unuse = [&](std::size_t i) { p.mapper.unuse(seg, p.at(seg, i), p.page); };
  use(0);
  use(2);
  p.fake.enqueue_work(0, kSide);
  unuse(0);
  unuse(2);
  use(1);  // takes page 0's or page 2's memory (a checkpoint for the page it leaves)
  const std::size_t old = seg.pages[0].phys == seg.pages[1].phys ? 0 : 2;
  REQUIRE(seg.pages[old].phys == seg.pages[1].phys);
  p.fake.enqueue_work(0, kSide);  // page 1's kernel: queued after that first checkpoint
  EventHandle after_page1_kernel = 0;
  REQUIRE(p.fake.event_create(0, &after_page1_kernel) == Status::ok);
  REQUIRE(p.fake.event_record(0, after_page1_kernel, kSide) == Status::ok);
  unuse(1);
  const auto maps = p.maps();
  use(old);  // in place: no map call
  CHECK(p.maps() == maps);
  CHECK(p.mapper.checkpoints().count(kSide) == 2);  // page 1 got one
  p.fake.enqueue_work(0, kSide);  // page `old`'s kernel
  use(1);  // its memory serves `old` now: unmapped after page 1's checkpoint, not the first
  CHECK(p.ledger.stats().page_waits.current == 1);
  CHECK(p.fake.event_query(after_page1_kernel) == Status::ok);  // page 1's kernel is done
  CHECK_FALSE(p.fake.stream_idle(0, kSide));  // `old`'s is not waited for
  CHECK(seg.pages[1].phys != seg.pages[old].phys);
}

namespace {

// One page of memory: page 0 is used while a kernel runs, freed, and its memory taken by
// page 1, which records a checkpoint for page 0 on kSide. Returns the segment.
Segment& lose_memory_once(PagedParts& p) {
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(seg, p.at(seg, 0), p.page);
  REQUIRE(p.mapper.use(seg, p.at(seg, 1), p.page, Request{}) == Error::ok);  // takes page 0's
  REQUIRE(p.mapper.checkpoints().count(kSide) == 1);
  return seg;
}

}  // namespace

TEST_CASE("page mapper: a failed checkpoint wait falls back to the stream wait",
          "[component][page_mapper][stream_checkpoints]") {
  PagedParts p(with_limit(2 * MiB), manual_device());
  Segment& seg = lose_memory_once(p);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(seg, p.at(seg, 1), p.page);
  p.fake.fail_call(CallKind::event_synchronize, 1, Status::device_error);
  // Page 0 is unmapped (its memory serves page 1's address now) once a wait succeeded: the
  // checkpoint's failed, the stream's (an event recorded now) did.
  REQUIRE(p.mapper.unmap(seg.pages[0]) == Error::ok);
  CHECK(seg.pages[0].phys == nullptr);
  CHECK(p.fake.stream_idle(0, kSide));
  CHECK(p.fake.calls(CallKind::event_synchronize) == 2);
  CHECK(p.fake.calls(CallKind::synchronize) == 0);
}

TEST_CASE("page mapper: a destroyed stream's checkpoints are forgotten",
          "[component][page_mapper][stream_checkpoints]") {
  PagedParts p(with_limit(2 * MiB), manual_device());
  lose_memory_once(p);
  const std::size_t idle_events = p.sync.idle_events();
  p.mapper.forget_stream(kSide);
  CHECK(p.mapper.checkpoints().count(kSide) == 0);
  CHECK(p.sync.idle_events() == idle_events + 1);  // its event went back to the pool
}

TEST_CASE("page mapper: an unmap whose wait fails keeps the mapping",
          "[component][page_mapper]") {
  PagedParts p({}, manual_device());
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, seg.base, p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(seg, seg.base, p.page);
  p.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  p.fake.fail_call(CallKind::synchronize, 1, Status::device_error);
  CHECK(p.mapper.unmap(seg.pages[0]) == Error::device_error);
  CHECK(seg.pages[0].phys != nullptr);
  CHECK(p.fake.calls(CallKind::unmap) == 0);  // never unmapped under queued work
  CHECK(p.ledger.stats().mapped_bytes.current == std::int64_t(p.page));
}

TEST_CASE("page mapper: a page taken by another stream orders that stream after the last",
          "[component][page_mapper]") {
  PagedParts p(with_limit(2 * MiB), manual_device());
  Segment& main = p.segment(0);
  Segment& side = p.segment(kSide);
  REQUIRE(p.mapper.use(main, main.base, p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, 0);
  p.mapper.unuse(main, main.base, p.page);
  // The only physical page now serves the side stream's segment too (it stays mapped at
  // main's page): the side stream waits for stream 0 on the GPU before using it.
  REQUIRE(p.mapper.use(side, side.base, p.page, Request{}) == Error::ok);
  CHECK(side.pages[0].phys == main.pages[0].phys);
  CHECK(p.physical.count() == 1);
  CHECK(waits_between(p.fake, kSide, 0) == 1);
  CHECK_FALSE(p.fake.stream_idle(0, 0));  // GPU-side
}

TEST_CASE("page mapper: a failed use leaves users and reserved memory as before",
          "[component][page_mapper]") {
  struct Fault {
    CallKind kind;
    int nth;
  };
  const Fault faults[] = {
      {CallKind::create_physical, 1}, {CallKind::create_physical, 2},
      {CallKind::create_physical, 3}, {CallKind::map, 1},
      {CallKind::map, 2},             {CallKind::map, 3},
      {CallKind::set_access, 1},  // one call grants the run of mapped pages
  };
  for (const Fault& fault : faults) {
    for (const bool warm : {false, true}) {
      INFO(device::call_kind_name(fault.kind) << " #" << fault.nth << (warm ? " warm" : ""));
      PagedParts p;
      Segment& seg = p.segment();
      // A neighbour keeps page 0 in use; with `warm`, page 1 is idle and mapped already.
      REQUIRE(p.mapper.use(seg, seg.base, 4096, Request{}) == Error::ok);
      if (warm) {
        REQUIRE(p.mapper.use(seg, p.at(seg, 1), p.page, Request{}) == Error::ok);
        p.mapper.unuse(seg, p.at(seg, 1), p.page);
      }
      const auto reserved = p.reserved();
      const auto pages = p.physical.count();
      const auto used = p.fake.used_bytes(0);
      p.fake.fail_call(fault.kind, fault.nth, Status::device_error);
      // Pages 0 to 4: page 0 gains a user, pages 1 to 4 need physical pages.
      CHECK(p.mapper.use(seg, seg.base + 4096, 4 * p.page, Request{}) == Error::device_error);
      CHECK(seg.pages[0].users == 1);
      for (std::size_t i = 1; i < 5; ++i) CHECK(seg.pages[i].users == 0);
      CHECK(p.reserved() == reserved);
      CHECK(p.physical.count() == pages);
      CHECK(p.fake.used_bytes(0) == used);
      CHECK(p.physical.device_owned() == 1);
      if (warm) CHECK(seg.pages[1].phys != nullptr);  // its old page is still there
      // The failure leaves nothing behind that stops the same use from succeeding now.
      REQUIRE(p.mapper.use(seg, seg.base + 4096, 4 * p.page, Request{}) == Error::ok);
      check_used(p, seg, 1, 4);
      CHECK(p.reserved() == std::int64_t(5 * p.page));
    }
  }
}

TEST_CASE("page mapper: a use past the cap is out of memory and creates nothing",
          "[component][page_mapper]") {
  PagedParts p(with_limit(4 * MiB));
  Segment& seg = p.segment();
  CHECK(p.mapper.use(seg, seg.base, 3 * p.page, Request{}) == Error::out_of_memory);
  CHECK(p.reserved() == 0);
  CHECK(p.physical.count() == 0);
  CHECK(p.maps() == 2);  // the two that fit were mapped, then undone
  CHECK(p.ledger.stats().mapped_bytes.current == 0);
  CHECK(p.mapper.unmapped(seg));
}

TEST_CASE("page mapper: release_cached unmaps idle pages and returns them",
          "[component][page_mapper]") {
  PagedParts p({}, manual_device());
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, seg.base, 4 * p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(seg, p.at(seg, 1), 3 * p.page);
  p.fake.fail_call(CallKind::synchronize, 1, Status::device_error);
  CHECK_FALSE(p.mapper.release_cached());
  CHECK(p.physical.count() == 4);  // nothing changed
  CHECK(p.fake.calls(CallKind::unmap) == 0);
  REQUIRE(p.mapper.release_cached());
  CHECK(p.fake.stream_idle(0, kSide));
  CHECK(p.physical.count() == 1);
  CHECK(p.reserved() == std::int64_t(p.page));
  CHECK(seg.pages[0].phys != nullptr);  // in use: kept
  CHECK(seg.pages[1].phys == nullptr);
  CHECK(p.ledger.stats().page_waits.current == 0);  // the device was waited for instead
  p.mapper.unuse(seg, seg.base, p.page);
  REQUIRE(p.mapper.release_cached());
  CHECK(p.mapper.unmapped(seg));
  CHECK(p.reserved() == 0);
  const auto syncs = p.fake.calls(CallKind::synchronize);
  REQUIRE(p.mapper.release_cached());  // nothing idle or mapped: no synchronization
  CHECK(p.fake.calls(CallKind::synchronize) == syncs);
}

TEST_CASE("page mapper: a spilled page gets device memory for a request that does not spill",
          "[component][page_mapper]") {
  PagedParts p(with_limit(2 * MiB));
  Segment& seg = p.segment();
  Request spill;
  spill.tier = Tier::host_pages;
  REQUIRE(p.mapper.use(seg, seg.base, 2 * p.page, spill) == Error::ok);
  Location where = Location::device;
  REQUIRE(p.fake.location_of(p.at(seg, 1), &where));
  CHECK(where == Location::host);  // no device room for the second page
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(p.page));
  PhysicalPage* host_page = seg.pages[1].phys;
  p.mapper.unuse(seg, seg.base, 2 * p.page);
  CHECK(p.ledger.stats().host_active_bytes.current == 0);
  // Page 1 again, not spilling: the idle device page replaces the host page there.
  REQUIRE(p.mapper.use(seg, p.at(seg, 1), p.page, Request{}) == Error::ok);
  REQUIRE(p.fake.location_of(p.at(seg, 1), &where));
  CHECK(where == Location::device);
  CHECK(seg.pages[1].phys == seg.pages[0].phys);
  CHECK(host_page->owner == nullptr);
  CHECK(host_page->mappings.empty());
  CHECK(p.physical.host_idle_list().head == host_page);  // kept for the next spill
  // Page 0 lost its physical page to page 1; without device room only a spill serves it.
  CHECK(p.mapper.use(seg, seg.base, p.page, Request{}) == Error::out_of_memory);
  CHECK(seg.pages[0].users == 0);
  REQUIRE(p.mapper.use(seg, seg.base, p.page, spill) == Error::ok);
  CHECK(seg.pages[0].phys == host_page);
  CHECK(p.physical.host_count() == 1);
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(p.page));
}

TEST_CASE("page mapper: a wait for the whole device settles every pool",
          "[component][page_mapper]") {
  PagedParts p({}, manual_device());
  Segment& main = p.segment(0);
  Segment& side = p.segment(kSide);
  REQUIRE(p.mapper.use(main, main.base, p.page, Request{}) == Error::ok);
  REQUIRE(p.mapper.use(side, side.base, p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, 0);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(main, main.base, p.page);
  p.mapper.unuse(side, side.base, p.page);
  p.fake.fail_call(CallKind::event_synchronize, 1, Status::device_error);
  REQUIRE(p.mapper.unmap(main.pages[0]) == Error::ok);
  CHECK(p.fake.calls(CallKind::synchronize) == 1);  // the fallback
  CHECK(p.fake.stream_idle(0, kSide));
  REQUIRE(p.mapper.unmap(side.pages[0]) == Error::ok);
  CHECK(p.ledger.stats().page_waits.current == 1);  // the side pool was settled by it
  CHECK(p.fake.calls(CallKind::event_record) == 1);
}

TEST_CASE("page mapper: later pools get smaller address ranges", "[component][page_mapper]") {
  PagedParts p;
  Segment& main = p.segment(0);
  Segment& side = p.segment(kSide);
  Segment& big = p.segment(kSide, 32 * MiB);
  CHECK(main.size == 64 * MiB);  // the device's size
  CHECK(side.size == 4 * MiB);   // a sixteenth of it
  CHECK(big.size == 32 * MiB);   // or the request's size
  CHECK(main.pool == p.pools.find(0));
  CHECK(side.pool == p.pools.find(kSide));
}

// Parking (parked_pages.h): a freed block's pages become one run, not a walk over its pages,
// and a block over the same range takes them back the same way; a run serves other addresses
// a page at a time, oldest first, as the idle list would.
TEST_CASE("page mapper: a large block's pages are parked as one run and taken back whole",
          "[component][page_mapper][parked]") {
  PagedParts p;
  Segment& seg = p.segment();
  const ParkedPages& parked = p.physical.parked();
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), 16 * p.page, Request{}) == Error::ok);
  CHECK(p.maps() == 16);
  p.mapper.unuse(seg, p.at(seg, 0), 16 * p.page);
  CHECK(parked.count() == 16);
  CHECK(seg.parked.size() == 1);
  CHECK(p.physical.device_idle() == 16);
  CHECK(p.physical.device_idle_list().count == 0);  // no page entered the idle list
  CHECK(seg.pages[7].users == 1);                   // the run is its pages' one user
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), 16 * p.page, Request{}) == Error::ok);
  CHECK(parked.empty());
  CHECK(seg.parked.empty());
  CHECK(p.maps() == 16);
  check_used(p, seg, 0, 16);
  // A block over the middle of a run splits it, in address and in epoch order.
  p.mapper.unuse(seg, p.at(seg, 0), 16 * p.page);
  REQUIRE(p.mapper.use(seg, p.at(seg, 4), 4 * p.page, Request{}) == Error::ok);
  CHECK(parked.count() == 12);
  REQUIRE(seg.parked.size() == 2);
  CHECK(parked.oldest()->first == 0);
  CHECK(parked.oldest()->count == 4);
  CHECK(parked.newest()->first == 8);
  CHECK(p.maps() == 16);
  check_used(p, seg, 4, 4);
  // Elsewhere, new pages take the oldest parked pages first (pages 0..3), mapping them there.
  REQUIRE(p.mapper.use(seg, p.at(seg, 18), 4 * p.page, Request{}) == Error::ok);
  CHECK(p.maps() == 20);
  CHECK(p.reserved() == std::int64_t(16 * p.page));
  CHECK(seg.parked.size() == 1);
  CHECK(seg.pages[0].users == 0);
  CHECK(seg.pages[0].phys->owner == &seg.pages[18]);
  // Parked in turn, those pages give their physical pages back to pages 0..3 in place: no
  // driver call, and the run of 18..21 is gone.
  p.mapper.unuse(seg, p.at(seg, 18), 4 * p.page);
  CHECK(parked.count() == 12);
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), 4 * p.page, Request{}) == Error::ok);
  CHECK(p.maps() == 20);
  check_used(p, seg, 0, 4);
  CHECK(seg.pages[18].users == 0);
  CHECK(parked.count() == 8);
  CHECK(p.physical.device_idle_list().count == 0);
  // Before a pass over every page, all parked pages join the idle list in epoch order.
  p.mapper.unpark_all();
  CHECK(parked.empty());
  CHECK(seg.parked.empty());
  CHECK(p.physical.device_idle_list().count == 8);
  std::uint64_t last = 0;
  for (const PhysicalPage* q = p.physical.device_idle_list().head; q != nullptr; q = q->idle_next) {
    CHECK(q->idle_since > last);
    CHECK(q->owner == nullptr);
    last = q->idle_since;
  }
  CHECK(seg.pages[8].users == 0);
}

TEST_CASE("page mapper: a failed use gives parked pages back as idle pages",
          "[component][page_mapper][parked]") {
  PagedParts p;
  Segment& seg = p.segment();
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), 8 * p.page, Request{}) == Error::ok);
  p.mapper.unuse(seg, p.at(seg, 0), 8 * p.page);
  // Pages 0..7 are parked; 8..11 need new memory, and the driver refuses the second map.
  p.fake.fail_call(CallKind::map, 2, device::Status::out_of_memory);
  p.settings.page_slack = 1e9;  // prefer new memory over idle pages
  CHECK(p.mapper.use(seg, p.at(seg, 0), 12 * p.page, Request{}) != Error::ok);
  CHECK(p.physical.parked().empty());
  for (std::size_t i = 0; i < 12; ++i) CHECK(seg.pages[i].users == 0);
  CHECK(p.physical.device_idle() == 8);
  CHECK(p.reserved() == std::int64_t(8 * p.page));  // the new page was returned
}

// cuMemSetAccess costs about 28 us per call on an H200 whether it covers one page or a run
// (benchmarks.md, page-move-bench): use() grants each run of pages it mapped in one call.
TEST_CASE("page mapper: pages a use maps are granted access one run at a time",
          "[component][page_mapper]") {
  PagedParts p(with_limit(0, 1.0));  // new pages take new memory: page 3 keeps its own
  Segment& seg = p.segment();
  auto grants = [&] { return p.fake.calls(CallKind::set_access); };
  // Page 3 keeps an idle, accessible page of its own: it splits the run.
  REQUIRE(p.mapper.use(seg, p.at(seg, 3), p.page, Request{}) == Error::ok);
  p.mapper.unuse(seg, p.at(seg, 3), p.page);
  const auto before = grants();
  REQUIRE(p.mapper.use(seg, p.at(seg, 0), 8 * p.page, Request{}) == Error::ok);
  CHECK(grants() == before + 2);  // pages 0-2 and 4-7
  check_used(p, seg, 0, 8);
  std::memset(reinterpret_cast<void*>(p.at(seg, 0)), 0x3c, 8 * p.page);  // really accessible
  CHECK(p.maps() == 8);
}

// Parked pages keep the ordering rules of idle pages: another stream that takes one waits on
// the GPU for the stream that used it, and unmapping one waits for the work queued before
// its block was freed.
TEST_CASE("page mapper: parked pages are reused by another stream only after the last",
          "[component][page_mapper][parked]") {
  PagedParts p(with_limit(8 * MiB), manual_device());
  Segment& main = p.segment(0);
  Segment& side = p.segment(kSide, 4 * p.page);
  REQUIRE(side.pages.size() >= 4);
  REQUIRE(p.mapper.use(main, main.base, 4 * p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, 0);  // a kernel still uses the block
  p.mapper.unuse(main, main.base, 4 * p.page);
  REQUIRE(p.physical.parked().count() == 4);
  REQUIRE(p.mapper.use(side, side.base, 4 * p.page, Request{}) == Error::ok);
  CHECK(p.physical.count() == 4);  // the cap: the side stream took main's parked pages
  CHECK(p.physical.parked().empty());
  CHECK(side.pages[0].phys == main.pages[0].phys);
  CHECK(waits_between(p.fake, kSide, 0) >= 1);
  CHECK_FALSE(p.fake.stream_idle(0, 0));  // ordered on the GPU, not by a host wait
}

TEST_CASE("page mapper: unmapping an unparked page waits for its stream",
          "[component][page_mapper][parked]") {
  PagedParts p({}, manual_device());
  Segment& seg = p.segment(kSide);
  REQUIRE(p.mapper.use(seg, seg.base, 4 * p.page, Request{}) == Error::ok);
  p.fake.enqueue_work(0, kSide);
  p.mapper.unuse(seg, seg.base, 4 * p.page);
  REQUIRE(p.physical.parked().count() == 4);
  p.mapper.unpark_all();
  REQUIRE(p.mapper.unmap(seg.pages[2]) == Error::ok);
  CHECK(p.ledger.stats().page_waits.current == 1);
  CHECK(p.fake.stream_idle(0, kSide));  // the host waited before the unmap
}
