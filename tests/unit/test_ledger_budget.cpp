// Ledger (stats and trace from domain events) and Budget (reserve cap, host limit), directly.
#include <limits>

#include "component_fixture.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kStream = 0x51;

// The invariant the ledger keeps by construction.
void check_cached(const Stats& s) {
  CHECK(s.cached_bytes.current ==
        s.reserved_bytes.current + s.host_reserved_bytes.current - s.active_bytes.current);
}

std::vector<TraceAction> actions(const Ledger& ledger) {
  std::vector<TraceAction> out;
  for (const TraceEvent& e : ledger.trace().events()) out.push_back(e.action);
  return out;
}

}  // namespace

TEST_CASE("ledger: reserved and released move device or host gauges", "[component][ledger]") {
  Ledger ledger(0);
  ledger.reserved(Location::device, 0x1000, 8 * MiB, kStream);
  ledger.reserved(Location::host, 0, 2 * MiB, 0);
  const Stats& s = ledger.stats();
  CHECK(s.reserved_bytes.current == std::int64_t(8 * MiB));
  CHECK(s.reserved_count.current == 1);
  CHECK(s.device_allocs.current == 1);
  CHECK(s.host_reserved_bytes.current == std::int64_t(2 * MiB));
  CHECK(s.cached_bytes.current == std::int64_t(10 * MiB));
  check_cached(s);
  ledger.released(Location::host, 0, 2 * MiB, 0);
  ledger.released(Location::device, 0x1000, 8 * MiB, kStream);
  CHECK(s.reserved_bytes.current == 0);
  CHECK(s.reserved_count.current == 0);
  CHECK(s.device_frees.current == 1);
  CHECK(s.host_reserved_bytes.current == 0);
  CHECK(s.cached_bytes.current == 0);
  CHECK(s.reserved_bytes.peak == std::int64_t(8 * MiB));
  CHECK(s.host_reserved_bytes.peak == std::int64_t(2 * MiB));
  CHECK(ledger.trace().events().empty());  // tracing off: nothing recorded
}

TEST_CASE("ledger: an allocation's life keeps cached = reserved + host - active",
          "[component][ledger]") {
  Ledger ledger(0);
  const Stats& s = ledger.stats();
  ledger.reserved(Location::device, 0x1000, 4 * MiB, 0);
  ledger.reserved(Location::host, 0, 2 * MiB, 0);
  ledger.handed_out(0x1000, 1 * MiB, 1000, 0);
  CHECK(s.allocated_bytes.current == std::int64_t(1 * MiB));
  CHECK(s.allocated_count.current == 1);
  CHECK(s.requested_bytes.current == 1000);
  CHECK(s.active_bytes.current == std::int64_t(1 * MiB));
  CHECK(s.active_count.current == 1);
  CHECK(s.cached_bytes.current == std::int64_t(5 * MiB));
  check_cached(s);
  ledger.free_requested(0x1000, 1 * MiB, 1000, 0);
  // Freed but not yet reusable: still active, no longer allocated.
  CHECK(s.allocated_bytes.current == 0);
  CHECK(s.allocated_count.current == 0);
  CHECK(s.requested_bytes.current == 0);
  CHECK(s.active_bytes.current == std::int64_t(1 * MiB));
  CHECK(s.cached_bytes.current == std::int64_t(5 * MiB));
  check_cached(s);
  ledger.free_completed(0x1000, 1 * MiB, 0);
  CHECK(s.active_bytes.current == 0);
  CHECK(s.active_count.current == 0);
  CHECK(s.cached_bytes.current == std::int64_t(6 * MiB));
  check_cached(s);
  CHECK(s.allocated_bytes.total == std::int64_t(1 * MiB));
  CHECK(s.requested_bytes.peak == 1000);
}

TEST_CASE("ledger: pages, host use, slabs and event counters", "[component][ledger]") {
  Ledger ledger(0);
  const Stats& s = ledger.stats();
  ledger.page_mapped(0x200000, 2 * MiB, 0);
  ledger.page_mapped(0x400000, 2 * MiB, 0);
  ledger.page_unmapped(0x200000, 2 * MiB, 0);
  CHECK(s.mapped_bytes.current == std::int64_t(2 * MiB));
  CHECK(s.mapped_bytes.peak == std::int64_t(4 * MiB));
  CHECK(s.page_maps.current == 2);
  CHECK(s.page_unmaps.current == 1);
  ledger.host_in_use(3 * MiB);
  ledger.host_unused(1 * MiB);
  CHECK(s.host_active_bytes.current == std::int64_t(2 * MiB));
  ledger.slab_created(2 * MiB);
  ledger.slab_created(2 * MiB);
  ledger.slab_released(2 * MiB);
  CHECK(s.slab_bytes.current == std::int64_t(2 * MiB));
  CHECK(s.slab_count.current == 1);
  ledger.free_block_added();
  ledger.free_block_added();
  ledger.free_block_removed();
  CHECK(s.cached_count.current == 1);
  ledger.out_of_memory(123, 0);
  ledger.cache_hit();
  ledger.retry();
  ledger.stream_steal();
  ledger.pending_free();
  ledger.page_wait();
  ledger.spill();
  ledger.pages_moved(Location::host, 3);
  ledger.pages_moved(Location::device, 2);
  for (const Stat* counter : {&s.ooms, &s.cache_hits, &s.alloc_retries, &s.stream_steals,
                              &s.pending_frees, &s.page_waits, &s.spills}) {
    CHECK(counter->current == 1);
  }
  CHECK(s.page_offloads.current == 3);
  CHECK(s.page_prefetches.current == 2);
}

TEST_CASE("ledger: tracing records each domain event with its action", "[component][ledger]") {
  Ledger ledger(64);
  REQUIRE(ledger.tracing());
  ledger.reserved(Location::device, 0x1000, 4 * MiB, kStream);
  ledger.reserved(Location::device, 0, 2 * MiB, 0);  // a physical page: not traced
  ledger.page_mapped(0x200000, 2 * MiB, kStream);
  ledger.handed_out(0x1000, 512, 100, kStream);
  ledger.free_requested(0x1000, 512, 100, kStream);
  ledger.free_completed(0x1000, 512, kStream);
  ledger.page_unmapped(0x200000, 2 * MiB, kStream);
  ledger.out_of_memory(8 * MiB, kStream);
  ledger.released(Location::device, 0x1000, 4 * MiB, kStream);
  ledger.released(Location::device, 0, 2 * MiB, 0);  // not traced
  ledger.cache_hit();                                 // counters are not traced
  using A = TraceAction;
  CHECK(actions(ledger) == std::vector<TraceAction>{A::segment_alloc, A::segment_map, A::alloc,
                                                    A::free_requested, A::free_completed,
                                                    A::segment_unmap, A::oom, A::segment_free});
  const auto events = ledger.trace().events();
  CHECK(events[0].addr == 0x1000);
  CHECK(events[0].size == 4 * MiB);
  CHECK(events[0].stream == kStream);
  CHECK(events[2].size == 512);  // the rounded size
  CHECK(events[6].addr == 0);
  CHECK(events[6].size == 8 * MiB);
}

TEST_CASE("ledger: forget_everything zeroes gauges and keeps peaks and totals",
          "[component][ledger]") {
  Ledger ledger(0);
  const Stats& s = ledger.stats();
  ledger.reserved(Location::device, 0x1000, 4 * MiB, 0);
  ledger.reserved(Location::device, 0x9000, 2 * MiB, 0);
  ledger.reserved(Location::host, 0, 2 * MiB, 0);
  ledger.handed_out(0x1000, 1 * MiB, 1 * MiB, 0);
  ledger.page_mapped(0x200000, 2 * MiB, 0);
  ledger.cache_hit();
  ledger.forget_everything();
  for (const Stat* gauge : {&s.allocated_bytes, &s.allocated_count, &s.requested_bytes,
                            &s.active_bytes, &s.active_count, &s.reserved_bytes,
                            &s.reserved_count, &s.cached_bytes, &s.mapped_bytes,
                            &s.host_reserved_bytes}) {
    CHECK(gauge->current == 0);
  }
  CHECK(s.reserved_bytes.peak == std::int64_t(6 * MiB));
  CHECK(s.reserved_bytes.total == std::int64_t(6 * MiB));
  CHECK(s.allocated_bytes.peak == std::int64_t(1 * MiB));
  CHECK(s.device_frees.current == 2);  // the two segments it held count as returned
  CHECK(s.device_allocs.current == 2);
  CHECK(s.cache_hits.current == 1);
  check_cached(s);
  ledger.reset_peaks();
  CHECK(s.reserved_bytes.peak == 0);
  CHECK(s.cache_hits.peak == 1);  // a counter's peak is its current value
}

TEST_CASE("budget: the cap is the smaller of limit and fraction", "[component][budget]") {
  Settings s;
  const Budget budget(s, 1000 * MiB);
  CHECK(budget.reserve_cap() == 0);
  CHECK(budget.device_budget() == 1000 * MiB);
  s.limit = 300 * MiB;
  CHECK(budget.reserve_cap() == 300 * MiB);
  s.fraction = 0.5;
  CHECK(budget.reserve_cap() == 300 * MiB);  // the limit is smaller
  s.fraction = 0.25;
  CHECK(budget.reserve_cap() == 250 * MiB);  // the fraction is smaller
  s.limit = 0;
  CHECK(budget.reserve_cap() == 250 * MiB);
  CHECK(budget.device_budget() == 250 * MiB);
  s.fraction = 1.0;
  CHECK(budget.reserve_cap() == 0);
}

TEST_CASE("budget: a fraction that rounds to 0 bytes still caps", "[component][budget]") {
  Settings s;
  s.fraction = 1e-12;
  const Budget budget(s, 1000 * MiB);
  CHECK(budget.reserve_cap() == 1);
  CHECK_FALSE(budget.device_allows(0, 2 * MiB));
  CHECK(budget.device_allows(0, 1));
  CHECK_FALSE(budget.device_allows(1, 1));
  s.fraction = 0.0;
  CHECK(budget.reserve_cap() == 1);  // fraction 0 asks for a cap: nothing fits
  s.limit = 4096;
  CHECK(budget.reserve_cap() == 1);
}

TEST_CASE("budget: device_allows and host_allows at the boundary and near SIZE_MAX",
          "[component][budget]") {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  Settings s;
  s.limit = 10 * MiB;
  s.host_limit = 6 * MiB;
  const Budget budget(s, 64 * MiB);
  CHECK(budget.device_allows(8 * MiB, 2 * MiB));
  CHECK_FALSE(budget.device_allows(8 * MiB, 2 * MiB + 1));
  CHECK_FALSE(budget.device_allows(8 * MiB + 1, 2 * MiB));
  CHECK(budget.device_allows(0, 10 * MiB));
  CHECK_FALSE(budget.device_allows(0, 10 * MiB + 1));
  CHECK_FALSE(budget.device_allows(2 * MiB, kMax));      // more + reserved would wrap
  CHECK_FALSE(budget.device_allows(kMax, 2 * MiB));
  CHECK_FALSE(budget.device_allows(kMax - 1, 2));
  CHECK(budget.host_allows(4 * MiB, 2 * MiB));
  CHECK_FALSE(budget.host_allows(4 * MiB, 2 * MiB + 1));
  CHECK_FALSE(budget.host_allows(1, kMax));
  CHECK_FALSE(budget.host_allows(kMax, 1));
  s.limit = kMax;
  s.host_limit = kMax;
  CHECK(budget.device_allows(kMax - 4, 4));
  CHECK_FALSE(budget.device_allows(kMax - 4, 5));
  CHECK(budget.host_allows(kMax - 1, 1));
  CHECK_FALSE(budget.host_allows(kMax, 1));
  s.limit = 0;
  s.host_limit = 0;
  CHECK(budget.device_allows(kMax, kMax));  // no cap at all
  CHECK(budget.host_allows(kMax, kMax));
}

TEST_CASE("budget: an unknown device total leaves only the limit", "[component][budget]") {
  Settings s;
  s.fraction = 0.5;
  const Budget budget(s, 0);
  CHECK(budget.reserve_cap() == 0);
  CHECK(budget.device_budget() == 0);
  s.limit = 8 * MiB;
  CHECK(budget.reserve_cap() == 8 * MiB);
  CHECK(budget.device_budget() == 8 * MiB);
}
