// Blocks kept whole after a free for the next allocation of their size on their stream
// (fast_frees.h): the pair path calls no driver and changes no page, and everything else sees
// the pools as if every free had been done at once. The harness validates after every call.
#include "harness.h"

namespace cudalloc::test {
namespace {

std::size_t device_calls(const Harness& h) {
  std::size_t n = 0;
  for (CallKind k : {CallKind::map, CallKind::unmap, CallKind::set_access, CallKind::create_physical,
                     CallKind::release_physical, CallKind::malloc, CallKind::free}) {
    n += h.fake.calls(k);
  }
  return n;
}

}  // namespace

TEST_CASE("a cached pair of any size reuses its block whole, with no page work",
          "[pools][fast]") {
  for (const std::size_t size : {1 * MiB + 512, 16 * MiB, 256 * MiB}) {
    Harness h;
    void* first = h.get(size);
    h.put(first);
    const Stats warm = h.stats();
    const std::size_t calls = device_calls(h);
    for (int i = 0; i < 50; ++i) {
      void* p = h.get(size);
      CHECK(p == first);
      h.put(p);
    }
    const Stats s = h.stats();
    CHECK(device_calls(h) == calls);
    CHECK(s.page_maps.total == warm.page_maps.total);
    CHECK(s.cached_count.current == warm.cached_count.current);
    CHECK(s.cached_bytes.current == warm.cached_bytes.current);
    CHECK(s.allocated_bytes.current == 0);
    CHECK(s.alloc_retries.total == warm.alloc_retries.total);
  }
}

TEST_CASE("kept blocks merge for a request of another size", "[pools][fast]") {
  for (const bool vmm : {true, false}) {
    Settings settings;
    settings.vmm = vmm;
    Harness h(settings);
    void* a = h.get(3 * MiB);
    void* b = h.get(3 * MiB);
    void* c = h.get(3 * MiB);
    void* keep = h.get(3 * MiB);
    const std::int64_t tail_only = h.stats().cached_count.current;
    h.put(a);
    h.put(b);
    h.put(c);
    // Counted as PyTorch counts free blocks: the three as one.
    CHECK(h.stats().cached_count.current == tail_only + 1);
    void* big = h.get(9 * MiB);
    CHECK(big == a);  // best fit over the merged hole, lowest address first
    CHECK(h.stats().cached_count.current == tail_only);
    h.put(big);
    h.put(keep);
  }
}

TEST_CASE("a kept block never serves another stream", "[pools][fast][streams]") {
  Harness h;
  const StreamHandle s1 = 0x11, s2 = 0x22;
  void* p = h.get(64 * MiB, s1);
  h.put(p);
  void* q = h.get(64 * MiB, s2);
  CHECK(q != p);
  void* r = h.get(64 * MiB, s1);
  CHECK(r == p);  // its own stream still finds it, merged or kept
  h.put(q);
  h.put(r);
}

TEST_CASE("the oldest kept block is freed for real when a fifth is kept", "[pools][fast]") {
  Harness h;
  std::vector<void*> blocks;
  void* sep[6];
  for (int i = 0; i < 6; ++i) {
    blocks.push_back(h.get((4 + static_cast<std::size_t>(i)) * MiB));
    sep[i] = h.get(4 * MiB);  // no two freed blocks are neighbours
  }
  const std::int64_t before = h.stats().cached_count.current;
  for (void* p : blocks) h.put(p);
  CHECK(h.stats().cached_count.current == before + 6);
  // Every size comes back where it was, kept or from the bins.
  for (int i = 5; i >= 0; --i) {
    CHECK(h.get((4 + static_cast<std::size_t>(i)) * MiB) == blocks[static_cast<std::size_t>(i)]);
  }
  for (void* p : blocks) h.put(p);
  for (void* p : sep) h.put(p);
}

TEST_CASE("snapshots and empty_cache see kept blocks freed", "[pools][fast][snapshot]") {
  Harness h;
  void* p = h.get(32 * MiB);
  void* other = h.get(8 * MiB);
  h.put(p);
  const DeviceState st = h.alloc->state();
  bool found = false;
  for (const SegmentState& seg : st.segments) {
    for (const BlockState& b : seg.blocks) {
      if (b.addr == addr(p)) {
        found = true;
        CHECK(b.kind == BlockState::Kind::free);
      }
    }
  }
  CHECK(found);
  h.check();
  h.put(other);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  h.check();
  CHECK(h.stats().reserved_bytes.current == 0);
  CHECK(h.stats().cached_count.current == 0);
}

TEST_CASE("frees that wait for other streams are never kept", "[pools][fast][streams]") {
  Harness h;
  h.fake.set_manual_streams(true);
  const StreamHandle s = 0x11, u = 0x22;
  void* p = h.get(16 * MiB, s);
  REQUIRE(h.alloc->record_stream(p, u) == Error::ok);
  h.fake.enqueue_work(0, u);  // u's kernel uses p
  h.put(p);
  void* q = h.get(16 * MiB, s);
  CHECK(q != p);  // pending, not kept
  h.fake.complete_work(0, u);
  void* r = h.get(16 * MiB, s);
  CHECK(r == p);
  h.put(q);
  h.put(r);
}

}  // namespace cudalloc::test
