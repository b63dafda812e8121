#include "harness.h"

#include "core/stats.h"

using namespace cudalloc;
using namespace cudalloc::test;

TEST_CASE("stats follow current, peak and total", "[stats]") {
  Harness h(plain_settings());
  void* a = h.get(10 * MiB + 1);
  void* b = h.get(300);
  Stats s = h.stats();
  CHECK(s.allocated_count.current == 2);
  CHECK(s.allocated_bytes.current == std::int64_t(10 * MiB + 512 + 512));
  CHECK(s.requested_bytes.current == std::int64_t(10 * MiB + 1 + 300));
  CHECK(s.reserved_bytes.current == std::int64_t(12 * MiB + 2 * MiB));  // own + slab segment
  CHECK(s.cached_bytes.current == s.reserved_bytes.current - s.active_bytes.current);
  h.put(a);
  s = h.stats();
  CHECK(s.allocated_bytes.peak == std::int64_t(10 * MiB + 1024));
  CHECK(s.allocated_bytes.current == 512);
  CHECK(s.allocated_bytes.total == std::int64_t(10 * MiB + 1024));
  CHECK(s.allocated_count.total == 2);
  h.alloc->reset_peak_stats();
  CHECK(h.stats().allocated_bytes.peak == 512);
  void* c = h.get(300);
  CHECK(h.stats().cache_hits.total == 1);
  CHECK(h.stats().device_allocs.total == 2);
  h.put(b);
  h.put(c);
}

TEST_CASE("the stat list is defined once and named in order", "[stats]") {
  CHECK(stat_field_count() >= 18);
  CHECK(std::string(stat_field_name(0)) == "allocated_bytes");
  CHECK(stat_field_name(stat_field_count()) == nullptr);
  int n = 0;
  Stats{}.for_each([&](std::string_view name, std::string_view help, const Stat&) {
    CHECK(name == stat_field_name(n));
    CHECK_FALSE(help.empty());
    ++n;
  });
  CHECK(n == stat_field_count());
}
