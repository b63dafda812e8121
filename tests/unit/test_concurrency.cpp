#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

TEST_CASE("threads on many streams keep every invariant", "[concurrency][stress]") {
  Harness h(Settings{}, fake_options(4 * GiB));
  constexpr int kThreads = 4;
  std::atomic<bool> failed{false};
  std::atomic<int> running{kThreads};
  auto worker = [&](int id) {
    std::mt19937_64 rng(std::uint64_t(id) * 7919);
    std::vector<std::pair<void*, unsigned char>> mine;
    for (int i = 0; i < 3000 && !failed; ++i) {
      const StreamHandle stream = StreamHandle(rng() % 2 == 0 ? 0x100 + id : 0x999);
      if (mine.empty() || rng() % 100 < 55) {
        const std::size_t size = 1 + rng() % (std::size_t(1) << (rng() % 23));
        void* p = nullptr;
        if (h.alloc->allocate(size, stream, &p) != Error::ok) continue;
        const auto byte = static_cast<unsigned char>(id * 16 + i);
        *static_cast<unsigned char*>(p) = byte;
        if (rng() % 10 == 0) h.alloc->record_stream(p, StreamHandle(0x200 + id));
        mine.emplace_back(p, byte);
      } else {
        const std::size_t k = rng() % mine.size();
        if (*static_cast<unsigned char*>(mine[k].first) != mine[k].second) failed = true;
        if (h.alloc->deallocate(mine[k].first) != Error::ok) failed = true;
        mine[k] = mine.back();
        mine.pop_back();
      }
    }
    for (auto& [p, byte] : mine) {
      if (h.alloc->deallocate(p) != Error::ok) failed = true;
    }
    --running;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  // Meanwhile: release the cache and check every invariant from another thread (at least
  // once, however the threads are scheduled: how often they overlap is not asserted).
  do {
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    const std::string problem = h.alloc->validate();
    INFO(problem);
    REQUIRE(problem.empty());
    std::this_thread::yield();
  } while (running > 0);
  for (auto& t : threads) t.join();
  CHECK_FALSE(failed);
  h.check();
  CHECK(h.stats().allocated_count.current == 0);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().reserved_bytes.current == 0);
}

TEST_CASE("each device has its own allocator and state", "[concurrency][devices]") {
  FakeDevice::Options o = fake_options(256 * MiB);
  o.devices = 2;
  FakeDevice fake(o);
  Allocator allocator(fake, Settings{});
  Error err = Error::ok;
  DeviceAllocator* d0 = allocator.device(0, &err);
  DeviceAllocator* d1 = allocator.device(1, &err);
  REQUIRE(d0 != nullptr);
  REQUIRE(d1 != nullptr);
  CHECK(d0 != d1);
  CHECK(allocator.device(2, &err) == nullptr);
  CHECK(err == Error::invalid_value);
  fake.set_current_device(1);
  CHECK(allocator.device(-1, &err) == d1);
  fake.set_current_device(0);

  std::atomic<int> errors{0};  // Catch2 assertions are not thread-safe: count, check later
  std::thread t0([&] {
    for (int i = 0; i < 2000; ++i) {
      void* p = nullptr;
      if (d0->allocate(4096 + std::size_t(i), 0, &p) != Error::ok) ++errors;
      if (d0->deallocate(p) != Error::ok) ++errors;
    }
  });
  void* q = nullptr;
  REQUIRE(d1->allocate(1 * MiB, 0, &q) == Error::ok);
  t0.join();
  CHECK(errors == 0);
  CHECK(allocator.owner_of(q) == d1);
  CHECK(d0->deallocate(q) == Error::invalid_pointer);  // the other device's pointer
  CHECK(d1->stats().allocated_count.current == 1);
  CHECK(d0->stats().allocated_count.total == 2000);
  CHECK(fake.used_bytes(0) > 0);
  int on_host = 0;
  CHECK(allocator.free_anywhere(&on_host, DeviceAllocator::FreeOrder::stream) ==
        Error::invalid_pointer);
  REQUIRE(allocator.free_anywhere(q, DeviceAllocator::FreeOrder::stream) == Error::ok);
  CHECK(d1->stats().allocated_count.current == 0);
  CHECK(d0->validate().empty());
  CHECK(d1->validate().empty());
}

TEST_CASE("streams of one device never wait on another device's events", "[devices]") {
  // Streams of both devices share handles on purpose: only the device tells them apart.
  FakeDevice::Options o = fake_options(256 * MiB);
  o.devices = 2;
  o.manual_streams = true;
  FakeDevice fake(o);
  // 2 MiB pages under allocations of 1-5 MiB, so that pages move between streams.
  Settings settings = granular_pages();
  settings.page_slack = 0;  // idle pages move between streams: every cross-stream edge
  Allocator allocator(fake, settings);
  Error err = Error::ok;
  DeviceAllocator* devs[2] = {allocator.device(0, &err), allocator.device(1, &err)};
  REQUIRE(devs[1] != nullptr);
  constexpr StreamHandle kStreams[] = {0, 0x71, 0x72};
  for (DeviceAllocator* d : devs) {
    for (StreamHandle s : kStreams) d->register_stream(s);
  }
  std::vector<std::pair<DeviceAllocator*, void*>> live;
  for (int round = 0; round < 40; ++round) {
    for (int dev = 0; dev < 2; ++dev) {
      const StreamHandle s = kStreams[(round + dev) % 3];
      void* p = nullptr;
      REQUIRE(devs[dev]->allocate((1 + round % 5) * MiB + 4096, s, &p) == Error::ok);
      fake.enqueue_work(dev, s);
      live.emplace_back(devs[dev], p);
      if (round % 3 == 0) REQUIRE(devs[dev]->record_stream(p, kStreams[(round + 1) % 3]) == Error::ok);
    }
    if (live.size() > 6) {
      auto [d, p] = live.front();
      live.erase(live.begin());
      REQUIRE(d->deallocate(p, round % 2 ? DeviceAllocator::FreeOrder::device
                                         : DeviceAllocator::FreeOrder::stream) == Error::ok);
    }
  }
  for (auto [d, p] : live) REQUIRE(d->deallocate(p) == Error::ok);
  for (DeviceAllocator* d : devs) REQUIRE(d->empty_cache() == Error::ok);
  fake.complete_all();
  const auto waits = fake.waits();
  CHECK_FALSE(waits.empty());
  for (const auto& w : waits) {
    CAPTURE(w.dev, w.on_dev, w.waiter, w.on);
    CHECK(w.dev == w.on_dev);
  }
  for (DeviceAllocator* d : devs) CHECK(d->validate().empty());
}
