#include <algorithm>
#include <vector>

#include "harness.h"
#include "lcg.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {
using Order = DeviceAllocator::FreeOrder;
constexpr StreamHandle kSeen = 0x77;

// A dynamically linked runtime: every stream is created through an interposed call.
Settings all_streams_seen() {
  Settings s;
  s.streams = StreamVisibility::all_seen;
  return s;
}
}  // namespace

TEST_CASE("device-ordered frees are not reused while a stream nobody registered still works",
          "[device_order]") {
  // A statically linked runtime creates streams cudalloc never sees: work queued on such a
  // stream before cudaFree may still read the memory, and only a device synchronization
  // proves it done.
  Harness h;
  h.fake.set_manual_streams(true);
  constexpr StreamHandle kUnseen = 0x5eed;
  void* p = h.get(16 * MiB);
  h.fake.enqueue_work(0, kUnseen);  // a kernel on the unseen stream still reads p
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  CHECK(h.stats().active_count.current == 1);  // not reusable yet
  // Below the slack a request takes new memory rather than synchronizing.
  const auto syncs = h.fake.calls(CallKind::synchronize);
  void* q = h.get(16 * MiB);
  CHECK(q != p);
  CHECK(h.fake.calls(CallKind::synchronize) == syncs);
  CHECK_FALSE(h.fake.stream_idle(0, kUnseen));
  h.put(q);
}

TEST_CASE("one device synchronization completes every device-ordered free past the slack",
          "[device_order]") {
  Harness h;
  h.fake.set_manual_streams(true);
  constexpr StreamHandle kUnseen = 0x5eed;
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(h.get(16 * MiB));
  h.fake.enqueue_work(0, kUnseen);
  for (void* b : blocks) REQUIRE(h.alloc->deallocate(b, Order::device) == Error::ok);
  const auto syncs = h.fake.calls(CallKind::synchronize);
  void* q = h.get(16 * MiB);  // 64 MiB wait, more than the slack: fence, then reuse
  CHECK(h.fake.calls(CallKind::synchronize) == syncs + 1);
  CHECK(h.fake.stream_idle(0, kUnseen));  // the synchronization ran the stream's work out
  CHECK(std::find(blocks.begin(), blocks.end(), q) != blocks.end());
  CHECK(h.stats().active_count.current == 1);
  h.put(q);
}

TEST_CASE("no byte freed in device order is reused before queued work on any stream is done",
          "[device_order][bytes]") {
  // Random frees in device order with work queued on streams that were never registered; a
  // block handed out again must not overlap a block freed while work that may read it was
  // still queued, unless that work has completed since.
  Harness h(Settings{}, fake_options(512 * MiB));
  h.fake.set_manual_streams(true);
  const StreamHandle streams[] = {0x1001, 0x1002, 0x1003};
  struct Freed {
    std::uintptr_t addr;
    std::size_t size;
    StreamHandle stream;
    std::uint64_t syncs;  // device synchronizations before the free
    bool done;            // the test completed the stream's work since
  };
  std::vector<Freed> hazards;
  std::vector<std::pair<void*, std::size_t>> live;
  Lcg rng{12345};
  for (int step = 0; step < 400; ++step) {
    const std::size_t size = (rng.next() >> 40) % (20 * MiB) + 1;
    void* p = nullptr;
    if (h.try_get(size, 0, &p) != Error::ok) continue;
    const auto syncs = h.fake.calls(CallKind::synchronize);
    for (const Freed& f : hazards) {
      const bool overlap = addr(p) < f.addr + f.size && f.addr < addr(p) + size;
      INFO("step " << step);
      CHECK((!overlap || f.done || syncs > f.syncs));
    }
    live.emplace_back(p, size);
    if (live.size() > 6 || (rng.next() >> 60) < 8) {
      const std::size_t i = rng.below(live.size());
      const StreamHandle s = streams[(rng.next() >> 50) % 3];
      h.fake.enqueue_work(0, s);  // a kernel on an unseen stream uses the block
      REQUIRE(h.alloc->deallocate(live[i].first, Order::device) == Error::ok);
      hazards.push_back({addr(live[i].first), live[i].second, s,
                         h.fake.calls(CallKind::synchronize), false});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if ((rng.next() >> 58) == 0) {
      const StreamHandle s = streams[(rng.next() >> 50) % 3];
      h.fake.complete_work(0, s);
      for (Freed& f : hazards) f.done = f.done || f.stream == s;
    }
  }
  for (auto& [p, size] : live) h.put(p);
  h.fake.complete_all();
}

TEST_CASE("device-ordered frees are reused without growth past the slack, and the OOM path "
          "waits for them", "[device_order][oom]") {
  Harness h(plain_settings(), fake_options(64 * MiB));
  h.fake.set_manual_streams(true);
  void* p = h.get(40 * MiB);
  h.fake.enqueue_work(0, 0);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  void* q = h.get(40 * MiB);  // 40 MiB waits, past the slack: one synchronization, reuse
  CHECK(q == p);
  CHECK(h.fake.stream_idle(0, 0));
  h.put(q);
  void* r = h.get(8 * MiB);
  REQUIRE(h.alloc->deallocate(r, Order::device) == Error::ok);
  void* big = nullptr;
  CHECK(h.try_get(60 * MiB, 0, &big) == Error::ok);  // OOM path: synchronize, return, retry
  CHECK(h.fake.stream_idle(0, 0));
  h.put(big);
}

TEST_CASE("empty_cache completes device-ordered frees", "[device_order]") {
  Harness h;
  void* p = h.get(8 * MiB);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().active_count.current == 0);
}

TEST_CASE("reset forgets every allocation and returns all memory", "[device_order][reset]") {
  Harness h;
  void* a = h.get(1000);
  h.get(30 * MiB);
  REQUIRE(h.alloc->deallocate(a, Order::device) == Error::ok);
  REQUIRE(h.alloc->reset() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().allocated_count.current == 0);
  CHECK(h.fake.used_bytes(0) == 0);
  CHECK(h.alloc->deallocate(a) == Error::invalid_pointer);
  void* b = h.get(1000);  // usable again afterwards
  h.put(b);
}

TEST_CASE("memory_info reports the device's free memory plus the cache, within the cap",
          "[device_order][limits]") {
  Settings s;
  s.limit = 256 * MiB;
  Harness h(s, fake_options(1 * GiB));
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(total == 256 * MiB);
  CHECK(free_bytes == 256 * MiB);
  void* p = h.get(100 * MiB);
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(free_bytes == 156 * MiB);
  h.put(p);  // cached memory counts as free
  REQUIRE(h.alloc->memory_info(&free_bytes, &total) == Error::ok);
  CHECK(free_bytes == 256 * MiB);
}

TEST_CASE("all streams seen: with only default streams, device-ordered frees are reused at once "
          "behind one event on the legacy stream", "[device_order]") {
  Harness h(all_streams_seen());
  void* p = h.get(4 * MiB);
  const auto records = h.fake.calls(CallKind::event_record);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  CHECK(h.get(4 * MiB) == p);
  CHECK(h.fake.calls(CallKind::event_record) == records + 1);
  CHECK(h.get(4 * MiB) != p);  // no free since: no event
  CHECK(h.fake.calls(CallKind::event_record) == records + 1);
  CHECK(h.fake.calls(CallKind::synchronize) == 0);
}

TEST_CASE("all streams seen: memory freed while one thread's per-thread default stream uses it "
          "is not reused by another's before that work", "[device_order][per_thread]") {
  // Per-thread default streams of two host threads (--default-stream per-thread) are
  // created by no call and do not order each other; both order with the legacy stream.
  Harness h(all_streams_seen());
  h.fake.set_manual_streams(true);
  constexpr StreamHandle kThreadA = 0x2a, kThreadB = 0x2b;  // their per-thread streams
  h.fake.set_blocking(0, kThreadA);
  h.fake.set_blocking(0, kThreadB);
  std::vector<void*> reused;
  for (int round = 0; round < 3; ++round) {
    void* p = h.get(8 * MiB);
    h.fake.enqueue_work(0, kThreadA);  // thread A's kernel still reads p
    REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
    void* q = h.get(8 * MiB);  // thread B's allocation
    h.fake.enqueue_work(0, kThreadB);  // thread B's kernel writes q
    if (q == p) reused.push_back(q);
    // Wherever q lies over p, B's work runs only after A's.
    h.fake.complete_work(0, kThreadB);
    if (q == p) CHECK(h.fake.stream_idle(0, kThreadA));
    h.fake.complete_all();
    h.put(q);
  }
  CHECK_FALSE(reused.empty());  // the case is exercised: memory is reused, not grown
  h.check();
}

TEST_CASE("all streams seen: a move is ordered after the work of memory freed in device order",
          "[device_order][per_thread]") {
  // A free in device order with only default streams completes at once and owes one event on
  // the legacy stream. A move (here an offload) may take that memory, and records page
  // checkpoints on its stream: both must come after the owed event, which runs after every
  // blocking stream's earlier work, thread A's kernel included.
  Harness h(all_streams_seen());
  h.fake.set_manual_streams(true);
  constexpr StreamHandle kThreadA = 0x2a, kThreadB = 0x2b;
  h.fake.set_blocking(0, kThreadA);
  h.fake.set_blocking(0, kThreadB);
  void* moved = h.get(8 * MiB, kThreadB);
  void* p = h.get(8 * MiB);
  h.fake.enqueue_work(0, kThreadA);  // thread A's kernel still reads p
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  REQUIRE(h.alloc->offload(moved, kThreadB) == Error::ok);
  // Running thread B's stream (the move's copies) first runs the owed event, and so A's work.
  h.fake.complete_work(0, kThreadB);
  CHECK(h.fake.stream_idle(0, kThreadA));
  h.fake.complete_all();
  h.check();
  h.put(moved);
}

TEST_CASE("all streams seen: device-ordered frees are reused behind a fence that orders every "
          "stream", "[device_order]") {
  Harness h(all_streams_seen());
  h.fake.set_manual_streams(true);
  h.fake.enqueue_work(0, 0);  // earlier work on the legacy stream
  h.alloc->register_stream(kSeen);
  bool ordered_at_creation = false;
  for (const auto& w : h.fake.waits()) ordered_at_creation |= w.waiter == kSeen && w.on == 0;
  CHECK(ordered_at_creation);  // a new stream starts after the work queued before it
  void* small = h.get(4096);
  void* p = h.get(64 * MiB);
  h.fake.enqueue_work(0, kSeen);  // a kernel on the program's stream still uses p
  const auto records = h.fake.calls(CallKind::event_record);
  REQUIRE(h.alloc->deallocate(p, Order::device) == Error::ok);
  h.check();
  CHECK(h.stats().active_count.current == 2);  // small, and p: not reusable yet
  void* other = h.get(4096);  // served from the cache: no fence needed
  CHECK(h.fake.calls(CallKind::event_record) == records);
  void* q = h.get(64 * MiB);  // would need new memory: fence, then reuse
  CHECK(q == p);
  CHECK(h.fake.calls(CallKind::event_record) == records + 2);  // legacy + the program's stream
  bool legacy_waits = false, side_waits = false;
  for (const auto& w : h.fake.waits()) {
    legacy_waits |= w.waiter == 0 && w.on == kSeen && w.until == 1;
    side_waits |= w.waiter == kSeen && w.on == 0;
  }
  CHECK(legacy_waits);  // later work anywhere runs after the kernel that used p
  CHECK(side_waits);
  CHECK_FALSE(h.fake.stream_idle(0, kSeen));  // and the host never waited
  h.put(q);
  h.put(small);
  h.put(other);
}

