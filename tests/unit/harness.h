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

// Settings whose page is the driver's granularity (2 MiB on the fake device), for tests that
// count pages, page maps or bytes in 2 MiB units; the default page is 8 MiB
// (Settings::page_size), which the other tests exercise.
inline Settings granular_pages(Settings s = {}) {
  s.page_size = 0;
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

// The page runs of every paged segment of `st` against the fake device's own mappings: they
// tile the segment in address order, no two neighbours agree, and each page of a run is
// mapped, and on the device or the host, as the run says. Returns the bytes of mapped runs.
inline std::size_t check_page_runs(const Harness& h, const DeviceState& st,
                                   std::size_t page = 2 * MiB) {
  std::size_t mapped = 0;
  for (const SegmentState& s : st.segments) {
    if (!s.paged) {
      CHECK(s.pages.empty());
      continue;
    }
    REQUIRE_FALSE(s.pages.empty());
    std::uintptr_t at = s.base;
    for (std::size_t i = 0; i < s.pages.size(); ++i) {
      const PageRun& run = s.pages[i];
      REQUIRE(run.addr == at);
      if (i > 0) CHECK((run.mapped != s.pages[i - 1].mapped || run.host != s.pages[i - 1].host));
      for (std::uintptr_t va = run.addr; va < run.addr + run.size; va += page) {
        device::Location where = device::Location::device;
        CHECK(h.fake.location_of(va, &where) == run.mapped);
        if (run.mapped) CHECK((where == device::Location::host) == run.host);
      }
      mapped += run.mapped ? run.size : 0;
      at += run.size;
    }
    CHECK(at == s.base + s.size);
  }
  return mapped;
}

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
