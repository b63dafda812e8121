#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {
constexpr StreamHandle S = 0x51, T = 0x52, U = 0x53;
}

TEST_CASE("memory freed on a stream is reused at once on that stream", "[streams]") {
  Harness h;
  h.fake.set_manual_streams(true);
  void* big = h.get(64 * MiB, S);
  void* small = h.get(4096, S);
  h.fake.enqueue_work(0, S);  // a kernel still using both
  h.put(big);
  h.put(small);
  CHECK(h.get(64 * MiB, S) == big);
  CHECK(h.get(4096, S) == small);
  CHECK(h.fake.calls(CallKind::event_record) == 0);  // stream order needs no event
}

TEST_CASE("small objects freed on one stream are never handed to another", "[streams][slab]") {
  Harness h;
  void* a = h.get(4096, S);
  h.put(a);
  void* b = h.get(4096, T);
  CHECK(b != a);
  h.put(b);
}

TEST_CASE("a free segment moves to another stream only behind an event of the first",
          "[streams][blocks]") {
  Harness h(plain_settings(), fake_options(100 * MiB));
  h.fake.set_manual_streams(true);
  void* a = h.get(64 * MiB, S);
  h.fake.enqueue_work(0, S);  // S's kernel still reads `a`
  h.put(a);
  void* b = h.get(64 * MiB, T);  // no room for a second segment: must reuse S's
  CHECK(b == a);
  CHECK(h.stats().stream_steals.total == 1);
  const auto waits = h.fake.waits();
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].waiter == T);
  CHECK(waits[0].on == S);
  CHECK(waits[0].until == 1);  // after S's kernel
  h.put(b);
}

TEST_CASE("a segment of an idle stream moves without a wait", "[streams][blocks]") {
  Harness h(plain_settings(), fake_options(100 * MiB));
  h.fake.set_manual_streams(true);
  void* a = h.get(64 * MiB, S);
  h.put(a);  // S has no queued work
  void* b = h.get(64 * MiB, T);
  CHECK(b == a);
  CHECK(h.fake.waits().empty());
  CHECK(h.fake.calls(CallKind::event_record) == 1);
  h.put(b);
}

TEST_CASE("record_stream delays reuse until the other stream's work is done",
          "[streams][record_stream]") {
  Harness h;
  h.fake.set_manual_streams(true);
  for (std::size_t size : {std::size_t(4096), 8 * MiB}) {
    INFO(size);
    void* p = h.get(size, S);
    REQUIRE(h.alloc->record_stream(p, U) == Error::ok);
    REQUIRE(h.alloc->record_stream(p, U) == Error::ok);  // twice is once
    REQUIRE(h.alloc->record_stream(p, S) == Error::ok);  // its own stream: nothing to do
    h.fake.enqueue_work(0, U);  // U's kernel uses p
    h.put(p);
    CHECK(h.stats().active_count.current == 1);  // pending, not reusable
    CHECK(h.stats().allocated_count.current == 0);
    void* q = h.get(size, S);
    CHECK(q != p);
    h.fake.complete_work(0, U);
    void* r = h.get(size, S);  // the pending free completes first
    CHECK(r == p);
    h.put(q);
    h.put(r);
  }
  CHECK(h.stats().pending_frees.total == 2);
  CHECK(h.stats().active_count.current == 0);
}

TEST_CASE("record_stream of a freed pointer is an error", "[streams][record_stream]") {
  Harness h;
  void* p = h.get(4096, S);
  h.put(p);
  CHECK(h.alloc->record_stream(p, U) == Error::invalid_pointer);
}

TEST_CASE("the OOM path waits for pending frees", "[streams][oom]") {
  Harness h(Settings{}, fake_options(64 * MiB));
  h.fake.set_manual_streams(true);
  void* p = h.get(40 * MiB, S);
  REQUIRE(h.alloc->record_stream(p, U) == Error::ok);
  h.fake.enqueue_work(0, U);
  h.put(p);
  void* q = h.get(40 * MiB, T);  // fits only once p's memory is returned, after U's work
  CHECK(h.stats().alloc_retries.total == 1);
  CHECK(h.fake.stream_idle(0, U));  // the event was waited for
  h.put(q);
}

TEST_CASE("events are pooled, not created per free", "[streams][record_stream]") {
  Harness h;
  for (int i = 0; i < 50; ++i) {
    void* p = h.get(4096, S);
    REQUIRE(h.alloc->record_stream(p, U) == Error::ok);
    h.put(p);
    void* q = h.get(4096, S);
    h.put(q);
  }
  CHECK(h.fake.calls(CallKind::event_create) <= 2);
  CHECK(h.fake.live_events() <= 2);
  CHECK(h.stats().active_count.current == 0);
}
