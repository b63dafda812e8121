// Test harness: a DeviceAllocator on a FakeDevice, with the invariant checker run after every
// operation the tests perform through it.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>

#include "core/device_allocator.h"
#include "device/fake_device.h"
#include "util/units.h"

namespace cudalloc::test {

using device::CallKind;
using device::FakeDevice;

inline FakeDevice::Options fake_options(std::size_t capacity = 1 * GiB) {
  FakeDevice::Options o;
  o.capacity = capacity;
  return o;
}

// Settings for plain segments (no virtual memory), for tests of segment policy.
inline Settings plain_settings(Settings s = {}) {
  s.vmm = false;
  return s;
}

struct Harness {
  explicit Harness(Settings settings = {}, FakeDevice::Options options = fake_options())
      : fake(options), alloc(std::make_unique<DeviceAllocator>(fake, 0, settings)) {}

  void check() {
    const std::string problem = alloc->validate();
    INFO(problem);
    REQUIRE(problem.empty());
  }
  void* get(std::size_t size, StreamHandle stream = 0) {
    void* p = nullptr;
    const Error err = alloc->allocate(size, stream, &p);
    INFO(last_error_message());
    REQUIRE(err == Error::ok);
    check();
    return p;
  }
  Error try_get(std::size_t size, StreamHandle stream, void** p) {
    const Error err = alloc->allocate(size, stream, p);
    check();
    return err;
  }
  void put(void* p) {
    const Error err = alloc->deallocate(p);
    INFO(last_error_message());
    REQUIRE(err == Error::ok);
    check();
  }
  Stats stats() const { return alloc->stats(); }

  FakeDevice fake;
  std::unique_ptr<DeviceAllocator> alloc;
};

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// A byte pattern that differs per position and per allocation (seed), and its check.
inline void fill_pattern(void* p, std::size_t n, unsigned seed) {
  auto* bytes = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
}

inline bool holds_pattern(const void* p, std::size_t n, unsigned seed) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i] != static_cast<unsigned char>(i * 31 + seed)) return false;
  }
  return true;
}

}  // namespace cudalloc::test
