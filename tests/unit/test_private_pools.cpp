// Private pools (core/private_pools.h): the memory a CUDA graph captured stays the graph's.
#include <algorithm>
#include <random>
#include <vector>

#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr PoolId kGraph = 7;
constexpr StreamHandle kCapture = 0x10;

void* pool_get(Harness& h, std::size_t size, PoolId pool, StreamHandle stream = kCapture) {
  void* p = nullptr;
  const Error err = h.alloc->allocate(size, stream, &p, pool);
  INFO(last_error_message());
  REQUIRE(err == Error::ok);
  h.check();
  return p;
}

// The [base, base + size) ranges of the segments of private pool `id`.
std::vector<std::pair<std::uintptr_t, std::size_t>> pool_segments(Harness& h, PoolId id) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> out;
  for (const SegmentState& s : h.alloc->state().segments) {
    if (s.private_pool == id) out.emplace_back(s.base, s.size);
  }
  return out;
}

bool inside_any(std::uintptr_t a, const std::vector<std::pair<std::uintptr_t, std::size_t>>& r) {
  return std::any_of(r.begin(), r.end(),
                     [&](const auto& s) { return a >= s.first && a < s.first + s.second; });
}

}  // namespace

TEST_CASE("memory freed during a capture serves the pool only while the pool lives",
          "[private_pools]") {
  for (const bool vmm : {true, false}) {
    Harness h(vmm ? Settings{} : plain_settings());
    REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
    // The capture: allocations and frees inside it, some reused inside it.
    std::vector<void*> kept;
    for (int i = 0; i < 20; ++i) {
      void* a = pool_get(h, 1000 + 37 * i, kGraph);
      void* b = pool_get(h, (i + 1) * 300 * KiB, kGraph);
      h.put(a);  // freed in the capture: the graph still uses its address at every replay
      kept.push_back(b);
    }
    const auto mine = pool_segments(h, kGraph);
    REQUIRE(!mine.empty());
    for (const SegmentState& s : h.alloc->state().segments) {
      if (s.private_pool == kGraph) CHECK_FALSE(s.paged);  // plain memory: it never moves
    }
    // After the capture: nothing outside the pool lands in its memory, on any stream.
    std::mt19937 rng(5);
    std::vector<void*> others;
    for (int i = 0; i < 300; ++i) {
      const std::size_t size = std::size_t{1} << (rng() % 24);
      const StreamHandle stream = (i % 3 == 0) ? kCapture : 0;
      void* p = h.get(size, stream);
      INFO("size " << size << " at " << p);
      CHECK_FALSE(inside_any(addr(p), mine));
      others.push_back(p);
      if (rng() % 2 == 0) {
        h.put(others.back());
        others.pop_back();
      }
    }
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    CHECK(pool_segments(h, kGraph) == mine);  // empty_cache keeps what the pool holds
    for (void* p : others) h.put(p);
    for (void* p : kept) h.put(p);
    CHECK(pool_segments(h, kGraph) == mine);  // wholly free, still the graph's
    REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
    CHECK(pool_segments(h, kGraph).empty());
    h.check();
  }
}

TEST_CASE("a pool shared by two graphs lives until both release it", "[private_pools]") {
  Harness h;
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  CHECK(h.alloc->private_pool_use_count(kGraph) == 2);
  void* a = pool_get(h, 4 * MiB, kGraph);
  h.put(a);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
  CHECK(h.alloc->private_pool_use_count(kGraph) == 1);
  // The second graph allocates from the memory the first one left.
  void* b = pool_get(h, 4 * MiB, kGraph);
  CHECK(b == a);
  void* outside = h.get(4 * MiB, kCapture);
  CHECK(outside != a);
  h.put(b);
  h.put(outside);
  const auto before = h.fake.calls(CallKind::synchronize);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
  CHECK(h.alloc->private_pool_use_count(kGraph) == 0);
  // Graph launches may still be queued: one synchronization before the memory is shared.
  CHECK(h.fake.calls(CallKind::synchronize) == before + 1);
  // Released memory is cache now: a shared request of the same stream reuses it, with no new
  // device memory.
  const auto allocs = h.stats().device_allocs.total;
  void* c = h.get(4 * MiB, kCapture);
  CHECK(h.stats().device_allocs.total == allocs);
  h.put(c);
}

TEST_CASE("tensors that outlive their graph return the memory when freed", "[private_pools]") {
  Harness h;
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  void* out = pool_get(h, 8 * MiB, kGraph);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
  CHECK(pool_segments(h, kGraph).size() == 1);  // still holds the live output
  CHECK(h.alloc->private_pool_use_count(kGraph) == 0);
  void* other = nullptr;
  CHECK(h.alloc->allocate(1 * MiB, kCapture, &other, kGraph) == Error::invalid_value);
  h.check();
  const auto syncs = h.fake.calls(CallKind::synchronize);
  h.put(out);
  CHECK(pool_segments(h, kGraph).empty());
  CHECK(h.fake.calls(CallKind::synchronize) == syncs);  // the release's wait covers it
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().reserved_bytes.current == 0);
}

TEST_CASE("a pool request during a capture never synchronizes", "[private_pools]") {
  Settings settings = plain_settings();
  Harness h(settings, fake_options(64 * MiB));
  // The shared cache holds most of the device.
  void* big = h.get(48 * MiB);
  h.put(big);
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  h.fake.set_capturing(0, kCapture, true);
  void* p = nullptr;
  CHECK(h.alloc->allocate(32 * MiB, kCapture, &p, kGraph) == Error::out_of_memory);
  CHECK(p == nullptr);
  CHECK(h.fake.capture_violations() == 0);
  h.check();
  // Outside a capture the same request releases the cache and succeeds.
  h.fake.set_capturing(0, kCapture, false);
  void* q = pool_get(h, 32 * MiB, kGraph);
  CHECK(h.stats().alloc_retries.total == 1);
  h.put(q);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
}

TEST_CASE("private pool errors change nothing", "[private_pools]") {
  Harness h;
  void* p = nullptr;
  CHECK(h.alloc->allocate(1 * KiB, 0, &p, 99) == Error::invalid_value);
  CHECK(p == nullptr);
  CHECK(h.alloc->release_private_pool(99) == Error::invalid_value);
  CHECK(h.alloc->create_private_pool(kSharedPool) == Error::invalid_value);
  CHECK(h.alloc->private_pool_use_count(99) == 0);
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
  CHECK(h.alloc->release_private_pool(kGraph) == Error::invalid_value);
  CHECK(h.stats().allocated_count.total == 0);
  h.check();
}

TEST_CASE("a pool's live allocations and the largest cached block", "[private_pools]") {
  Harness h(plain_settings());
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  void* a = pool_get(h, 100, kGraph);  // small requests get blocks too: no slabs in pools
  void* b = pool_get(h, 3 * MiB, kGraph);
  void* shared = h.get(3 * MiB);
  std::vector<std::uintptr_t> live;
  REQUIRE(h.alloc->private_pool_allocations(kGraph, &live) == Error::ok);
  std::vector<std::uintptr_t> expected{addr(a), addr(b)};
  std::sort(expected.begin(), expected.end());
  CHECK(live == expected);
  for (const SegmentState& s : h.alloc->state().segments) {
    if (s.private_pool == kGraph) CHECK_FALSE(s.has_slabs);
  }
  // The pool's free memory does not count: only what a shared request could get.
  const std::size_t before = h.alloc->largest_free_block();
  h.put(shared);
  const std::size_t after = h.alloc->largest_free_block();
  CHECK(after >= before + 3 * MiB);
  h.put(a);
  h.put(b);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
}

TEST_CASE("a free used on a capturing stream waits for the capture to end", "[private_pools]") {
  // record_stream during a capture: an event of the capturing stream cannot be waited for
  // (nor the device), so the free is held, out of use, until the capture ends; then its
  // events are recorded and it completes as any other.
  constexpr StreamHandle kSide = 0x20;
  Harness h(plain_settings());
  h.fake.set_manual_streams(true);
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  void* p = pool_get(h, 4 * MiB, kGraph);
  REQUIRE(h.alloc->record_stream(p, kSide) == Error::ok);
  h.fake.enqueue_work(0, kSide);  // the side stream's captured work uses p
  h.fake.set_capturing(0, kSide, true);
  h.fake.set_capturing(0, kCapture, true);
  const auto records = h.fake.calls(CallKind::event_record);
  h.put(p);
  CHECK(h.fake.calls(CallKind::event_record) == records);  // nothing recorded yet
  void* q = pool_get(h, 4 * MiB, kGraph);
  CHECK(q != p);  // held: not reused during the capture
  CHECK(h.fake.capture_violations() == 0);
  h.fake.set_capturing(0, kSide, false);
  h.fake.set_capturing(0, kCapture, false);
  void* r = pool_get(h, 4 * MiB, kGraph);  // the capture is over: the events are recorded now
  CHECK(h.fake.calls(CallKind::event_record) > records);
  CHECK(r != p);  // ... and the side stream's work is still queued
  h.fake.complete_work(0, kSide);
  void* s = pool_get(h, 4 * MiB, kGraph);
  CHECK(s == p);  // now reused
  for (void* x : {q, r, s}) h.put(x);
  CHECK(h.fake.capture_violations() == 0);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
}

TEST_CASE("without pool calls, a capture's allocations still stay the graph's",
          "[private_pools]") {
  // PyTorch's pluggable interface: no begin/end/release. An allocation on a capturing
  // stream goes to that capture's own pool, which is never released.
  for (const bool vmm : {true, false}) {
    Harness h(vmm ? Settings{} : plain_settings());
    h.fake.set_capturing(0, kCapture, true);
    void* temp = nullptr;
    void* out = nullptr;
    REQUIRE(h.alloc->allocate_owned_by_capture(6 * MiB, kCapture, &temp) == Error::ok);
    REQUIRE(h.alloc->allocate_owned_by_capture(6 * MiB, kCapture, &out) == Error::ok);
    h.put(temp);  // freed inside the capture: every replay still writes it
    h.fake.set_capturing(0, kCapture, false);
    std::vector<std::pair<std::uintptr_t, std::size_t>> captured;
    for (const SegmentState& s : h.alloc->state().segments) {
      if (s.private_pool != kSharedPool) captured.emplace_back(s.base, s.size);
    }
    REQUIRE(!captured.empty());
    for (const SegmentState& s : h.alloc->state().segments) {
      if (s.private_pool != kSharedPool) CHECK_FALSE(s.paged);
    }
    // After the capture, on the same stream and others: never the graph's memory.
    std::vector<void*> later;
    for (int i = 0; i < 40; ++i) {
      void* p = nullptr;
      REQUIRE(h.alloc->allocate_owned_by_capture(std::size_t{1} << (10 + i % 14),
                                                 i % 2 ? kCapture : 0, &p) == Error::ok);
      CHECK_FALSE(inside_any(addr(p), captured));
      later.push_back(p);
    }
    h.put(out);  // the graph's output freed after the capture: still the graph's
    void* again = nullptr;
    REQUIRE(h.alloc->allocate_owned_by_capture(6 * MiB, kCapture, &again) == Error::ok);
    CHECK_FALSE(inside_any(addr(again), captured));
    later.push_back(again);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    for (const auto& seg : captured) {  // kept through empty_cache too
      bool kept = false;
      for (const SegmentState& s : h.alloc->state().segments) kept = kept || s.base == seg.first;
      CHECK(kept);
    }
    // A second capture gets a pool of its own, apart from the first one's.
    h.fake.set_capturing(0, kCapture, true);
    void* second = nullptr;
    REQUIRE(h.alloc->allocate_owned_by_capture(6 * MiB, kCapture, &second) == Error::ok);
    CHECK_FALSE(inside_any(addr(second), captured));
    h.fake.set_capturing(0, kCapture, false);
    later.push_back(second);
    for (void* p : later) h.put(p);
    CHECK(h.fake.capture_violations() == 0);
  }
}

TEST_CASE("a private pool restored to a checkpoint has exactly the checkpoint's allocations",
          "[private_pools][checkpoint]") {
  // Cudagraph trees: record a node, checkpoint, record a branch, then rewind to the
  // checkpoint before recording the sibling branch.
  Harness h;
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  std::vector<void*> node;
  for (int i = 0; i < 6; ++i) node.push_back(pool_get(h, (i + 1) * 70 * KiB, kGraph));
  h.put(node[2]);  // freed inside the node: not part of the checkpoint
  std::vector<PoolAllocation> checkpoint;
  REQUIRE(h.alloc->checkpoint_private_pool(kGraph, &checkpoint) == Error::ok);
  REQUIRE(checkpoint.size() == 5);
  CHECK(std::is_sorted(checkpoint.begin(), checkpoint.end(),
                       [](const auto& a, const auto& b) { return a.addr < b.addr; }));
  const auto before = h.stats();
  // The first branch frees some of the node's tensors and allocates its own.
  h.put(node[0]);
  h.put(node[4]);
  std::vector<void*> branch;
  for (int i = 0; i < 4; ++i) branch.push_back(pool_get(h, (i + 2) * 90 * KiB, kGraph));
  std::vector<std::uintptr_t> freed;
  REQUIRE(h.alloc->restore_private_pool(kGraph, checkpoint, &freed) == Error::ok);
  h.check();
  CHECK(freed.size() == 3 + 4);  // node[1], node[3], node[5] and the branch's
  std::vector<std::uintptr_t> live;
  REQUIRE(h.alloc->private_pool_allocations(kGraph, &live) == Error::ok);
  std::vector<std::uintptr_t> expected;
  for (const PoolAllocation& a : checkpoint) expected.push_back(a.addr);
  CHECK(live == expected);
  CHECK(h.stats().allocated_bytes.current == before.allocated_bytes.current);
  CHECK(h.stats().requested_bytes.current == before.requested_bytes.current);
  // The sibling branch allocates from what is free around the restored layout; the restored
  // allocations free as usual.
  void* sibling = pool_get(h, 200 * KiB, kGraph);
  CHECK(std::find(expected.begin(), expected.end(), addr(sibling)) == expected.end());
  h.put(sibling);
  for (const PoolAllocation& a : checkpoint) h.put(reinterpret_cast<void*>(a.addr));
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
  h.check();
}

TEST_CASE("a checkpoint that does not fit the pool is refused and changes nothing",
          "[private_pools][checkpoint]") {
  Harness h;
  REQUIRE(h.alloc->create_private_pool(kGraph) == Error::ok);
  void* a = pool_get(h, 300 * KiB, kGraph);
  std::vector<PoolAllocation> checkpoint;
  REQUIRE(h.alloc->checkpoint_private_pool(kGraph, &checkpoint) == Error::ok);
  std::vector<std::uintptr_t> freed;
  auto outside = checkpoint;
  outside[0].addr += std::size_t{1} << 40;  // in no segment of the pool
  CHECK(h.alloc->restore_private_pool(kGraph, outside, &freed) == Error::invalid_value);
  auto overlapping = checkpoint;
  overlapping.push_back(checkpoint[0]);
  CHECK(h.alloc->restore_private_pool(kGraph, overlapping, &freed) == Error::invalid_value);
  CHECK(h.alloc->restore_private_pool(kGraph + 1, checkpoint, &freed) == Error::invalid_value);
  std::vector<std::uintptr_t> live;
  REQUIRE(h.alloc->private_pool_allocations(kGraph, &live) == Error::ok);
  CHECK(live == std::vector<std::uintptr_t>{addr(a)});  // untouched
  h.check();
  h.put(a);
  REQUIRE(h.alloc->release_private_pool(kGraph) == Error::ok);
}
