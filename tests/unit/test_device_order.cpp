#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {
using Order = DeviceAllocator::FreeOrder;
constexpr StreamHandle kNonBlocking = 0x77;
}  // namespace

TEST_CASE("device-ordered frees wait behind a fence of every stream", "[device_order]") {
  Harness h;
  h.fake.set_manual_streams(true);
  h.alloc->register_stream(kNonBlocking);
  void* p = h.get(4096);
  h.fake.enqueue_work(0, kNonBlocking);  // a kernel on a non-blocking stream still uses p
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  h.check();
  CHECK(h.stats().active_count.current == 1);  // not reusable yet
  const auto records = h.fake.calls(CallKind::event_record);
  std::vector<void*> held;
  for (int i = 0; i < 32; ++i) held.push_back(h.get(4096));  // polls record the fence
  for (void* q : held) CHECK(q != p);
  // One event on the legacy stream and one on the registered non-blocking stream.
  CHECK(h.fake.calls(CallKind::event_record) == records + 2);
  h.fake.complete_work(0, kNonBlocking);
  void* again = nullptr;
  for (int i = 0; i < 32 && again != p; ++i) {
    again = h.get(4096);
    held.push_back(again);
  }
  CHECK(again == p);  // reused once the fence passed
  for (void* q : held) h.put(q);
  CHECK(h.stats().active_count.current == 0);
}

TEST_CASE("out of memory waits for device-ordered frees", "[device_order][oom]") {
  Harness h(Settings{}, fake_options(64 * MiB));
  h.fake.set_manual_streams(true);
  void* p = h.get(40 * MiB);
  h.fake.enqueue_work(0, 0);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  void* q = h.get(40 * MiB);  // only fits once the device is idle
  CHECK(h.fake.stream_idle(0, 0));
  h.put(q);
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
