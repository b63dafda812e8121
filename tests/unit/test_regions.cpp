// Regions (sleep and wake) on the fake device: routing by tag, pause with and without the
// bytes, resume at the same addresses, what a paused region refuses, host_limit, waiting only
// for the region's streams, held pages under freed blocks, release, and faults in the middle
// of either operation. The harness checks every invariant after each operation.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/captures.h"
#include "core/region_tags.h"
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;
using device::Location;

namespace {

constexpr StreamHandle S = 0x71;
constexpr StreamHandle T = 0x72;
constexpr std::size_t kPage = 2 * MiB;

RegionId region(const char* tag) {
  RegionId id = kNoRegion;
  REQUIRE(RegionTags::intern(tag, &id) == Error::ok);
  return id;
}

// Enters a region for the scope of one test block.
struct InRegion {
  explicit InRegion(RegionId id) { REQUIRE(RegionTags::begin(id) == Error::ok); }
  ~InRegion() { RegionTags::end(); }
};

bool all_zero(const void* p, std::size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

// Whether every page under [p, p + n) is mapped on `where` (false also when one is unmapped).
bool lives_on(Harness& h, const void* p, std::size_t n, Location where) {
  const std::uintptr_t first = addr(p) / kPage * kPage;
  for (std::uintptr_t va = first; va < addr(p) + n; va += kPage) {
    Location at = Location::device;
    if (!h.fake.location_of(va, &at) || at != where) return false;
  }
  return true;
}

bool unmapped(Harness& h, const void* p) {
  Location at = Location::device;
  return !h.fake.location_of(addr(p) / kPage * kPage, &at);
}

struct Buffer {
  void* ptr;
  std::size_t size;
  unsigned seed;
};

std::vector<Buffer> fill_region(Harness& h, RegionId id, const std::vector<std::size_t>& sizes) {
  InRegion in(id);
  std::vector<Buffer> out;
  unsigned seed = 1;
  for (std::size_t size : sizes) {
    void* p = h.get(size, S);
    fill_pattern(p, size, seed);
    out.push_back({p, size, seed++});
  }
  return out;
}

bool all_hold(const std::vector<Buffer>& buffers) {
  for (const Buffer& b : buffers) {
    if (!holds_pattern(b.ptr, b.size, b.seed)) return false;
  }
  return true;
}

Error pause(Harness& h, RegionId id, bool keep, bool streams_known = true) {
  const Error err = h.alloc->pause_region(id, keep, streams_known);
  h.check();
  return err;
}

Error resume(Harness& h, RegionId id) {
  const Error err = h.alloc->resume_region(id);
  h.check();
  return err;
}

struct Residency {
  std::size_t device = 0, host = 0;
};

Residency residency(Harness& h, RegionId id) {
  Residency r;
  h.alloc->region_residency(id, &r.device, &r.host);
  return r;
}

std::int64_t reserved(Harness& h) { return h.stats().reserved_bytes.current; }

// GPU-side waits of stream `waiter` on stream `on` so far.
std::size_t waits_of(Harness& h, StreamHandle waiter, StreamHandle on) {
  const auto all = h.fake.waits();
  return static_cast<std::size_t>(std::count_if(all.begin(), all.end(), [&](const auto& w) {
    return w.waiter == waiter && w.on == on;
  }));
}

}  // namespace

TEST_CASE("allocations made inside a region go to its pool, outside it to the shared pools",
          "[regions]") {
  Harness h;
  const RegionId w = region("test-weights-routing");
  void* outside = h.get(3 * MiB, S);
  const auto in = fill_region(h, w, {3 * MiB, 64 * KiB});
  const DeviceState st = h.alloc->state();
  std::size_t tagged = 0;
  for (const SegmentState& seg : st.segments) {
    const bool has_outside = addr(outside) >= seg.base && addr(outside) < seg.base + seg.size;
    if (has_outside) CHECK(seg.region.empty());
    if (seg.region == "test-weights-routing") {
      ++tagged;
      CHECK(seg.private_pool != 0);
    }
  }
  CHECK(tagged >= 1);
  REQUIRE(st.regions.size() == 1);
  CHECK(st.regions[0].tag == "test-weights-routing");
  CHECK_FALSE(st.regions[0].paused);
  CHECK(residency(h, w).device >= 3 * MiB + 64 * KiB);
  CHECK(residency(h, w).host == 0);
  for (const Buffer& b : in) h.put(b.ptr);
  h.put(outside);
}

TEST_CASE("regions nest, and a private pool created inside one belongs to it", "[regions]") {
  Harness h;
  const RegionId a = region("test-nest-a");
  const RegionId b = region("test-nest-b");
  void *pa = nullptr, *pb = nullptr, *pg = nullptr;
  {
    InRegion in_a(a);
    {
      InRegion in_b(b);
      pb = h.get(MiB, S);
    }
    pa = h.get(MiB, S);
    REQUIRE(h.alloc->create_private_pool(77) == Error::ok);  // a graph's pool, under a
  }
  REQUIRE(h.alloc->allocate(MiB, S, &pg, 77) == Error::ok);
  fill_pattern(pa, MiB, 1);
  fill_pattern(pb, MiB, 2);
  fill_pattern(pg, MiB, 3);
  REQUIRE(pause(h, a, false) == Error::ok);
  CHECK(unmapped(h, pa));
  CHECK(unmapped(h, pg));  // the graph pool sleeps with its region
  CHECK(holds_pattern(pb, MiB, 2));  // the inner region is another region
  REQUIRE(resume(h, a) == Error::ok);
  CHECK(all_zero(pa, MiB));
  CHECK(all_zero(pg, MiB));
  CHECK(RegionTags::current() == kNoRegion);
  CHECK(RegionTags::end() == Error::invalid_value);  // nothing begun: a clear error
  h.put(pa);
  h.put(pb);
  h.put(pg);
  REQUIRE(h.alloc->release_private_pool(77) == Error::ok);
}

// RegionTags::current skips the thread-local stack while no thread is in a region: a thread
// inside one must still see it, and every other thread must not.
TEST_CASE("the current region is per thread, also while another thread is inside one",
          "[regions]") {
  const RegionId a = region("test-threads-a");
  const RegionId b = region("test-threads-b");
  CHECK(RegionTags::current() == kNoRegion);
  // The thread only records (Catch's assertions are for the test's own thread).
  RegionId seen_before = a, seen_inside = kNoRegion, seen_after = a;
  Error began = Error::internal, ended = Error::internal;
  {
    InRegion in_a(a);
    std::thread other([&] {
      seen_before = RegionTags::current();
      began = RegionTags::begin(b);
      seen_inside = RegionTags::current();
      ended = RegionTags::end();
      seen_after = RegionTags::current();
    });
    other.join();
    CHECK(RegionTags::current() == a);
  }
  CHECK(seen_before == kNoRegion);  // another thread's region is not its own
  CHECK(began == Error::ok);
  CHECK(seen_inside == b);
  CHECK(ended == Error::ok);
  CHECK(seen_after == kNoRegion);
  CHECK(RegionTags::current() == kNoRegion);
  // A failed begin (past the depth) and a failed end leave the count as it was.
  CHECK(RegionTags::end() == Error::invalid_value);
  for (int i = 0; i < RegionTags::kMaxDepth; ++i) REQUIRE(RegionTags::begin(a) == Error::ok);
  CHECK(RegionTags::begin(b) == Error::invalid_value);
  CHECK(RegionTags::current() == a);
  for (int i = 0; i < RegionTags::kMaxDepth; ++i) REQUIRE(RegionTags::end() == Error::ok);
  CHECK(RegionTags::current() == kNoRegion);
}

TEST_CASE("pause with keep moves the region to host memory at the same addresses, and resume "
          "brings it back", "[regions]") {
  Harness h;
  const RegionId w = region("test-keep");
  void* other = h.get(5 * MiB, T);
  fill_pattern(other, 5 * MiB, 9);
  const auto bufs = fill_region(h, w, {40 * MiB, 3 * MiB, 100 * KiB, 700});
  const std::size_t device_before = h.fake.used_bytes(0);
  const std::int64_t reserved_before = reserved(h);
  const Residency before = residency(h, w);
  REQUIRE(before.host == 0);

  std::size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(h.alloc->memory_info(&free_before, &total) == Error::ok);
  REQUIRE(pause(h, w, true) == Error::ok);
  REQUIRE(h.alloc->memory_info(&free_after, &total) == Error::ok);
  CHECK(free_after - free_before == before.device);
  // The device memory went back to the driver: as much as the region held.
  CHECK(device_before - h.fake.used_bytes(0) == before.device);
  CHECK(reserved_before - reserved(h) == static_cast<std::int64_t>(before.device));
  CHECK(residency(h, w).host == before.device);
  CHECK(residency(h, w).device == 0);
  for (const Buffer& b : bufs) CHECK(lives_on(h, b.ptr, b.size, Location::host));
  // Still readable and writable at the same addresses (kernels reach host pages too).
  CHECK(all_hold(bufs));
  fill_pattern(bufs[1].ptr, bufs[1].size, 44);
  CHECK(holds_pattern(other, 5 * MiB, 9));
  const DeviceState st = h.alloc->state();
  REQUIRE(st.regions.size() == 1);
  CHECK(st.regions[0].paused);
  CHECK(st.regions[0].kept);
  CHECK(st.regions[0].host_bytes == before.device);

  REQUIRE(resume(h, w) == Error::ok);
  for (const Buffer& b : bufs) CHECK(lives_on(h, b.ptr, b.size, Location::device));
  CHECK(holds_pattern(bufs[0].ptr, bufs[0].size, bufs[0].seed));
  CHECK(holds_pattern(bufs[1].ptr, bufs[1].size, 44));
  CHECK(holds_pattern(bufs[2].ptr, bufs[2].size, bufs[2].seed));
  CHECK(h.fake.used_bytes(0) == device_before);
  CHECK(residency(h, w).host == 0);
  CHECK_FALSE(h.alloc->state().regions[0].paused);
  // The host pages stay cached for the next pause, which pins nothing new.
  const std::uint64_t host_pages = h.fake.calls(CallKind::create_physical);
  REQUIRE(h.alloc->memory_info(&free_before, &total) == Error::ok);
  REQUIRE(pause(h, w, true) == Error::ok);
  CHECK(h.fake.calls(CallKind::create_physical) == host_pages);
  REQUIRE(h.alloc->memory_info(&free_after, &total) == Error::ok);
  CHECK(free_after - free_before == before.device);  // idle host pages are not device cache
  REQUIRE(resume(h, w) == Error::ok);
  // New device memory, in fewer allocations than pages (one per piece: the next test).
  CHECK(h.fake.calls(CallKind::create_physical) > host_pages);
  CHECK(h.fake.calls(CallKind::create_physical) < host_pages + before.device / kPage);
  REQUIRE(h.alloc->empty_cache() == Error::ok);  // gives them back
  h.check();
  CHECK(h.stats().host_reserved_bytes.current == 0);
  CHECK(h.fake.host_used_bytes() == 0);
  for (const Buffer& b : bufs) h.put(b.ptr);
  h.put(other);
}

TEST_CASE("pause without keep drops the pages: unmapped while paused, zero after resume",
          "[regions]") {
  Harness h;
  const RegionId kv = region("test-drop");
  const auto bufs = fill_region(h, kv, {12 * MiB, 300 * KiB});
  h.put(h.get(8 * MiB, S));  // shared cache, which memory_info counts as free throughout
  const Residency before = residency(h, kv);
  const std::size_t device_before = h.fake.used_bytes(0);
  std::size_t free_before = 0, free_after = 0, device_total = 0;
  REQUIRE(h.alloc->memory_info(&free_before, &device_total) == Error::ok);
  REQUIRE(pause(h, kv, false) == Error::ok);
  CHECK(device_before - h.fake.used_bytes(0) == before.device);
  // What a program asking cudaMemGetInfo sees: the region's size more (dropped pages are
  // not cache that could serve it).
  REQUIRE(h.alloc->memory_info(&free_after, &device_total) == Error::ok);
  CHECK(free_after - free_before == before.device);
  CHECK(h.stats().dropped_bytes.current == static_cast<std::int64_t>(before.device));
  CHECK(h.fake.host_used_bytes() == 0);
  CHECK(residency(h, kv).device == 0);
  CHECK(residency(h, kv).host == 0);
  for (const Buffer& b : bufs) CHECK(unmapped(h, b.ptr));  // a touch faults, never reads junk
  const DeviceState st = h.alloc->state();
  std::size_t dropped = 0, total = 0;
  for (const SegmentState& seg : st.segments) {
    dropped += seg.dropped_bytes;
    total += seg.size;
    if (seg.region == "test-drop") CHECK(seg.paused);
  }
  CHECK(dropped == before.device);
  // What the segments show, less what is dropped, is what is reserved.
  CHECK(total - dropped == static_cast<std::size_t>(reserved(h) + h.stats().host_reserved_bytes.current));
  REQUIRE(resume(h, kv) == Error::ok);
  for (const Buffer& b : bufs) {
    CHECK(lives_on(h, b.ptr, b.size, Location::device));
    CHECK(all_zero(b.ptr, b.size));  // the cached pages it took held other bytes
  }
  CHECK(residency(h, kv).device == before.device);
  CHECK(h.fake.used_bytes(0) <= device_before);  // idle cached pages serve first
  CHECK(h.stats().dropped_bytes.current == 0);
  for (const Buffer& b : bufs) h.put(b.ptr);
}

TEST_CASE("a region's segments list their pages: dropped ones unmapped, kept ones on the host",
          "[regions][snapshot]") {
  Harness h;
  const RegionId r = region("test-page-runs");
  const auto bufs = fill_region(h, r, {6 * MiB, 300 * KiB});
  // Each run's size per state, over the region's segments.
  auto runs_of = [&](bool mapped, bool host) {
    const DeviceState st = h.alloc->state();
    check_page_runs(h, st);
    std::size_t bytes = 0;
    for (const SegmentState& seg : st.segments) {
      for (const PageRun& run : seg.pages) {
        bytes += seg.region == "test-page-runs" && run.mapped == mapped && run.host == host
                     ? run.size : 0;
      }
    }
    return bytes;
  };
  const std::size_t held = runs_of(true, false);
  CHECK(held == residency(h, r).device);
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(runs_of(true, true) == held);
  CHECK(runs_of(true, true) == residency(h, r).host);
  REQUIRE(resume(h, r) == Error::ok);
  REQUIRE(pause(h, r, false) == Error::ok);
  CHECK(runs_of(false, false) == held);  // every page dropped: unmapped
  CHECK(runs_of(true, false) + runs_of(true, true) == 0);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(runs_of(true, false) == held);
  for (const Buffer& b : bufs) h.put(b.ptr);
}

TEST_CASE("a paused region refuses new allocations and accepts frees", "[regions]") {
  Harness h;
  const RegionId r = region("test-refuse");
  auto bufs = fill_region(h, r, {4 * MiB, 4 * MiB});
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(pause(h, r, true) == Error::invalid_value);  // paused already
  {
    InRegion in(r);
    void* p = nullptr;
    CHECK(h.try_get(MiB, S, &p) == Error::invalid_value);
    CHECK(p == nullptr);
    CHECK(std::string(last_error_message()).find("paused") != std::string::npos);
  }
  CHECK(h.alloc->offload(bufs[0].ptr, S) == Error::invalid_value);
  CHECK(h.alloc->prefetch(bufs[0].ptr, S) == Error::invalid_value);
  CHECK(h.alloc->promote() == Error::ok);
  CHECK(lives_on(h, bufs[0].ptr, bufs[0].size, Location::host));  // promote left it alone
  h.put(bufs[0].ptr);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(resume(h, r) == Error::ok);  // active already: nothing to do
  CHECK(holds_pattern(bufs[1].ptr, bufs[1].size, bufs[1].seed));
  {
    InRegion in(r);
    void* p = h.get(MiB, S);
    h.put(p);
  }
  h.put(bufs[1].ptr);
}

TEST_CASE("pause with keep past host_limit fails and changes nothing", "[regions]") {
  Settings s;
  s.host_limit = 8 * MiB;
  Harness h(s);
  const RegionId r = region("test-host-limit");
  const auto bufs = fill_region(h, r, {20 * MiB});
  const std::size_t device_before = h.fake.used_bytes(0);
  CHECK(pause(h, r, true) == Error::out_of_memory);
  CHECK(std::string(last_error_message()).find("host_limit") != std::string::npos);
  CHECK(h.fake.used_bytes(0) == device_before);
  CHECK(h.fake.host_used_bytes() == 0);
  CHECK(lives_on(h, bufs[0].ptr, bufs[0].size, Location::device));
  CHECK_FALSE(h.alloc->state().regions[0].paused);
  CHECK(all_hold(bufs));
  REQUIRE(pause(h, r, false) == Error::ok);  // dropping needs no host memory
  REQUIRE(resume(h, r) == Error::ok);
  h.put(bufs[0].ptr);
}

TEST_CASE("pause waits for the region's streams only when they are known", "[regions]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-streams");
  const auto bufs = fill_region(h, r, {6 * MiB});
  void* other = h.get(6 * MiB, T);
  h.fake.enqueue_work(0, S);  // a kernel over the region
  h.fake.enqueue_work(0, T);  // unrelated work
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(h.fake.stream_idle(0, S));
  CHECK_FALSE(h.fake.stream_idle(0, T));  // no device-wide synchronization
  REQUIRE(resume(h, r) == Error::ok);
  h.fake.enqueue_work(0, T);
  REQUIRE(pause(h, r, false, /*streams_known=*/false) == Error::ok);
  CHECK(h.fake.stream_idle(0, T));  // streams unknown (LD_PRELOAD): the whole device
  REQUIRE(resume(h, r) == Error::ok);
  h.fake.complete_all();
  h.put(bufs[0].ptr);
  h.put(other);
}

TEST_CASE("pause waits for streams a region's allocation was recorded on", "[regions]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-recorded");
  const auto bufs = fill_region(h, r, {6 * MiB});
  REQUIRE(h.alloc->record_stream(bufs[0].ptr, T) == Error::ok);
  h.fake.enqueue_work(0, T);
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(h.fake.stream_idle(0, T));
  REQUIRE(resume(h, r) == Error::ok);
  h.fake.complete_all();
  h.put(bufs[0].ptr);
}

TEST_CASE("a region's freed blocks keep their pages mapped (graph replays find them)",
          "[regions]") {
  Harness h(granular_pages());  // counts 2 MiB pages
  const RegionId r = region("test-held");
  auto bufs = fill_region(h, r, {8 * MiB, 8 * MiB});
  const std::uint64_t maps = h.fake.calls(CallKind::map);
  h.put(bufs[0].ptr);
  CHECK(lives_on(h, bufs[0].ptr, bufs[0].size, Location::device));
  // Memory elsewhere does not take the freed region's pages.
  void* outside = h.get(8 * MiB, S);
  CHECK(lives_on(h, bufs[0].ptr, bufs[0].size, Location::device));
  const bool apart =
      addr(outside) + 8 * MiB <= addr(bufs[0].ptr) || addr(outside) >= addr(bufs[0].ptr) + 8 * MiB;
  CHECK(apart);
  {
    InRegion in(r);
    void* again = h.get(8 * MiB, S);  // reuses the freed block: no mapping call
    CHECK(again == bufs[0].ptr);
    bufs[0].ptr = again;
  }
  CHECK(h.fake.calls(CallKind::map) == maps + 4);  // only `outside`'s pages
  h.put(outside);
  for (const Buffer& b : bufs) h.put(b.ptr);
  // empty_cache returns a region's wholly free memory.
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.fake.used_bytes(0) == 0);
  CHECK(residency(h, r).device == 0);
}

TEST_CASE("pausing a region this device never saw is a no-op; in plain mode it is refused",
          "[regions]") {
  Harness h;
  CHECK(pause(h, region("test-never-seen"), true) == Error::ok);
  Harness plain(plain_settings());
  const RegionId r = region("test-plain");
  const auto bufs = fill_region(plain, r, {4 * MiB});
  CHECK(plain.alloc->pause_region(r, true, true) == Error::not_supported);
  CHECK(std::string(last_error_message()).find("vmm") != std::string::npos);
  CHECK(all_hold(bufs));
  plain.put(bufs[0].ptr);
}

TEST_CASE("a fault in any driver call of pause or resume leaves every byte in place",
          "[regions][faults]") {
  const CallKind kinds[] = {CallKind::create_physical, CallKind::map, CallKind::set_access,
                            CallKind::unmap, CallKind::copy, CallKind::release_physical,
                            CallKind::event_record, CallKind::synchronize, CallKind::zero};
  for (const CallKind kind : kinds) {
    for (const int nth : {1, 2, 3, 4, 6, 8, 12}) {
      for (const bool keep : {true, false}) {
        for (const bool in_resume : {false, true}) {
          INFO(device::call_kind_name(kind) << " #" << nth << (keep ? " keep" : " drop")
                                            << (in_resume ? " in resume" : " in pause"));
          Harness h;
          const RegionId r = region("test-faults");
          const auto bufs = fill_region(h, r, {9 * MiB, 200 * KiB});
          if (in_resume) REQUIRE(pause(h, r, keep) == Error::ok);
          h.fake.fail_call(kind, nth, device::Status::device_error);
          const Error err = in_resume ? resume(h, r) : pause(h, r, keep);
          h.fake.clear_faults();
          // Kept bytes are never lost: readable now, on whichever backing each page has.
          const bool bytes_kept = keep || (!in_resume && err != Error::ok &&
                                           !h.alloc->state().regions[0].paused);
          if (bytes_kept) CHECK(all_hold(bufs));
          // Whatever happened, both calls work afterwards and end in a consistent state.
          if (h.alloc->state().regions[0].paused) {
            REQUIRE(resume(h, r) == Error::ok);
          } else {
            REQUIRE(pause(h, r, keep) == Error::ok);
            REQUIRE(resume(h, r) == Error::ok);
          }
          if (keep) CHECK(all_hold(bufs));
          for (const Buffer& b : bufs) CHECK(lives_on(h, b.ptr, b.size, Location::device));
          for (const Buffer& b : bufs) h.put(b.ptr);
        }
      }
    }
  }
}

namespace {

// A word per 4 KiB: enough to tell every page's bytes apart, cheap for large regions.
void stamp(void* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t off = 0; off + 4 <= n; off += 4096) {
    const std::uint32_t v = seed * 2654435761u + static_cast<std::uint32_t>(off);
    std::memcpy(static_cast<char*>(p) + off, &v, 4);
  }
}

bool stamped(const void* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t off = 0; off + 4 <= n; off += 4096) {
    std::uint32_t v = 0;
    std::memcpy(&v, static_cast<const char*>(p) + off, 4);
    if (v != seed * 2654435761u + static_cast<std::uint32_t>(off)) return false;
  }
  return true;
}

// `n` bytes allocated on S in region `r`, stamped with `seed`.
void* stamped_in(Harness& h, RegionId r, std::size_t n, std::uint32_t seed,
                 StreamHandle stream = S) {
  void* p = nullptr;
  {
    InRegion in(r);
    p = h.get(n, stream);
  }
  stamp(p, n, seed);
  return p;
}

}  // namespace

TEST_CASE("a large region moves in overlapping batches, and a fault in any batch keeps every "
          "byte", "[regions][faults]") {
  constexpr std::size_t kBig = 150 * MiB;  // 75 pages: three batches in the pipeline
  {
    Harness h(granular_pages());  // counts 2 MiB pages
    const RegionId r = region("test-big");
    void* p = stamped_in(h, r, kBig, 5);
    const std::size_t device_before = h.fake.used_bytes(0);
    REQUIRE(pause(h, r, true) == Error::ok);
    CHECK(lives_on(h, p, kBig, Location::host));
    CHECK(device_before - h.fake.used_bytes(0) >= kBig);
    CHECK(stamped(p, kBig, 5));
    REQUIRE(resume(h, r) == Error::ok);
    CHECK(lives_on(h, p, kBig, Location::device));
    CHECK(stamped(p, kBig, 5));
    CHECK(h.stats().page_offloads.total >= static_cast<std::int64_t>(kBig / kPage));
    CHECK(h.stats().page_prefetches.total >= static_cast<std::int64_t>(kBig / kPage));
    h.put(p);
  }
  const CallKind kinds[] = {CallKind::create_physical, CallKind::map, CallKind::unmap,
                            CallKind::set_access, CallKind::copy, CallKind::event_record,
                            CallKind::event_synchronize};
  for (const CallKind kind : kinds) {
    for (const int nth : {1, 33, 40, 70, 90, 140}) {
      for (const bool in_resume : {false, true}) {
        INFO(device::call_kind_name(kind) << " #" << nth << (in_resume ? " in resume" : " in pause"));
        Harness h;
        const RegionId r = region("test-big-faults");
        void* p = nullptr;
        void* q = nullptr;  // a second segment: its copies run while the first is remapped
        {
          InRegion in(r);
          p = h.get(kBig, S);
          q = h.get(64 * MiB, S);
        }
        stamp(p, kBig, 6);
        stamp(q, 64 * MiB, 7);
        if (in_resume) REQUIRE(pause(h, r, true) == Error::ok);
        h.fake.fail_call(kind, nth, device::Status::device_error);
        const Error err = in_resume ? resume(h, r) : pause(h, r, true);
        h.fake.clear_faults();
        (void)err;
        CHECK(stamped(p, kBig, 6));  // on whichever backing each page has
        CHECK(stamped(q, 64 * MiB, 7));
        if (!h.alloc->state().regions[0].paused) REQUIRE(pause(h, r, true) == Error::ok);
        REQUIRE(resume(h, r) == Error::ok);
        CHECK(lives_on(h, p, kBig, Location::device));
        CHECK(lives_on(h, q, 64 * MiB, Location::device));
        CHECK(stamped(p, kBig, 6));
        CHECK(stamped(q, 64 * MiB, 7));
        h.put(p);
        h.put(q);
      }
    }
  }
}

namespace {

// Driver calls made by `op`, by kind.
struct CallCounts {
  std::uint64_t create = 0, map = 0, access = 0, unmap = 0, release = 0;
};

template <typename Op>
CallCounts calls_of(Harness& h, Op op) {
  auto now = [&] {
    return CallCounts{h.fake.calls(CallKind::create_physical), h.fake.calls(CallKind::map),
                      h.fake.calls(CallKind::set_access), h.fake.calls(CallKind::unmap),
                      h.fake.calls(CallKind::release_physical)};
  };
  const CallCounts before = now();
  op();
  const CallCounts after = now();
  return {after.create - before.create, after.map - before.map, after.access - before.access,
          after.unmap - before.unmap, after.release - before.release};
}

}  // namespace

TEST_CASE("pause and resume move a region in chunks: one physical allocation per piece of up to "
          "32 pages, reused by the next pause", "[regions]") {
  constexpr std::size_t kBig = 150 * MiB;  // one segment of 75 pages: pieces of 32, 32 and 11
  constexpr std::uint64_t kPieces = 3;
  Harness h(granular_pages());  // counts 2 MiB pages
  const RegionId r = region("test-chunks");
  // The region's memory is held in device chunks from the start, one per piece.
  void* p = nullptr;
  CallCounts c = calls_of(h, [&] { p = stamped_in(h, r, kBig, 3); });
  CHECK(c.create == kPieces);
  CHECK(c.map == kPieces);
  CHECK(c.access == kPieces);
  const std::size_t device_before = h.fake.used_bytes(0);
  const std::int64_t reserved_before = reserved(h);
  // The first pause: device chunks to new host chunks, each mapped at its home and at the
  // region, with one grant each; one unmap and one release per device chunk.
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.create == kPieces);
  CHECK(c.map == 2 * kPieces);
  CHECK(c.access == 2 * kPieces);
  CHECK(c.unmap == kPieces);
  CHECK(c.release == kPieces);
  CHECK(lives_on(h, p, kBig, Location::host));
  CHECK(stamped(p, kBig, 3));
  CHECK(device_before - h.fake.used_bytes(0) == kBig);
  CHECK(h.stats().host_reserved_bytes.current == static_cast<std::int64_t>(kBig));
  // Resume: a device chunk per piece; the host chunks stay cached.
  c = calls_of(h, [&] { REQUIRE(resume(h, r) == Error::ok); });
  CHECK(c.create == kPieces);
  CHECK(c.map == kPieces);
  CHECK(c.access == kPieces);
  CHECK(c.unmap == kPieces);
  CHECK(c.release == 0);
  CHECK(lives_on(h, p, kBig, Location::device));
  CHECK(stamped(p, kBig, 3));
  CHECK(reserved(h) == reserved_before);
  // Later pauses pin nothing: the cached host chunks fit the same pieces.
  stamp(p, kBig, 4);
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.create == 0);
  CHECK(c.map == kPieces);
  CHECK(c.access == kPieces);
  CHECK(c.unmap == kPieces);
  CHECK(c.release == kPieces);  // the device chunks
  CHECK(stamped(p, kBig, 4));
  CHECK(device_before - h.fake.used_bytes(0) == kBig);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 4));
  // A drop evicts each device chunk whole; resume maps zeroed single pages.
  c = calls_of(h, [&] { REQUIRE(pause(h, r, false) == Error::ok); });
  CHECK(c.unmap == kPieces);
  CHECK(c.release == kPieces);
  CHECK(unmapped(h, p));
  CHECK(device_before - h.fake.used_bytes(0) == kBig);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(all_zero(p, kBig));
  // Chunks cannot move alone.
  REQUIRE(pause(h, r, true) == Error::ok);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(h.alloc->offload(p, S) == Error::not_supported);
  h.check();
  // The region's memory goes back when it is freed; empty_cache returns the host chunks.
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().host_reserved_bytes.current == 0);
  CHECK(h.fake.host_used_bytes() == 0);
}

TEST_CASE("with larger pages a chunk stays about 64 MiB: fewer pages per piece, not larger "
          "pieces", "[regions][page_size]") {
  // 8 MiB pages: a chunk is 8 pages. A 200 MiB region (25 pages) takes pieces of 8, 8, 8, 1:
  // three chunks and one single page.
  Settings settings;
  settings.page_size = 8 * MiB;
  Harness h(settings);
  constexpr std::size_t kBig = 200 * MiB;
  const RegionId r = region("test-chunks-8m");
  void* p = nullptr;
  CallCounts c = calls_of(h, [&] { p = stamped_in(h, r, kBig, 6); });
  CHECK(c.create == 4);
  CHECK(c.map == 4);
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.create == 4);  // a host chunk per piece, a single host page for the last
  CHECK(c.release == 4);
  CHECK(lives_on(h, p, kBig, Location::host));
  CHECK(stamped(p, kBig, 6));
  c = calls_of(h, [&] { REQUIRE(resume(h, r) == Error::ok); });
  CHECK(c.create == 4);
  CHECK(c.map == 4);
  CHECK(lives_on(h, p, kBig, Location::device));
  CHECK(stamped(p, kBig, 6));
  h.check();
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
}

TEST_CASE("a fault in any driver call of a move between chunks keeps every byte, and the next "
          "pause and resume work", "[regions][faults]") {
  // After one pause and resume the region lies in device chunks and its host chunks are
  // cached: the moves under test go chunk to chunk (and a drop evicts chunks).
  constexpr std::size_t kBig = 70 * MiB;  // 35 pages: pieces of 32 and 3
  constexpr std::size_t kSmall = 20 * MiB;
  enum class Op { keep, resume, drop };
  const CallKind kinds[] = {CallKind::create_physical, CallKind::map, CallKind::unmap,
                            CallKind::set_access, CallKind::copy, CallKind::release_physical,
                            CallKind::event_record, CallKind::zero};
  for (const CallKind kind : kinds) {
    for (const int nth : {1, 2, 3, 5, 8}) {
      for (const Op op : {Op::keep, Op::resume, Op::drop}) {
        INFO(device::call_kind_name(kind) << " #" << nth << " in "
             << (op == Op::keep ? "pause (keep)" : op == Op::resume ? "resume" : "pause (drop)"));
        Harness h;
        const RegionId r = region("test-chunk-faults");
        void* p = nullptr;
        void* q = nullptr;
        {
          InRegion in(r);
          p = h.get(kBig, S);
          q = h.get(kSmall, S);
        }
        stamp(p, kBig, 8);
        stamp(q, kSmall, 9);
        REQUIRE(pause(h, r, true) == Error::ok);
        REQUIRE(resume(h, r) == Error::ok);
        if (op == Op::resume) REQUIRE(pause(h, r, true) == Error::ok);
        h.fake.fail_call(kind, nth, device::Status::device_error);
        const Error err = op == Op::resume ? resume(h, r) : pause(h, r, op == Op::keep);
        h.fake.clear_faults();
        const bool paused = h.alloc->state().regions[0].paused;
        // Kept bytes are never lost, on whichever backing each page has; a failed drop that
        // left the region active kept them too.
        if (op != Op::drop || (err != Error::ok && !paused)) {
          CHECK(stamped(p, kBig, 8));
          CHECK(stamped(q, kSmall, 9));
        }
        const bool dropped = op == Op::drop && paused;
        if (!paused) REQUIRE(pause(h, r, true) == Error::ok);
        REQUIRE(resume(h, r) == Error::ok);
        CHECK(lives_on(h, p, kBig, Location::device));
        CHECK(lives_on(h, q, kSmall, Location::device));
        if (!dropped) {
          CHECK(stamped(p, kBig, 8));
          CHECK(stamped(q, kSmall, 9));
        }
        // Once more through chunks, then everything goes back.
        stamp(p, kBig, 10);
        REQUIRE(pause(h, r, true) == Error::ok);
        REQUIRE(resume(h, r) == Error::ok);
        CHECK(stamped(p, kBig, 10));
        h.put(p);
        h.put(q);
        REQUIRE(h.alloc->empty_cache() == Error::ok);
        h.check();
        CHECK(h.fake.host_used_bytes() == 0);
      }
    }
  }
}

namespace {

Error prepare(Harness& h, RegionId id) {
  const Error err = h.alloc->prepare_pause(id);
  h.check();
  return err;
}

}  // namespace

TEST_CASE("prepare_pause pins a later pause's host memory ahead: that pause pins nothing",
          "[regions]") {
  constexpr std::size_t kBig = 150 * MiB;  // pieces of 32, 32 and 11 pages
  constexpr std::uint64_t kPieces = 3;
  Harness h;
  const RegionId r = region("test-prepare");
  void* p = stamped_in(h, r, kBig, 61);
  void* q = stamped_in(h, r, 1 * MiB, 62);  // a piece of one page: a single host page
  const std::size_t device_before = h.fake.used_bytes(0);
  CallCounts c = calls_of(h, [&] { REQUIRE(prepare(h, r) == Error::ok); });
  CHECK(c.create >= kPieces);
  const auto pinned = h.stats().host_reserved_bytes.current;
  CHECK(pinned >= static_cast<std::int64_t>(kBig + 1 * MiB));
  CHECK(h.fake.used_bytes(0) == device_before);  // nothing moved
  CHECK(lives_on(h, p, kBig, Location::device));
  CHECK(stamped(p, kBig, 61));
  // Prepared twice: the cached memory is found again, nothing more is pinned.
  c = calls_of(h, [&] { REQUIRE(prepare(h, r) == Error::ok); });
  CHECK(c.create == 0);
  CHECK(h.stats().host_reserved_bytes.current == pinned);
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.create == 0);
  CHECK(h.stats().host_reserved_bytes.current == pinned);
  CHECK(lives_on(h, p, kBig, Location::host));
  CHECK(stamped(p, kBig, 61));
  CHECK(stamped(q, 1 * MiB, 62));
  CHECK(prepare(h, r) == Error::invalid_value);  // paused
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 61));
  // empty_cache returns prepared memory that no pause used.
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().host_reserved_bytes.current == 0);
  REQUIRE(prepare(h, r) == Error::ok);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().host_reserved_bytes.current == 0);
  h.put(p);
  h.put(q);
}

TEST_CASE("prepare_pause past host_limit fails and pins nothing", "[regions]") {
  Settings s;
  s.host_limit = 8 * MiB;
  Harness h(s);
  const RegionId r = region("test-prepare-limit");
  void* p = stamped_in(h, r, 20 * MiB, 71);
  CHECK(prepare(h, r) == Error::out_of_memory);
  CHECK(std::string(last_error_message()).find("host_limit") != std::string::npos);
  CHECK(h.fake.host_used_bytes() == 0);
  CHECK(lives_on(h, p, 20 * MiB, Location::device));
  CHECK(stamped(p, 20 * MiB, 71));
  h.put(p);
}

TEST_CASE("prepare_pause that the driver refuses part way keeps what it pinned for the pause",
          "[regions][faults]") {
  Harness h;
  const RegionId r = region("test-prepare-fault");
  void* p = stamped_in(h, r, 150 * MiB, 72);  // pieces of 32, 32 and 11 pages
  // Host memory runs out after the first piece: that piece stays cached, the region is
  // untouched, and the pause works once there is memory again.
  h.fake.fail_call(CallKind::create_physical, 2, device::Status::out_of_memory, 1000);
  CHECK(prepare(h, r) == Error::out_of_memory);
  h.fake.clear_faults();
  CHECK(h.stats().host_reserved_bytes.current == static_cast<std::int64_t>(64 * MiB));
  CHECK(lives_on(h, p, 150 * MiB, Location::device));
  CHECK(stamped(p, 150 * MiB, 72));
  CallCounts c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.create == 2);  // the pieces the prepare did not get
  CHECK(stamped(p, 150 * MiB, 72));
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, 150 * MiB, 72));
  h.put(p);
}

TEST_CASE("a held segment takes single pages where no chunk can be had, and where cudalloc's "
          "cache holds the room, it gives way to chunks", "[regions]") {
  constexpr std::size_t kBig = 64 * MiB;  // one piece of 32 pages
  Harness h(granular_pages(), fake_options(160 * MiB));  // 2 MiB pages
  const RegionId r = region("test-hold-single");
  // The driver refuses the chunk: the segment is held in single pages, and moves as before.
  h.fake.fail_call(CallKind::create_physical, 1, device::Status::out_of_memory);
  void* p = nullptr;
  CallCounts c = calls_of(h, [&] { p = stamped_in(h, r, kBig, 81); });
  h.fake.clear_faults();
  CHECK(c.create == 1 + kBig / kPage);
  REQUIRE(pause(h, r, true) == Error::ok);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 81));
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  // Memory freed into cudalloc's cache as single pages fills the device: the next held
  // segment gives those pages back to the driver and takes a chunk in their room.
  void* ballast = h.get(150 * MiB, T);
  h.put(ballast);
  REQUIRE(h.fake.used_bytes(0) + kBig > 160 * MiB);
  c = calls_of(h, [&] { p = stamped_in(h, r, kBig, 82); });
  CHECK(c.release == kBig / kPage);
  CHECK(c.create == 2);  // refused for lack of room, then given in the room freed
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.release == 1);  // the chunk, whole
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 82));
  h.put(p);
  // While a graph is captured, idle pages are not given back for a chunk (that waits for
  // their work): the held segment takes them as they are.
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  ballast = h.get(150 * MiB, T);
  h.put(ballast);
  Captures::process().began(S);
  h.fake.set_capturing(0, S, true);
  c = calls_of(h, [&] { p = stamped_in(h, r, kBig, 83); });
  h.fake.set_capturing(0, S, false);
  Captures::process().ended(S);
  CHECK(c.release == 0);
  CHECK(h.fake.capture_violations() == 0);
  CHECK(stamped(p, kBig, 83));
  h.put(p);
}

TEST_CASE("a region's segment whose hold could not be released serves later requests with "
          "memory of its own, never a chunk's page alone", "[regions][faults]") {
  constexpr std::size_t kBig = 64 * MiB;  // one chunk of 32 pages
  Harness h(granular_pages());  // counts 2 MiB pages
  const RegionId r = region("test-hold-release-fails");
  void* p = stamped_in(h, r, kBig, 91);
  h.put(p);
  // empty_cache ends the hold; the chunk's unmaps fail (there and when the cache is
  // released): the segment stays, an ordinary paged one, with the chunk mapped and idle.
  h.fake.fail_call(CallKind::unmap, 1, device::Status::device_error, 1000);
  const std::uint64_t unmaps_before = h.fake.calls(CallKind::unmap);
  (void)h.alloc->empty_cache();
  h.fake.clear_faults();
  h.check();
  // The chunk's pages share one mapping: each pass tries its unmap once (ending the hold,
  // then releasing the cache), not once per page.
  CHECK(h.fake.calls(CallKind::unmap) - unmaps_before == 2);
  // The region's next request lands there: the chunk's mapping goes whole, and every page
  // gets memory of its own.
  void* q = nullptr;
  CallCounts c = calls_of(h, [&] { q = stamped_in(h, r, 16 * MiB, 92); });
  h.check();
  CHECK(c.unmap == 1);  // the chunk, whole
  CHECK(c.create == 16 * MiB / kPage);
  CHECK(stamped(q, 16 * MiB, 92));
  void* t = h.get(32 * MiB, S);  // outside the region
  fill_pattern(t, 32 * MiB, 93);
  CHECK(stamped(q, 16 * MiB, 92));
  CHECK(holds_pattern(t, 32 * MiB, 93));
  h.put(t);
  h.put(q);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("a pause that fails on one piece lets the copies of the later pieces finish before "
          "their host pages go idle", "[regions][faults]") {
  constexpr std::size_t kBig = 150 * MiB;  // pieces of 32, 32 and 11 pages
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-piece-fails");
  void* p = stamped_in(h, r, kBig, 95);
  REQUIRE(prepare(h, r) == Error::ok);  // the host chunks exist: the pause maps only remaps
  h.fake.fail_call(CallKind::map, 2, device::Status::device_error);  // the second piece's
  CHECK(pause(h, r, true) == Error::device_error);
  h.fake.clear_faults();
  CHECK(h.fake.stream_idle(0, S));  // no copy still runs into the idle host chunks
  CHECK(h.fake.bad_copies() == 0);
  CHECK(stamped(p, kBig, 95));
  REQUIRE(pause(h, r, true) == Error::ok);
  REQUIRE(resume(h, r) == Error::ok);
  h.fake.complete_all();
  CHECK(stamped(p, kBig, 95));
  h.put(p);
}

TEST_CASE("resume waits for the kernels that used the paused region before remapping it",
          "[regions]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-resume-waits");
  const RegionId q = region("test-resume-other");
  constexpr StreamHandle U = 0x73;
  void* p = stamped_in(h, r, 8 * MiB, 21);
  void* other = stamped_in(h, q, 8 * MiB, 22, U);
  REQUIRE(h.alloc->record_stream(p, T) == Error::ok);  // the region is used on T too
  REQUIRE(pause(h, r, true) == Error::ok);
  h.fake.enqueue_work(0, T);  // a kernel on T reads the paused region over the bus
  h.fake.enqueue_work(0, U);  // another region's work
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(h.fake.stream_idle(0, T));  // done before the pages moved under it
  CHECK_FALSE(h.fake.stream_idle(0, U));
  CHECK(stamped(p, 8 * MiB, 21));
  // Streams unknown at the pause (LD_PRELOAD): resume waits for the whole device.
  REQUIRE(pause(h, r, true, /*streams_known=*/false) == Error::ok);
  h.fake.enqueue_work(0, U);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(h.fake.stream_idle(0, U));
  CHECK(stamped(p, 8 * MiB, 21));
  CHECK(stamped(other, 8 * MiB, 22));
  h.fake.complete_all();
  h.put(p);
  h.put(other);
}

TEST_CASE("a host chunk one region's resume left serves another stream's pause without "
          "waiting for the first stream", "[regions]") {
  constexpr std::size_t kBig = 64 * MiB;  // one piece of 32 pages
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-chunk-stream-a");
  const RegionId q = region("test-chunk-stream-b");
  void* a = stamped_in(h, r, kBig, 31);
  void* b = stamped_in(h, q, kBig, 32, T);
  REQUIRE(pause(h, r, true) == Error::ok);
  REQUIRE(resume(h, r) == Error::ok);  // its host chunk stays cached, every use waited for
  h.fake.enqueue_work(0, S);           // region a is in use again
  const auto waits_before = waits_of(h, T, S);
  CallCounts c = calls_of(h, [&] { REQUIRE(pause(h, q, true) == Error::ok); });
  CHECK(c.create == 0);  // a's host chunk
  CHECK(lives_on(h, b, kBig, Location::host));
  CHECK(stamped(b, kBig, 32));
  CHECK(waits_of(h, T, S) == waits_before);
  CHECK_FALSE(h.fake.stream_idle(0, S));  // a's kernel runs on
  // a pauses into new host memory once b holds the chunk; both come back whole.
  h.fake.complete_all();
  REQUIRE(pause(h, r, true) == Error::ok);
  REQUIRE(resume(h, q) == Error::ok);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(a, kBig, 31));
  CHECK(stamped(b, kBig, 32));
  h.put(a);
  h.put(b);
}

TEST_CASE("pause remaps each piece after its own copies: one event per piece, and a failed "
          "event waits for the stream instead", "[regions]") {
  constexpr std::size_t kBig = 150 * MiB;  // pieces of 32, 32 and 11 pages
  Harness h;
  const RegionId r = region("test-piece-events");
  void* p = stamped_in(h, r, kBig, 41);
  const std::uint64_t records = h.fake.calls(CallKind::event_record);
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(h.fake.calls(CallKind::event_record) - records == 1 + 3);  // the region's wait, pieces
  CHECK(stamped(p, kBig, 41));
  REQUIRE(resume(h, r) == Error::ok);
  // The second piece's event fails: it and the third wait for the stream, all bytes move.
  h.fake.fail_call(CallKind::event_record, 2, device::Status::device_error);
  REQUIRE(pause(h, r, true) == Error::ok);
  h.fake.clear_faults();
  CHECK(lives_on(h, p, kBig, Location::host));
  CHECK(stamped(p, kBig, 41));
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 41));
  h.put(p);
}

namespace {

// A kept region of `bytes` stamped with `seed`, paused; then another workload takes the freed
// memory of a 192 MiB device and frees it into cudalloc's cache, so that the device has no
// room for a chunk of the region beside the cache when it resumes.
void* paused_beside_full_cache(Harness& h, RegionId r, std::size_t bytes, std::uint32_t seed) {
  void* p = stamped_in(h, r, bytes, seed);
  REQUIRE(pause(h, r, true) == Error::ok);
  void* ballast = h.get(160 * MiB, T);
  fill_pattern(ballast, 160 * MiB, seed + 1);
  h.put(ballast);
  REQUIRE(h.fake.used_bytes(0) + bytes > 192 * MiB);
  return p;
}

}  // namespace

TEST_CASE("resume gives cudalloc's idle single pages back to make room for a chunk, so the "
          "next pause moves the piece whole", "[regions]") {
  constexpr std::size_t kBig = 64 * MiB;  // one piece of 32 pages
  Harness h(granular_pages(), fake_options(192 * MiB));  // 2 MiB pages
  const RegionId r = region("test-chunk-room");
  void* p = paused_beside_full_cache(h, r, kBig, 51);
  CallCounts c = calls_of(h, [&] { REQUIRE(resume(h, r) == Error::ok); });
  CHECK(c.create == 2);  // the driver refuses the chunk, then gives it in the room freed
  CHECK(c.release == kBig / kPage);
  CHECK(stamped(p, kBig, 51));
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.release == 1);  // the device chunk, whole
  CHECK(c.unmap == 1);
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 51));
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
}

TEST_CASE("with pages of 8 MiB resume takes cudalloc's idle pages as they are, giving none "
          "back", "[regions][page_size]") {
  // 8 MiB pages cost a fraction of their copy to map one by one; giving them back to create a
  // chunk was measured slow on the GPU (page_mapper.h, kTakeIdleFrom).
  constexpr std::size_t kBig = 64 * MiB;  // one piece of 8 pages
  Settings settings;
  settings.page_size = 8 * MiB;
  Harness h(settings, fake_options(192 * MiB));
  const RegionId r = region("test-idle-8m");
  void* p = paused_beside_full_cache(h, r, kBig, 53);
  CallCounts c = calls_of(h, [&] { REQUIRE(resume(h, r) == Error::ok); });
  CHECK(c.release == 0);  // the idle pages serve where they are
  CHECK(c.create <= 1);   // at most the chunk the full device refuses
  CHECK(c.map == kBig / (8 * MiB));
  CHECK(lives_on(h, p, kBig, Location::device));
  CHECK(stamped(p, kBig, 53));
  h.check();
  // The next pause moves the piece page by page and gives each device page back.
  c = calls_of(h, [&] { REQUIRE(pause(h, r, true) == Error::ok); });
  CHECK(c.release == kBig / (8 * MiB));
  CHECK(lives_on(h, p, kBig, Location::host));
  REQUIRE(resume(h, r) == Error::ok);
  CHECK(stamped(p, kBig, 53));
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
}

TEST_CASE("a held segment that cannot be backed leaves no page mapped", "[regions][faults]") {
  Harness h;
  const RegionId r = region("test-held-fail");
  h.put(h.get(8 * MiB, S));  // four idle pages, which the held segment takes first
  h.fake.fail_call(CallKind::create_physical, 1, device::Status::out_of_memory, 1000);
  {
    InRegion in(r);
    void* p = nullptr;
    CHECK(h.try_get(12 * MiB, S, &p) == Error::out_of_memory);  // check() validates
    CHECK(p == nullptr);
  }
  h.fake.clear_faults();
  {
    InRegion in(r);
    void* p = h.get(12 * MiB, S);
    h.put(p);
  }
}

TEST_CASE("a dropped region answers residency, refuses a pool restore, and survives reset",
          "[regions]") {
  Harness h;
  const RegionId r = region("test-dropped-queries");
  void* own = nullptr;
  void* graph = nullptr;
  std::vector<PoolAllocation> checkpoint;
  {
    InRegion in(r);
    own = h.get(6 * MiB, S);
    REQUIRE(h.alloc->create_private_pool(91) == Error::ok);
  }
  REQUIRE(h.alloc->allocate(4 * MiB, S, &graph, 91) == Error::ok);
  REQUIRE(h.alloc->checkpoint_private_pool(91, &checkpoint) == Error::ok);
  REQUIRE(pause(h, r, false) == Error::ok);
  std::size_t dev = 1, host = 1;
  REQUIRE(h.alloc->residency(own, &dev, &host) == Error::ok);
  CHECK(dev == 0);
  CHECK(host == 0);
  std::vector<std::uintptr_t> freed;
  CHECK(h.alloc->restore_private_pool(91, checkpoint, &freed) == Error::invalid_value);
  h.check();
  REQUIRE(h.alloc->reset() == Error::ok);
  h.check();
  CHECK(h.stats().dropped_bytes.current == 0);
}

TEST_CASE("a region with a graph's pool waits for the device (replays run on any stream)",
          "[regions]") {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  Harness h(Settings{}, o);
  const RegionId r = region("test-graph-wait");
  void* p = nullptr;
  {
    InRegion in(r);
    REQUIRE(h.alloc->create_private_pool(92) == Error::ok);
  }
  REQUIRE(h.alloc->allocate(4 * MiB, S, &p, 92) == Error::ok);
  h.fake.enqueue_work(0, T);  // a replay launched on another stream
  REQUIRE(pause(h, r, true) == Error::ok);
  CHECK(h.fake.stream_idle(0, T));
  REQUIRE(resume(h, r) == Error::ok);
  h.put(p);
  REQUIRE(h.alloc->release_private_pool(92) == Error::ok);
}
