#include <map>
#include <random>

#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

TEST_CASE("small requests come from slabs: aligned, distinct, reused LIFO", "[pools][slab]") {
  Harness h;
  void* a = h.get(100);
  void* b = h.get(100);
  CHECK(addr(a) % 256 == 0);
  CHECK(addr(b) % 256 == 0);
  CHECK(addr(b) - addr(a) == 256);  // one 256-byte class, consecutive slots
  CHECK(h.stats().slab_count.current == 1);
  CHECK(h.stats().allocated_bytes.current == 512);
  CHECK(h.stats().requested_bytes.current == 200);
  h.put(b);
  void* c = h.get(256);
  CHECK(c == b);
  h.put(a);
  h.put(c);
  CHECK(h.stats().device_allocs.total == 1);
  CHECK(h.stats().cache_hits.total == 2);
}

TEST_CASE("size classes keep different sizes in different slabs", "[pools][slab]") {
  Harness h;
  void* a = h.get(256);
  void* b = h.get(1000);
  void* c = h.get(200 * KiB);
  CHECK(h.stats().slab_count.current == 3);
  std::memset(a, 1, 256);
  std::memset(b, 2, 1000);
  std::memset(c, 3, 200 * KiB);
  CHECK(static_cast<unsigned char*>(a)[255] == 1);
  CHECK(static_cast<unsigned char*>(b)[999] == 2);
  h.put(a);
  h.put(b);
  h.put(c);
}

TEST_CASE("size 0 gives a null pointer and changes nothing", "[pools]") {
  Harness h;
  void* p = reinterpret_cast<void*>(1);
  REQUIRE(h.alloc->allocate(0, 0, &p) == Error::ok);
  CHECK(p == nullptr);
  CHECK(h.stats().allocated_count.total == 0);
  CHECK(h.alloc->deallocate(nullptr) == Error::ok);
}

TEST_CASE("huge requests fail cleanly as out of memory", "[pools][oom]") {
  Harness h;
  void* keep = h.get(4096);
  for (std::size_t size : {std::size_t(-1), std::size_t(1) << 50, std::size_t(2) * GiB}) {
    void* p = reinterpret_cast<void*>(1);
    CHECK(h.try_get(size, 0, &p) == Error::out_of_memory);
    CHECK(p == nullptr);
    CHECK(std::string(last_error_message()).find("allocate") != std::string::npos);
  }
  CHECK(h.stats().ooms.total == 3);
  CHECK(h.stats().allocated_count.current == 1);
  h.put(keep);
}

TEST_CASE("large requests split a shared segment and coalesce back", "[pools][blocks]") {
  Harness h(plain_settings());
  void* a = h.get(3 * MiB);
  void* b = h.get(3 * MiB);
  void* c = h.get(3 * MiB);
  CHECK(h.stats().reserved_count.current == 1);  // one 20 MiB segment
  CHECK(h.stats().reserved_bytes.current == std::int64_t(20 * MiB));
  CHECK(addr(b) == addr(a) + 3 * MiB);
  CHECK(addr(c) == addr(b) + 3 * MiB);
  CHECK(h.stats().cached_count.current == 1);  // the tail
  h.put(b);
  CHECK(h.stats().cached_count.current == 2);  // the hole and the tail
  h.put(c);
  CHECK(h.stats().cached_count.current == 1);  // hole + c + tail merged
  void* d = h.get(16 * MiB);
  CHECK(addr(d) == addr(a) + 3 * MiB);  // reuses the merged block
  h.put(a);
  h.put(d);
  CHECK(h.stats().cached_count.current == 1);
  CHECK(h.stats().cached_bytes.current == std::int64_t(20 * MiB));
}

TEST_CASE("best fit picks the smallest free block that fits", "[pools][blocks]") {
  Harness h;
  void* a = h.get(6 * MiB);
  void* sep1 = h.get(1 * MiB);
  void* b = h.get(3 * MiB);
  void* sep2 = h.get(1 * MiB);
  h.put(a);
  h.put(b);
  void* c = h.get(2 * MiB + 1);
  CHECK(c == b);  // the 3 MiB hole, not the 6 MiB one
  h.put(c);
  h.put(sep1);
  h.put(sep2);
}

TEST_CASE("requests above half a shared segment get their own segment", "[pools][blocks]") {
  Harness h(plain_settings());
  void* a = h.get(11 * MiB + 5);
  CHECK(h.stats().reserved_bytes.current == std::int64_t(12 * MiB));
  void* b = h.get(1 * MiB + 1);  // above 1 MiB: a shared 20 MiB segment
  CHECK(h.stats().reserved_bytes.current == std::int64_t(32 * MiB));
  void* c = h.get(300 * KiB);  // best fit: the free rest of b's segment
  CHECK(h.stats().reserved_bytes.current == std::int64_t(32 * MiB));
  h.put(c);
  h.put(a);
  h.put(b);
}

TEST_CASE("empty slabs beyond slab_keep return to the block pool", "[pools][slab]") {
  Settings s;
  s.slab_keep = 0;
  Harness h(s);
  void* a = h.get(512);
  CHECK(h.stats().slab_count.current == 1);
  h.put(a);
  CHECK(h.stats().slab_count.current == 0);
  CHECK(h.stats().cached_bytes.current == h.stats().reserved_bytes.current);
}

TEST_CASE("empty_cache returns every unused segment and keeps live ones", "[pools]") {
  Harness h(plain_settings());
  void* small = h.get(4096);
  void* big = h.get(64 * MiB);
  void* mid = h.get(5 * MiB);
  h.put(big);
  h.put(mid);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_count.current == 1);  // the slab's segment, still in use
  CHECK(h.stats().device_frees.total == 2);
  CHECK(h.fake.calls(CallKind::synchronize) >= 1);  // waited before returning memory
  h.put(small);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("double free, foreign and interior pointers are errors that change nothing",
          "[pools][errors]") {
  Harness h;
  void* a = h.get(1000);
  void* big = h.get(3 * MiB);
  const Stats before = h.stats();
  int on_host = 0;
  CHECK(h.alloc->deallocate(&on_host) == Error::invalid_pointer);
  CHECK(h.alloc->deallocate(static_cast<char*>(big) + 512) == Error::invalid_pointer);
  CHECK(h.alloc->record_stream(&on_host, 7) == Error::invalid_pointer);
  CHECK(std::string(last_error_message()).find("not a live allocation") != std::string::npos);
  h.put(a);
  CHECK(h.alloc->deallocate(a) == Error::invalid_pointer);
  h.check();
  CHECK(h.stats().allocated_count.current == before.allocated_count.current - 1);
  h.put(big);
}

TEST_CASE("random churn never overlaps live allocations and keeps their bytes",
          "[pools][random]") {
  Harness h(Settings{}, fake_options(2 * GiB));
  std::mt19937_64 rng(7);
  std::map<std::uintptr_t, std::pair<std::size_t, unsigned char>> live;  // addr -> size, byte
  auto sample_size = [&] {
    const int shift = int(rng() % 25);  // 1 B .. 32 MiB, log-uniform
    return std::size_t(1) + rng() % (std::size_t(1) << shift);
  };
  for (int i = 0; i < 1500; ++i) {
    if (live.empty() || rng() % 100 < 60) {
      const std::size_t size = sample_size();
      void* p = h.get(size, StreamHandle(rng() % 2));
      const auto a = addr(p);
      // No overlap with the neighbours in address order.
      auto next = live.lower_bound(a);
      if (next != live.end()) REQUIRE(a + size <= next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second.first <= a);
      }
      const auto byte = static_cast<unsigned char>(rng());
      std::memset(p, byte, std::min<std::size_t>(size, 4096));
      live[a] = {size, byte};
    } else {
      auto it = live.begin();
      std::advance(it, long(rng() % live.size()));
      const auto* bytes = reinterpret_cast<const unsigned char*>(it->first);
      for (std::size_t k = 0; k < std::min<std::size_t>(it->second.first, 4096); k += 97) {
        REQUIRE(bytes[k] == it->second.second);
      }
      h.put(reinterpret_cast<void*>(it->first));
      live.erase(it);
    }
  }
  for (auto& [a, info] : live) h.put(reinterpret_cast<void*>(a));
  CHECK(h.stats().allocated_bytes.current == 0);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().reserved_bytes.current == 0);
}
