// Staging (staging slots, home mappings, strays) and Migrator (moving the pages of a live
// allocation between device and host at the same address), directly on a FakeDevice.
#include <cstring>

#include "component_fixture.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kCopy = 0xc0;

// A live allocation of `pages` pages at the start of a new segment, filled with a pattern.
struct Live {
  Live(PagedParts& p, std::size_t pages, StreamHandle stream = 0) : parts(p) {
    Segment& seg = p.segment(stream);
    span = AllocationSpan{&seg, seg.base, pages * p.page};
    REQUIRE(p.mapper.use(seg, span.addr, span.size, Request{}) == Error::ok);
    for (std::size_t i = 0; i < span.size; i += 4096) bytes()[i] = static_cast<char>(i / 4096 + 1);
  }
  char* bytes() const { return reinterpret_cast<char*>(span.addr); }
  bool intact() const {
    for (std::size_t i = 0; i < span.size; i += 4096) {
      if (bytes()[i] != static_cast<char>(i / 4096 + 1)) return false;
    }
    return true;
  }
  // How many of its pages are backed by memory at `where`, asked of the fake device.
  std::size_t pages_at(Location where) const {
    std::size_t n = 0;
    for (std::uintptr_t va = span.addr; va < span.addr + span.size; va += parts.page) {
      Location at = Location::device;
      REQUIRE(parts.fake.location_of(va, &at));
      n += at == where ? 1 : 0;
    }
    return n;
  }
  PagedParts& parts;
  AllocationSpan span;
};

PhysicalPage new_page(FakeDevice& fake, std::size_t page) {
  PhysicalPage phys;
  REQUIRE(fake.create_physical(0, page, Location::device, &phys.handle) == Status::ok);
  return phys;
}

}  // namespace

TEST_CASE("migrator: a move to host and back keeps the bytes and the address",
          "[component][migrator]") {
  PagedParts p;
  Live live(p, 3);
  REQUIRE(live.pages_at(Location::device) == 3);
  REQUIRE(p.migrator.move(live.span, Location::host, 0) == Error::ok);
  CHECK(live.pages_at(Location::host) == 3);
  CHECK(live.intact());
  CHECK(p.physical.host_count() == 3);
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(3 * p.page));
  CHECK(p.ledger.stats().page_offloads.current == 3);
  CHECK(p.physical.device_idle() == 3);  // the old device pages, reusable
  std::size_t device_bytes = 0, host_bytes = 0;
  p.migrator.residency(live.span, &device_bytes, &host_bytes);
  CHECK(device_bytes == 0);
  CHECK(host_bytes == 3 * p.page);
  live.bytes()[5] = 'h';  // written while on the host
  REQUIRE(p.migrator.move(live.span, Location::device, 0) == Error::ok);
  CHECK(live.pages_at(Location::device) == 3);
  CHECK(live.bytes()[5] == 'h');
  live.bytes()[5] = static_cast<char>(0);
  CHECK(live.bytes()[0] == 1);
  CHECK(p.ledger.stats().host_active_bytes.current == 0);
  CHECK(p.ledger.stats().page_prefetches.current == 3);
  CHECK(p.fake.bad_copies() == 0);
  CHECK(p.reserved() == std::int64_t(3 * p.page));  // the device pages were reused
  CHECK_FALSE(p.staging.has_strays());
  // Already there: nothing to do.
  const auto copies = p.fake.calls(CallKind::copy);
  REQUIRE(p.migrator.move(live.span, Location::device, 0) == Error::ok);
  CHECK(p.fake.calls(CallKind::copy) == copies);
}

TEST_CASE("migrator: a move waits for the work queued before it", "[component][migrator]") {
  PagedParts p({}, manual_device());
  Live live(p, 2);
  p.fake.enqueue_work(0, 0);  // a kernel still using the allocation
  REQUIRE(p.migrator.move(live.span, Location::host, kCopy) == Error::ok);
  CHECK(p.fake.stream_idle(0, 0));      // the copy stream waited for the owner's stream
  CHECK(p.fake.stream_idle(0, kCopy));  // and the host for the copies
  CHECK(waits_between(p.fake, kCopy, 0) == 1);
  CHECK(live.pages_at(Location::host) == 2);
  CHECK(live.intact());
  CHECK(p.fake.bad_copies() == 0);
}

TEST_CASE("migrator: a move needs paged memory and room at the destination",
          "[component][migrator]") {
  Settings s;
  s.host_limit = 2 * MiB;
  PagedParts p(s);
  Live live(p, 2);
  CHECK(p.migrator.move(live.span, Location::host, 0) == Error::out_of_memory);
  CHECK(live.pages_at(Location::device) == 2);  // nothing moved
  CHECK(live.intact());
  CHECK(p.physical.host_idle_list().count == 1);  // the page it took is idle again
  Segment plain;
  plain.kind = Segment::Kind::plain;
  CHECK(p.migrator.move(AllocationSpan{&plain, 0x1000, 4096}, Location::host, 0) ==
        Error::not_supported);
}

TEST_CASE("migrator: a page whose new mapping fails keeps its old backing",
          "[component][migrator]") {
  PagedParts p;
  Live live(p, 2);
  // The calls of a move to host: a host page is created and mapped at its home (map #1 and
  // #2 for two pages), then each page is unmapped and mapped to its new page (#3, #4).
  p.fake.fail_call(CallKind::map, 4, Status::device_error);
  CHECK(p.migrator.move(live.span, Location::host, 0) == Error::device_error);
  CHECK(live.pages_at(Location::host) == 1);  // the first page moved
  CHECK(live.pages_at(Location::device) == 1);  // the second is mapped back
  CHECK(live.intact());
  CHECK(p.ledger.stats().page_offloads.current == 1);
  const Segment& seg = *live.span.segment;
  CHECK(seg.pages[0].phys->host);
  CHECK_FALSE(seg.pages[1].phys->host);
  for (const Page& page : seg.pages) {
    if (page.phys == nullptr) break;
    CHECK(page.users == 1);
    CHECK(page.accessible);
    CHECK(page.phys->owner == &page);
  }
  // A second try moves the rest.
  REQUIRE(p.migrator.move(live.span, Location::host, 0) == Error::ok);
  CHECK(live.pages_at(Location::host) == 2);
  CHECK(live.intact());
}

TEST_CASE("migrator: promote brings host pages back while the budget has room",
          "[component][migrator]") {
  PagedParts p;
  Live a(p, 2);
  Live b(p, 1, kCopy);
  REQUIRE(p.migrator.move(a.span, Location::host, 0) == Error::ok);
  REQUIRE(p.migrator.move(b.span, Location::host, kCopy) == Error::ok);
  REQUIRE(p.ledger.stats().host_active_bytes.current == std::int64_t(3 * p.page));
  REQUIRE(p.migrator.promote() == Error::ok);
  CHECK(a.pages_at(Location::device) == 2);
  CHECK(b.pages_at(Location::device) == 1);
  CHECK(p.ledger.stats().host_active_bytes.current == 0);
  CHECK(p.ledger.stats().page_prefetches.current == 3);
  CHECK(a.intact());
  CHECK(b.intact());
  CHECK(p.reserved() == std::int64_t(6 * MiB));  // the pages they left, reused
}

TEST_CASE("migrator: promote without device room keeps pages on the host",
          "[component][migrator]") {
  Settings s;
  s.limit = 4 * MiB;
  PagedParts p(s);
  Live a(p, 2);
  REQUIRE(p.migrator.move(a.span, Location::host, 0) == Error::ok);
  Live c(p, 2);  // takes the device pages a left
  REQUIRE(p.physical.device_idle() == 0);
  REQUIRE(p.migrator.promote() == Error::ok);  // ok: the stats say what stayed
  CHECK(a.pages_at(Location::host) == 2);
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(4 * MiB));
  CHECK(p.physical.device_idle() == 0);
  CHECK(a.intact());
  CHECK(c.intact());
}

TEST_CASE("staging: a failed unmap retires the range and release_strays returns it",
          "[component][staging]") {
  FakeDevice fake(small_device());
  const std::size_t page = fake.granularity(0);
  Staging staging(fake, 0, page);
  PhysicalPage a = new_page(fake, page);
  PhysicalPage b = new_page(fake, page);
  std::size_t staged = 0;
  REQUIRE(staging.stage({&a, &b}, &staged) == Error::ok);
  CHECK(staged == 2);
  const std::uintptr_t first_range = staging.slot(0);
  CHECK(staging.slot(1) == first_range + page);
  std::memset(reinterpret_cast<void*>(staging.slot(1)), 1, page);  // accessible
  CHECK(fake.calls(CallKind::reserve) == 1);
  fake.fail_call(CallKind::unmap, 2, Status::device_error);  // slot 1 stays mapped
  staging.unstage(staged);
  CHECK(staging.has_strays());
  Location where = Location::host;
  CHECK_FALSE(fake.location_of(first_range, &where));
  CHECK(fake.location_of(first_range + page, &where));
  // The next staging never maps over the stray: it takes a new range.
  REQUIRE(staging.stage({&a}, &staged) == Error::ok);
  CHECK(fake.calls(CallKind::reserve) == 2);
  CHECK(staging.slot(0) != first_range);
  staging.unstage(staged);
  const auto unreserves = fake.calls(CallKind::unreserve);
  fake.fail_call(CallKind::unmap, 1, Status::device_error);
  staging.release_strays();  // fails again: kept, and the range with it
  CHECK(staging.has_strays());
  CHECK(fake.calls(CallKind::unreserve) == unreserves);
  staging.release_strays();
  CHECK_FALSE(staging.has_strays());
  CHECK_FALSE(fake.location_of(first_range + page, &where));
  CHECK(fake.calls(CallKind::unreserve) == unreserves + 1);  // the retired range
  staging.drop();
  CHECK(fake.calls(CallKind::unreserve) == unreserves + 2);  // the current one
  REQUIRE(fake.release_physical(a.handle) == Status::ok);
  REQUIRE(fake.release_physical(b.handle) == Status::ok);
  CHECK(fake.used_bytes(0) == 0);
}

TEST_CASE("staging: a failed stage reports the slots it mapped", "[component][staging]") {
  FakeDevice fake(small_device());
  const std::size_t page = fake.granularity(0);
  Staging staging(fake, 0, page);
  PhysicalPage a = new_page(fake, page);
  PhysicalPage b = new_page(fake, page);
  std::size_t staged = 0;
  fake.fail_call(CallKind::map, 2, Status::device_error);
  CHECK(staging.stage({&a, &b}, &staged) == Error::device_error);
  CHECK(staged == 1);
  staging.unstage(staged);
  CHECK_FALSE(staging.has_strays());
  // Access granted page by page when the range grant fails.
  fake.fail_call(CallKind::set_access, 1, Status::device_error);
  REQUIRE(staging.stage({&a, &b}, &staged) == Error::ok);
  CHECK(fake.calls(CallKind::set_access) == 3);
  std::memset(reinterpret_cast<void*>(staging.slot(0)), 1, 2 * page);
  staging.unstage(staged);
  staging.drop();
  REQUIRE(fake.release_physical(a.handle) == Status::ok);
  REQUIRE(fake.release_physical(b.handle) == Status::ok);
  CHECK(fake.used_bytes(0) == 0);
}

TEST_CASE("staging: home mappings are reused, and a stuck one becomes a stray",
          "[component][staging]") {
  FakeDevice fake(small_device());
  const std::size_t page = fake.granularity(0);
  Staging staging(fake, 0, page);
  PhysicalPage a = new_page(fake, page);
  staging.map_home(a);
  REQUIRE(a.home != 0);
  std::memset(reinterpret_cast<void*>(a.home), 1, page);
  const std::uintptr_t home = a.home;
  staging.unmap_home(a);
  CHECK(a.home == 0);
  staging.map_home(a);
  CHECK(a.home == home);  // the freed home is taken again
  CHECK(fake.calls(CallKind::reserve) == 1);
  fake.fail_call(CallKind::unmap, 1, Status::device_error);
  staging.unmap_home(a);
  CHECK(a.home == 0);
  CHECK(staging.has_strays());
  staging.map_home(a);
  CHECK(a.home != home);  // never mapped over the stuck one
  staging.release_strays();
  CHECK_FALSE(staging.has_strays());
  staging.unmap_home(a);
  staging.drop();
  REQUIRE(fake.release_physical(a.handle) == Status::ok);
  CHECK(fake.used_bytes(0) == 0);
}

TEST_CASE("staging and migrator: a stuck staging slot after a move is retried by release_cached",
          "[component][staging][migrator]") {
  PagedParts p;
  Live live(p, 2);
  REQUIRE(p.migrator.move(live.span, Location::host, 0) == Error::ok);
  // Back to the device: the old device pages are mapped nowhere, so they are written through
  // staging slots; the unmap of the first slot fails.
  REQUIRE(p.physical.device_idle() == 2);
  const auto unmaps = p.fake.calls(CallKind::unmap);
  p.fake.fail_call(CallKind::unmap, 3, Status::device_error);  // after the two page unmaps
  REQUIRE(p.migrator.move(live.span, Location::device, 0) == Error::ok);
  CHECK(p.fake.calls(CallKind::unmap) == unmaps + 4);
  CHECK(live.pages_at(Location::device) == 2);
  CHECK(live.intact());
  CHECK(p.staging.has_strays());
  REQUIRE(p.mapper.release_cached());
  CHECK_FALSE(p.staging.has_strays());
  CHECK(live.intact());
}

TEST_CASE("migrator: promote moves what fits when not every host page does",
          "[component][migrator]") {
  // Room for one of the two host pages of one allocation: "while the budget has room" moves
  // that one.
  Settings s;
  s.limit = 6 * MiB;
  PagedParts p(s);
  Live a(p, 2);
  REQUIRE(p.migrator.move(a.span, Location::host, 0) == Error::ok);
  Live c(p, 2);  // takes the two device pages a left
  REQUIRE(p.physical.device_idle() == 0);
  REQUIRE(p.reserved() == std::int64_t(4 * MiB));  // room for one more page
  REQUIRE(p.migrator.promote() == Error::ok);
  CHECK(a.pages_at(Location::device) == 1);
  CHECK(p.ledger.stats().host_active_bytes.current == std::int64_t(p.page));
  CHECK(a.intact());
}
