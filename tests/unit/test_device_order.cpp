#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {
using Order = DeviceAllocator::FreeOrder;
constexpr StreamHandle kStream = 0x77;
}  // namespace

TEST_CASE("with only default streams, device-ordered frees are reused at once",
          "[device_order]") {
  Harness h;
  void* p = h.get(64 * MiB);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  CHECK(h.get(64 * MiB) == p);
  CHECK(h.fake.calls(CallKind::event_record) == 0);
}

TEST_CASE("device-ordered frees are reused behind a fence that orders every stream",
          "[device_order]") {
  Harness h;
  h.fake.set_manual_streams(true);
  h.fake.enqueue_work(0, 0);  // earlier work on the legacy stream
  h.alloc->register_stream(kStream);
  bool ordered_at_creation = false;
  for (const auto& w : h.fake.waits()) ordered_at_creation |= w.waiter == kStream && w.on == 0;
  CHECK(ordered_at_creation);  // a new stream starts after the work queued before it
  void* small = h.get(4096);
  void* p = h.get(64 * MiB);
  h.fake.enqueue_work(0, kStream);  // a kernel on the program's stream still uses p
  const auto records = h.fake.calls(CallKind::event_record);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  h.check();
  CHECK(h.stats().active_count.current == 2);  // small, and p: not reusable yet
  void* other = h.get(4096);  // served from the cache: no fence needed
  CHECK(h.fake.calls(CallKind::event_record) == records);
  void* q = h.get(64 * MiB);  // would need new memory: fence, then reuse
  CHECK(q == p);
  CHECK(h.fake.calls(CallKind::event_record) == records + 2);  // legacy + the program's stream
  bool legacy_waits = false, side_waits = false;
  for (const auto& w : h.fake.waits()) {
    legacy_waits |= w.waiter == 0 && w.on == kStream && w.until == 1;
    side_waits |= w.waiter == kStream && w.on == 0;
  }
  CHECK(legacy_waits);  // later work anywhere runs after the kernel that used p
  CHECK(side_waits);
  CHECK_FALSE(h.fake.stream_idle(0, kStream));  // and the host never waited
  h.put(q);
  h.put(small);
  h.put(other);
}

TEST_CASE("device-ordered frees are reused without growth, and the OOM path waits for them", "[device_order][oom]") {
  Harness h(plain_settings(), fake_options(64 * MiB));
  h.fake.set_manual_streams(true);
  h.alloc->register_stream(kStream);
  void* p = h.get(40 * MiB);
  h.fake.enqueue_work(0, 0);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  void* q = h.get(40 * MiB);  // the fence lets it reuse p's memory without waiting
  CHECK(q == p);
  h.put(q);
  void* r = h.get(8 * MiB);
  REQUIRE(h.alloc->deallocate(r, Order::device) == Error::ok);
  void* big = nullptr;
  CHECK(h.try_get(60 * MiB, 0, &big) == Error::ok);  // OOM path: synchronize, return, retry
  CHECK(h.fake.stream_idle(0, 0));
  h.put(big);
}

TEST_CASE("empty_cache completes device-ordered frees", "[device_order]") {
  Harness h;
  void* p = h.get(8 * MiB);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().active_count.current == 0);
}

TEST_CASE("reset forgets every allocation and returns all memory", "[device_order][reset]") {
  Harness h;
  void* a = h.get(1000);
  h.get(30 * MiB);
  REQUIRE(h.alloc->deallocate(a, Order::device) == Error::ok);
  REQUIRE(h.alloc->reset() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().allocated_count.current == 0);
  CHECK(h.fake.used_bytes(0) == 0);
  CHECK(h.alloc->deallocate(a) == Error::invalid_pointer);
  void* b = h.get(1000);  // usable again afterwards
  h.put(b);
}

TEST_CASE("memory_info reports the device's free memory plus the cache, within the cap",
          "[device_order][limits]") {
  Settings s;
  s.limit = 256 * MiB;
  Harness h(s, fake_options(1 * GiB));
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(total == 256 * MiB);
  CHECK(free_bytes == 256 * MiB);
  void* p = h.get(100 * MiB);
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(free_bytes == 156 * MiB);
  h.put(p);  // cached memory counts as free
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(free_bytes == 256 * MiB);
}
