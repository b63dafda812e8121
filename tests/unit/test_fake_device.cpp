#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "device/fake_device.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::device;

TEST_CASE("fake malloc gives writable memory within the capacity", "[fake]") {
  FakeDevice::Options o;
  o.capacity = 64 * MiB;
  FakeDevice dev(o);
  void* a = nullptr;
  REQUIRE(dev.malloc(0, 48 * MiB, &a) == Status::ok);
  std::memset(a, 0xab, 48 * MiB);
  void* b = nullptr;
  CHECK(dev.malloc(0, 32 * MiB, &b) == Status::out_of_memory);
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(dev.mem_info(0, &free_bytes, &total) == Status::ok);
  CHECK(total == 64 * MiB);
  CHECK(free_bytes == 16 * MiB);
  CHECK(dev.free(0, b) == Status::invalid_value);
  CHECK(dev.free(1, a) == Status::invalid_value);  // no device 1
  REQUIRE(dev.free(0, a) == Status::ok);
  CHECK(dev.free(0, a) == Status::invalid_value);  // double free
  CHECK(dev.used_bytes(0) == 0);
}

TEST_CASE("fake virtual memory maps one physical range at two addresses", "[fake][vmm]") {
  FakeDevice dev;
  const std::size_t g = dev.granularity(0);
  REQUIRE(g == 2 * MiB);
  std::uintptr_t va = 0;
  REQUIRE(dev.reserve(0, 8 * g, &va) == Status::ok);
  CHECK(va % g == 0);
  PhysicalHandle h = 0;
  REQUIRE(dev.create_physical(0, 2 * g, Location::device, &h) == Status::ok);
  REQUIRE(dev.map(va, 2 * g, h, 0) == Status::ok);
  CHECK(dev.map(va + g, g, h, 0) == Status::invalid_value);  // overlaps a mapping
  REQUIRE(dev.set_access(0, va, 2 * g) == Status::ok);
  std::memset(reinterpret_cast<void*>(va), 7, 2 * g);
  // As the driver (H200, 2026-12-02): an allocation is mapped whole, never a part of it.
  CHECK(dev.map(va + 4 * g, g, h, g) == Status::invalid_value);
  CHECK(dev.map(va + 4 * g, g, h, 0) == Status::invalid_value);
  REQUIRE(dev.map(va + 4 * g, 2 * g, h, 0) == Status::ok);  // whole, again
  REQUIRE(dev.set_access(0, va + 4 * g, 2 * g) == Status::ok);
  CHECK(*reinterpret_cast<unsigned char*>(va + 5 * g) == 7);
  *reinterpret_cast<unsigned char*>(va + 5 * g) = 9;
  CHECK(*reinterpret_cast<unsigned char*>(va + g) == 9);
  CHECK(dev.unreserve(va, 8 * g) == Status::invalid_value);  // still mapped
  REQUIRE(dev.release_physical(h) == Status::ok);
  CHECK(dev.used_bytes(0) == 2 * g);  // mapped memory stays until unmapped
  CHECK(dev.unmap(va, g) == Status::invalid_value);  // part of a mapping
  REQUIRE(dev.unmap(va, 2 * g) == Status::ok);
  REQUIRE(dev.unmap(va + 4 * g, 2 * g) == Status::ok);
  CHECK(dev.used_bytes(0) == 0);
  CHECK(dev.unreserve(va, 8 * g) == Status::ok);
}

TEST_CASE("an unbacked fake keeps the records of memory without its bytes", "[fake][vmm]") {
  FakeDevice::Options o;
  o.capacity = 16 * MiB;
  o.backing = false;
  FakeDevice dev(o);
  const std::size_t g = dev.granularity(0);
  void* a = nullptr;
  REQUIRE(dev.malloc(0, 8 * MiB, &a) == Status::ok);
  CHECK(reinterpret_cast<std::uintptr_t>(a) >= std::uintptr_t{1} << 48);  // never host memory
  std::uintptr_t va = 0;
  REQUIRE(dev.reserve(0, 4 * g, &va) == Status::ok);
  CHECK(va % g == 0);
  CHECK(va >= reinterpret_cast<std::uintptr_t>(a) + 8 * MiB);  // ranges never overlap
  PhysicalHandle h = 0, h2 = 0;
  REQUIRE(dev.create_physical(0, g, Location::device, &h) == Status::ok);
  CHECK(dev.create_physical(0, 4 * g, Location::device, &h2) == Status::out_of_memory);
  CHECK(dev.map(va + 1, g, h, 0) == Status::invalid_value);
  REQUIRE(dev.map(va, g, h, 0) == Status::ok);
  CHECK(dev.map(va, g, h, 0) == Status::invalid_value);  // already mapped
  REQUIRE(dev.map(va + 2 * g, g, h, 0) == Status::ok);
  REQUIRE(dev.set_access(0, va, g) == Status::ok);
  CHECK(dev.set_access(0, va + g, g) == Status::invalid_value);  // nothing mapped there
  REQUIRE(dev.copy(0, va, va + 2 * g, g, 0) == Status::ok);  // completes, moves nothing
  CHECK(dev.copy(0, va + g, va, g, 0) == Status::invalid_value);
  CHECK(dev.bad_copies() == 0);
  Location where = Location::host;
  REQUIRE(dev.location_of(va + 2 * g, &where));
  CHECK(where == Location::device);
  REQUIRE(dev.release_physical(h) == Status::ok);
  CHECK(dev.used_bytes(0) == 8 * MiB + g);  // mapped memory stays until unmapped
  CHECK(dev.unreserve(va, 4 * g) == Status::invalid_value);
  REQUIRE(dev.unmap(va, g) == Status::ok);
  REQUIRE(dev.unmap(va + 2 * g, g) == Status::ok);
  CHECK(dev.used_bytes(0) == 8 * MiB);
  CHECK(dev.unreserve(va, 4 * g) == Status::ok);
  REQUIRE(dev.free(0, a) == Status::ok);
  CHECK(dev.free(0, a) == Status::invalid_value);
  CHECK(dev.used_bytes(0) == 0);
}

TEST_CASE("fake events follow simulated stream work", "[fake][streams]") {
  FakeDevice dev;
  dev.set_manual_streams(true);
  const StreamHandle s1 = 0x100, s2 = 0x200;
  EventHandle e = 0;
  REQUIRE(dev.event_create(0, &e) == Status::ok);
  CHECK(dev.event_query(e) == Status::ok);  // never recorded
  dev.enqueue_work(0, s1);
  REQUIRE(dev.event_record(0, e, s1) == Status::ok);
  CHECK(dev.event_query(e) == Status::not_ready);
  dev.enqueue_work(0, s1);  // later work does not delay the event
  REQUIRE(dev.stream_wait_event(0, s2, e) == Status::ok);
  dev.enqueue_work(0, s2);
  dev.complete_work(0, s2);  // s2 cannot finish before what it waits on
  CHECK(dev.event_query(e) == Status::ok);
  CHECK_FALSE(dev.stream_idle(0, s1));
  REQUIRE(dev.waits().size() == 1);
  CHECK(dev.waits()[0].waiter == s2);
  CHECK(dev.waits()[0].on == s1);
  dev.complete_all();
  CHECK(dev.stream_idle(0, s1));
  REQUIRE(dev.event_destroy(e) == Status::ok);
  CHECK(dev.event_query(e) == Status::invalid_value);
}

TEST_CASE("fake faults fail exactly the nth call of a kind", "[fake][faults]") {
  FakeDevice dev;
  dev.fail_call(CallKind::malloc, 2);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  CHECK(dev.malloc(0, 4096, &a) == Status::ok);
  CHECK(dev.malloc(0, 4096, &b) == Status::out_of_memory);
  CHECK(dev.malloc(0, 4096, &c) == Status::ok);
  CHECK(dev.calls(CallKind::malloc) == 3);
  dev.fail_call(CallKind::synchronize, 1, Status::device_error);
  CHECK(dev.synchronize(0) == Status::device_error);
  CHECK(dev.synchronize(0) == Status::ok);
  dev.free(0, a);
  dev.free(0, c);
}

TEST_CASE("fake device spec parsing", "[fake]") {
  FakeDevice::Options o;
  CHECK(parse_fake_spec("", &o));
  CHECK(parse_fake_spec(":8G", &o));
  CHECK(o.capacity == 8 * GiB);
  CHECK(parse_fake_spec(":1G:4", &o));
  CHECK(o.devices == 4);
  CHECK_FALSE(parse_fake_spec(":", &o));
  CHECK_FALSE(parse_fake_spec(":1G:0", &o));
  CHECK_FALSE(parse_fake_spec(":lots", &o));
  CHECK_FALSE(parse_fake_spec("x", &o));
}

TEST_CASE("a child of fork() gets its own copy of the simulated memory", "[fake][vmm][fork]") {
  FakeDevice dev;
  const std::size_t g = dev.granularity(0);
  std::uintptr_t va = 0;
  REQUIRE(dev.reserve(0, 4 * g, &va) == Status::ok);
  PhysicalHandle h = 0;
  REQUIRE(dev.create_physical(0, 2 * g, Location::device, &h) == Status::ok);
  REQUIRE(dev.map(va, 2 * g, h, 0) == Status::ok);
  REQUIRE(dev.map(va + 2 * g, 2 * g, h, 0) == Status::ok);  // an alias: byte i at 2g + i
  REQUIRE(dev.set_access(0, va, 4 * g) == Status::ok);
  auto* bytes = reinterpret_cast<unsigned char*>(va);
  std::memset(bytes, 7, 2 * g);

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Aliases still alias in the child; its writes, unmaps and frees are its own.
    bool ok = bytes[3 * g] == 7;
    bytes[g] = 1;
    ok = ok && bytes[3 * g] == 1;
    std::memset(bytes, 9, g);
    ok = ok && dev.unmap(va, 2 * g) == Status::ok && dev.unmap(va + 2 * g, 2 * g) == Status::ok &&
         dev.release_physical(h) == Status::ok && dev.used_bytes(0) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The child's writes and its free (which punches the pages out of its memory file) left the
  // parent's bytes alone.
  CHECK(bytes[0] == 7);
  CHECK(bytes[g] == 7);
  CHECK(bytes[2 * g - 1] == 7);
  CHECK(bytes[3 * g] == 7);
  bytes[g + 1] = 3;
  CHECK(bytes[3 * g + 1] == 3);  // and the parent's aliases still alias
  REQUIRE(dev.unmap(va, 2 * g) == Status::ok);
  REQUIRE(dev.unmap(va + 2 * g, 2 * g) == Status::ok);
  REQUIRE(dev.release_physical(h) == Status::ok);
  CHECK(dev.unreserve(va, 4 * g) == Status::ok);
}
