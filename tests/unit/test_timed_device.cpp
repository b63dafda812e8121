// TimedDevice: forwards every call unchanged and counts the calls and their time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/call_profile.h"
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

TEST_CASE("a timed device keeps the calls and their time by kind", "[fake][timed]") {
  FakeDevice fake;
  TimedDevice dev(fake);
  CallTimes t;
  REQUIRE(dev.call_times(&t));
  for (int i = 0; i < CallTimes::kSlots; ++i) CHECK(t.calls[i] == 0);
  const std::size_t g = dev.granularity(0);  // a query: no CallKind of its own
  std::uintptr_t va = 0;
  REQUIRE(dev.reserve(0, 2 * g, &va) == Status::ok);
  PhysicalHandle h[2] = {0, 0};
  for (PhysicalHandle& one : h) REQUIRE(dev.create_physical(0, g, Location::device, &one) == Status::ok);
  REQUIRE(dev.map(va, g, h[0], 0) == Status::ok);
  std::size_t free_b = 0, total_b = 0;
  REQUIRE(dev.mem_info(0, &free_b, &total_b) == Status::ok);
  REQUIRE(dev.call_times(&t));
  CHECK(t.calls[static_cast<int>(CallKind::reserve)] == 1);
  CHECK(t.calls[static_cast<int>(CallKind::create_physical)] == 2);
  CHECK(t.calls[static_cast<int>(CallKind::map)] == 1);
  CHECK(t.calls[static_cast<int>(CallKind::unmap)] == 0);
  CHECK(t.calls[CallTimes::kSlots - 1] == 2);  // granularity and mem_info
  CHECK(std::string(call_slot_name(CallTimes::kSlots - 1)) == "query");
  CHECK(std::string(call_slot_name(static_cast<int>(CallKind::map))) ==
        call_kind_name(CallKind::map));
  std::uint64_t calls = 0, ns = 0;
  for (int i = 0; i < CallTimes::kSlots; ++i) {
    calls += t.calls[i];
    ns += t.ns[i];
  }
  CHECK(calls == dev.calls());  // the slots split the totals, nothing more or less
  CHECK(ns == dev.call_ns());
  REQUIRE(dev.unmap(va, g) == Status::ok);
  for (PhysicalHandle one : h) REQUIRE(dev.release_physical(one) == Status::ok);
  REQUIRE(dev.unreserve(va, 2 * g) == Status::ok);
}

TEST_CASE("a call profile names the kinds called since it was made, on a timed device only",
          "[fake][timed]") {
  FakeDevice fake;
  CallProfile plain(fake);
  CallTimes unused;
  CHECK_FALSE(fake.call_times(&unused));
  TimedDevice dev(fake);
  std::uintptr_t va = 0;
  const std::size_t g = dev.granularity(0);
  REQUIRE(dev.reserve(0, 4 * g, &va) == Status::ok);  // before the profile: not in it
  CallProfile profile(dev);
  CHECK(profile.summary() == "; device calls 0.0 ms");
  PhysicalHandle h[3] = {0, 0, 0};
  for (PhysicalHandle& one : h) REQUIRE(dev.create_physical(0, g, Location::device, &one) == Status::ok);
  for (int i = 0; i < 3; ++i) REQUIRE(dev.map(va + std::uintptr_t(i) * g, g, h[i], 0) == Status::ok);
  REQUIRE(dev.unmap(va, 3 * g) == Status::ok);
  const std::string all = profile.summary();
  CHECK(all.rfind("; device calls ", 0) == 0);
  CHECK(all.find("create_physical 3 x ") != std::string::npos);
  CHECK(all.find("map 3 x ") != std::string::npos);
  CHECK(all.find("unmap 1 x ") != std::string::npos);
  CHECK(all.find("reserve") == std::string::npos);
  // `most` keeps the longest kinds only: one of the three here.
  const std::string one = profile.summary(1);
  CHECK(std::count(one.begin(), one.end(), ',') == 0);
  CHECK(one.find(" x ") != std::string::npos);
  CHECK(plain.summary().empty());  // the plain fake does not time its calls
  for (PhysicalHandle each : h) REQUIRE(dev.release_physical(each) == Status::ok);
  REQUIRE(dev.unreserve(va, 4 * g) == Status::ok);
}
