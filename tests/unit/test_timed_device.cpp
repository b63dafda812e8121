// TimedDevice: forwards every call unchanged and counts the calls and their time.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "device/fake_device.h"
#include "device/timed_device.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::device;

TEST_CASE("a timed device forwards calls and counts each with its time", "[fake][timed]") {
  FakeDevice::Options o;
  o.capacity = 16 * MiB;
  o.backing = false;
  FakeDevice fake(o);
  TimedDevice dev(fake);
  CHECK(dev.calls() == 0);
  CHECK(dev.call_ns() == 0);
  CHECK(dev.timer_outside_ns() >= 0);
  CHECK(std::string(dev.name()) == "fake");
  const std::size_t g = dev.granularity(0);
  std::uintptr_t va = 0;
  REQUIRE(dev.reserve(0, 2 * g, &va) == Status::ok);
  PhysicalHandle h = 0;
  REQUIRE(dev.create_physical(0, g, Location::device, &h) == Status::ok);
  REQUIRE(dev.map(va, g, h, 0) == Status::ok);
  REQUIRE(dev.set_access(0, va, g) == Status::ok);
  Location where = Location::host;
  REQUIRE(fake.location_of(va, &where));  // the inner device did the work
  CHECK(where == Location::device);
  // A failure comes back as the inner device gave it, and is counted too.
  CHECK(dev.map(va, g, h, 0) == Status::invalid_value);
  CHECK(dev.create_physical(0, 16 * g, Location::device, &h) == Status::out_of_memory);
  CHECK(dev.calls() == 7);
  CHECK(fake.calls(CallKind::map) == 2);
  REQUIRE(dev.unmap(va, g) == Status::ok);
  REQUIRE(dev.release_physical(h) == Status::ok);
  REQUIRE(dev.unreserve(va, 2 * g) == Status::ok);
  CHECK(dev.calls() == 10);
  CHECK(dev.charged_ns() >= double(dev.call_ns()));
  CHECK(fake.used_bytes(0) == 0);
}

TEST_CASE("a timed device counts the calls of several threads", "[fake][timed]") {
  FakeDevice fake;
  TimedDevice dev(fake);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        EventHandle e = 0;
        if (dev.event_create(0, &e) == Status::ok) dev.event_destroy(e);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(dev.calls() == 8000);
  CHECK(fake.live_events() == 0);
}
