// Fixtures for unit tests of the core's components on a FakeDevice, built directly (without a
// DeviceAllocator): each test constructs only the collaborators the component needs.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/budget.h"
#include "core/deferred_frees.h"
#include "core/ledger.h"
#include "core/migrator.h"
#include "core/page_mapper.h"
#include "core/physical_pages.h"
#include "core/staging.h"
#include "core/stream_pool.h"
#include "core/stream_sync.h"
#include "device/fake_device.h"
#include "util/units.h"

namespace cudalloc::test {

using device::CallKind;
using device::FakeDevice;
using device::Location;
using device::Status;

inline FakeDevice::Options small_device(std::size_t capacity = 64 * MiB) {
  FakeDevice::Options o;
  o.capacity = capacity;
  return o;
}

// A fake device whose streams run only when told (enqueue_work / complete_work).
inline FakeDevice::Options manual_device(std::size_t capacity = 64 * MiB) {
  FakeDevice::Options o = small_device(capacity);
  o.manual_streams = true;
  return o;
}

// Settings with a reserve cap (0: none) and the idle-page slack.
inline Settings with_limit(std::size_t limit, double page_slack = Settings{}.page_slack) {
  Settings s;
  s.limit = limit;
  s.page_slack = page_slack;
  return s;
}

// How many waits the fake device logged with `waiter` waiting on `on`.
inline int waits_between(const FakeDevice& fake, StreamHandle waiter, StreamHandle on) {
  const auto all = fake.waits();
  return static_cast<int>(std::count_if(all.begin(), all.end(), [&](const auto& w) {
    return w.waiter == waiter && w.on == on;
  }));
}

// A stream's pool with one (metadata-only) segment and a block in it, so that an Owner can
// name the block and its stream: what DeferredFrees sees of an allocation.
struct FakeAllocation {
  explicit FakeAllocation(StreamHandle stream, std::uintptr_t addr = 0x10000, std::size_t size = 4096) {
    pool.stream = stream;
    segment.pool = &pool;
    segment.base = addr;
    segment.size = size;
    block.addr = addr;
    block.size = size;
    block.requested = size;
    block.segment = &segment;
    block.state = Block::State::allocated;
    entry.key = addr;
    entry.owner = Owner::of(&block);
    entry.requested = size;
  }
  StreamPool pool;
  Segment segment;
  Block block;
  LiveEntry entry;
};

// Every object of one device's paged memory, as DeviceAllocator wires them, on a FakeDevice
// of `capacity` bytes with 2 MiB pages. Segments are made by reserve_range + init_pages.
struct PagedParts {
  explicit PagedParts(Settings s = {}, FakeDevice::Options options = small_device())
      : fake(options),
        settings(s),
        page(fake.granularity(0)),
        budget(settings, options.capacity),
        ledger(settings.trace),
        sync(fake, 0),
        pools(1),
        staging(fake, 0, page),
        physical(fake, 0, page, settings, budget, ledger, staging),
        mapper(fake, 0, page, budget, physical, sync, staging, ledger, pools),
        migrator(fake, 0, settings, budget, physical, mapper, staging, sync, ledger, pools) {}
  ~PagedParts() {
    for (auto& seg : segments) mapper.drop(*seg);
    staging.forget_strays();
    physical.drop_all();
    staging.drop();
  }

  // A paged segment of `stream`'s pool, holding at least `size` bytes.
  Segment& segment(StreamHandle stream = 0, std::size_t size = 0) {
    StreamPool& pool = pools.get(stream);
    auto seg = std::make_unique<Segment>();
    std::uintptr_t va = 0;
    std::size_t bytes = 0;
    REQUIRE(mapper.reserve_range(pool, std::max(size, page), &va, &bytes) == Error::ok);
    seg->base = va;
    seg->size = bytes;
    seg->pool = &pool;
    mapper.init_pages(*seg);
    pool.segments.push_back(seg.get());
    segments.push_back(std::move(seg));
    return *segments.back();
  }
  std::uintptr_t at(const Segment& seg, std::size_t page_index) const {
    return seg.base + page_index * page;
  }
  std::int64_t reserved() const { return ledger.stats().reserved_bytes.current; }
  std::int64_t maps() const { return ledger.stats().page_maps.current; }
  // Tells the ledger that `bytes` were allocated at once, then freed: the components allocate
  // nothing themselves, and chronic growth is bounded by that peak.
  void peak_allocated(std::size_t bytes) {
    ledger.handed_out(1, bytes, bytes, 0);
    ledger.free_requested(1, bytes, bytes, 0);
    ledger.free_completed(1, bytes, 0);
  }

  FakeDevice fake;
  Settings settings;
  const std::size_t page;
  Budget budget;
  Ledger ledger;
  StreamSync sync;
  StreamPools pools;
  Staging staging;
  PhysicalPages physical;
  PageMapper mapper;
  Migrator migrator;
  std::vector<std::unique_ptr<Segment>> segments;
};

}  // namespace cudalloc::test
