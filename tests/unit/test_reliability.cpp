// Reliability of the core under adversarial use: many streams, requests that cannot fit,
// tiny caps, requests larger than the device with the host tier.
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

std::uint64_t live_ranges(const FakeDevice& fake) {
  return fake.calls(CallKind::reserve) - fake.calls(CallKind::unreserve);
}

}  // namespace

TEST_CASE("thousands of streams created, used and destroyed keep address space bounded",
          "[reliability][streams]") {
  Harness h(Settings{}, fake_options(141 * GiB));
  void* main_block = h.get(10 * MiB);  // the main stream keeps memory throughout
  for (StreamHandle s = 0x1000; s < 0x1000 + 3000; ++s) {
    h.alloc->register_stream(s);
    void* p = nullptr;
    REQUIRE(h.alloc->allocate(1000, s, &p) == Error::ok);
    void* big = nullptr;
    REQUIRE(h.alloc->allocate(5 * MiB, s, &big) == Error::ok);
    REQUIRE(h.alloc->deallocate(p) == Error::ok);
    REQUIRE(h.alloc->deallocate(big) == Error::ok);
    h.alloc->unregister_stream(s);  // cudaStreamDestroy: its wholly free pool is returned
    REQUIRE(live_ranges(h.fake) <= 2);
  }
  h.check();
  h.put(main_block);
}

TEST_CASE("many live streams never exhaust address space, and empty_cache returns it",
          "[reliability][streams]") {
  Harness h(Settings{}, fake_options(141 * GiB));
  for (StreamHandle s = 0x1000; s < 0x1000 + 1200; ++s) {
    void* p = nullptr;
    // 1,200 device-sized ranges would not fit in a 47-bit address space.
    REQUIRE(h.alloc->allocate(1000, s, &p) == Error::ok);
    REQUIRE(h.alloc->deallocate(p) == Error::ok);
  }
  CHECK(live_ranges(h.fake) == 1200);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(live_ranges(h.fake) == 0);
  void* p = h.get(1000, 0x1000);  // pools come back on demand
  h.put(p);
}

TEST_CASE("a destroyed stream whose memory is in use keeps its pool", "[reliability][streams]") {
  Harness h;
  constexpr StreamHandle kS = 0x77;
  h.alloc->register_stream(kS);
  void* p = h.get(3 * MiB, kS);
  h.alloc->unregister_stream(kS);
  h.check();
  std::memset(p, 1, 3 * MiB);  // still mapped
  h.put(p);
}

TEST_CASE("a request that cannot fit leaves reserved memory as it found it",
          "[reliability][oom][pages]") {
  Harness h(Settings{}, fake_options(256 * MiB));
  void* held = h.get(100 * MiB);
  const auto reserved = h.stats().reserved_bytes.current;
  void* p = nullptr;
  CHECK(h.try_get(200 * MiB, 0, &p) == Error::out_of_memory);
  CHECK(p == nullptr);
  CHECK(h.stats().reserved_bytes.current == reserved);
  CHECK(h.fake.used_bytes(0) == static_cast<std::size_t>(reserved));
  CHECK(std::string(last_error_message()).find("more than the budget leaves") !=
        std::string::npos);
  // What the failed request touched is usable: a request that fits still succeeds.
  void* q = h.get(150 * MiB);
  h.put(q);
  h.put(held);
}

TEST_CASE("a failed request returns the pages it created also under a cap",
          "[reliability][oom][limits]") {
  Settings s;
  s.limit = 64 * MiB;
  Harness h(s);
  void* held = h.get(20 * MiB);
  const auto reserved = h.stats().reserved_bytes.current;
  void* p = nullptr;
  CHECK(h.try_get(60 * MiB, 0, &p) == Error::out_of_memory);
  CHECK(h.stats().reserved_bytes.current == reserved);
  h.put(held);
}

TEST_CASE("a fraction that rounds to zero bytes still caps, under any limit",
          "[reliability][limits]") {
  Settings s;
  s.fraction = 1e-12;
  s.limit = 1 * MiB;
  Harness h(s);
  CHECK(h.alloc->reserve_cap() == 1);
  void* p = nullptr;
  CHECK(h.try_get(4096, 0, &p) == Error::out_of_memory);
  CHECK(h.stats().reserved_bytes.current == 0);
  REQUIRE(h.alloc->set_memory_fraction(1.0) == Error::ok);
  CHECK(h.alloc->reserve_cap() == 1 * MiB);
}

TEST_CASE("with the host tier a request larger than the device is served",
          "[reliability][offload]") {
  Settings s;
  s.offload = Offload::host;
  Harness h(s, fake_options(256 * MiB));
  void* p = h.get(384 * MiB);
  std::size_t device_bytes = 0, host_bytes = 0;
  REQUIRE(h.alloc->residency(p, &device_bytes, &host_bytes) == Error::ok);
  CHECK(device_bytes + host_bytes == 384 * MiB);
  CHECK(host_bytes >= 128 * MiB);
  std::memset(p, 7, 384 * MiB);  // every byte is mapped, on one side or the other
  h.put(p);
  void* q = nullptr;
  Harness plain(Settings{}, fake_options(256 * MiB));
  CHECK(plain.try_get(384 * MiB, 0, &q) == Error::out_of_memory);
}
