#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

TEST_CASE("limit caps reserved memory; a request past it fails cleanly", "[limits][oom]") {
  Settings s;
  s.limit = 32 * MiB;
  Harness h(s);
  void* a = h.get(20 * MiB);
  void* p = reinterpret_cast<void*>(1);
  CHECK(h.try_get(20 * MiB, 0, &p) == Error::out_of_memory);
  CHECK(p == nullptr);
  const std::string msg = last_error_message();
  CHECK(msg.find("out of memory") != std::string::npos);
  CHECK(msg.find("cap 32.00 MiB") != std::string::npos);
  CHECK(h.stats().ooms.total == 1);
  CHECK(h.stats().reserved_bytes.current <= std::int64_t(32 * MiB));
  h.put(a);
  void* b = h.get(20 * MiB);  // fits again
  h.put(b);
}

TEST_CASE("a shared segment shrinks to fit under the cap", "[limits]") {
  Settings s = granular_pages();  // reserved is counted in 2 MiB pages
  s.limit = 16 * MiB;
  Harness h(s);
  void* a = h.get(3 * MiB);  // would take a 20 MiB segment without the cap
  CHECK(h.stats().reserved_bytes.current == std::int64_t(4 * MiB));
  h.put(a);
}

TEST_CASE("fraction caps reserved memory relative to the device", "[limits]") {
  Harness h(Settings{}, fake_options(1 * GiB));
  REQUIRE(h.alloc->set_memory_fraction(0.25) == Error::ok);
  CHECK(h.alloc->reserve_cap() == 256 * MiB);
  REQUIRE(h.alloc->set_memory_limit(100 * MiB) == Error::ok);
  CHECK(h.alloc->reserve_cap() == 100 * MiB);  // the smaller cap wins
  void* p = nullptr;
  CHECK(h.try_get(128 * MiB, 0, &p) == Error::out_of_memory);
  for (double bad : {0.0, -1.0, 1.5}) CHECK(h.alloc->set_memory_fraction(bad) == Error::invalid_value);
  CHECK(h.alloc->reserve_cap() == 100 * MiB);
}

TEST_CASE("out of memory releases the cache and retries once", "[oom]") {
  Harness h(plain_settings(), fake_options(100 * MiB));
  void* a = h.get(60 * MiB);
  h.put(a);  // cached, 60 of 100 MiB held
  void* b = h.get(70 * MiB);  // needs the cached segment returned first
  CHECK(h.stats().alloc_retries.total == 1);
  CHECK(h.stats().device_frees.total == 1);
  CHECK(h.stats().ooms.total == 0);
  h.put(b);
}

TEST_CASE("when even the retry fails the state stays intact", "[oom]") {
  Harness h(Settings{}, fake_options(100 * MiB));
  void* a = h.get(60 * MiB);
  void* s = h.get(1000);
  void* p = nullptr;
  CHECK(h.try_get(60 * MiB, 0, &p) == Error::out_of_memory);
  CHECK(std::string(last_error_message()).find("60.00 MiB") != std::string::npos);
  CHECK(h.stats().allocated_count.current == 2);
  h.put(a);
  h.put(s);
}

TEST_CASE("device faults give clean errors and a consistent state", "[faults]") {
  Harness h(plain_settings());
  SECTION("malloc fails with a device error") {
    h.fake.fail_call(CallKind::malloc, 1, device::Status::device_error);
    void* p = nullptr;
    CHECK(h.try_get(64 * MiB, 0, &p) == Error::device_error);
    CHECK(p == nullptr);
    CHECK(std::string(last_error_message()).find("device_error") != std::string::npos);
  }
  SECTION("malloc runs out once: the retry succeeds") {
    h.fake.fail_call(CallKind::malloc, 1);
    void* p = h.get(4096);
    CHECK(h.stats().alloc_retries.total == 1);
    h.put(p);
  }
  SECTION("synchronize fails: empty_cache keeps the segments") {
    void* p = h.get(64 * MiB);
    h.put(p);
    h.fake.fail_call(CallKind::synchronize, 1, device::Status::device_error);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    h.check();
    CHECK(h.stats().reserved_bytes.current == std::int64_t(64 * MiB));
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    CHECK(h.stats().reserved_bytes.current == 0);
  }
  SECTION("free fails: the segment stays cached") {
    void* p = h.get(64 * MiB);
    h.put(p);
    h.fake.fail_call(CallKind::free, 1, device::Status::device_error);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    h.check();
    CHECK(h.stats().reserved_count.current == 1);
  }
  SECTION("event creation fails: record_stream frees fall back to a device sync") {
    void* p = h.get(4096, 1);
    REQUIRE(h.alloc->record_stream(p, 2) == Error::ok);
    h.fake.fail_call(CallKind::event_create, 1, device::Status::device_error);
    const auto syncs = h.fake.calls(CallKind::synchronize);
    h.put(p);
    CHECK(h.fake.calls(CallKind::synchronize) == syncs + 1);
    CHECK(h.stats().active_count.current == 0);
  }
  h.check();
}
