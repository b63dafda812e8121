// Regression tests for allocator/core bugs found by fuzzing and fault injection: memory must
// stay out of use while nothing (events or a device synchronization) proves its work done.
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {
constexpr StreamHandle kS = 0x51, kT = 0x52;

FakeDevice::Options manual_streams() {
  FakeDevice::Options o = fake_options();
  o.manual_streams = true;
  return o;
}
}  // namespace

// pending.cpp, defer_free: when the event for a record_stream use cannot be recorded, the
// fallback is device_.synchronize(); its result is ignored and the free completes at once, so
// memory still used by queued work on the recorded stream was handed out again.
TEST_CASE("a failed event and a failed fallback synchronize must not make memory reusable",
          "[core-issue]") {
  Harness h(Settings{}, manual_streams());
  void* p = h.get(4096, kS);
  REQUIRE(h.alloc->record_stream(p, kT) == Error::ok);
  h.fake.enqueue_work(0, kT);  // T's kernel still uses p
  h.fake.fail_call(CallKind::event_record, 1, device::Status::device_error);
  h.fake.fail_call(CallKind::synchronize, 1, device::Status::device_error);
  h.put(p);
  CHECK(h.stats().active_count.current == 1);  // still pending: nothing proved T done
  void* q = h.get(4096, kS);
  // p comes back only once a synchronization succeeded (the next one does), never while
  // T's kernel is pending.
  CHECK((q != p || h.fake.stream_idle(0, kT)));
  h.fake.complete_all();
  h.put(q);
}

// pending.cpp, process_pending: an event query in error falls back to device_.synchronize(),
// ignored its result and completed the pending free.
TEST_CASE("a failed event query and a failed fallback synchronize must not complete a free",
          "[core-issue]") {
  Harness h(Settings{}, manual_streams());
  void* p = h.get(4096, kS);
  REQUIRE(h.alloc->record_stream(p, kT) == Error::ok);
  h.fake.enqueue_work(0, kT);
  h.put(p);  // pending: waits for T
  h.fake.fail_call(CallKind::event_query, 1, device::Status::device_error);
  h.fake.fail_call(CallKind::synchronize, 1, device::Status::device_error);
  void* q = h.get(4096, kS);  // polls the pending free first
  CHECK((q != p || h.fake.stream_idle(0, kT)));
  CHECK_FALSE(h.fake.stream_idle(0, kT));  // the failed synchronize proved nothing
  CHECK(q != p);
  h.fake.complete_all();
  h.put(q);
}
