// StreamSync: the event pool and the ordering primitives, directly on a FakeDevice.
#include "component_fixture.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kA = 0xa0;
constexpr StreamHandle kB = 0xb0;
constexpr StreamHandle kC = 0xc0;

struct Sync {
  Sync() : fake(manual_device()), sync(fake, 0) {}
  std::uint64_t calls(CallKind kind) const { return fake.calls(kind); }
  FakeDevice fake;
  StreamSync sync;
};

// The position in the fake's wait log of the first wait of `waiter` on `on`, or -1.
int wait_position(const FakeDevice& fake, StreamHandle waiter, StreamHandle on) {
  const auto all = fake.waits();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].waiter == waiter && all[i].on == on) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("stream sync: an event returns to the pool when it goes out of scope",
          "[component][stream_sync]") {
  Sync s;
  EventHandle first = 0;
  {
    StreamSync::Event e;
    REQUIRE(s.sync.take(&e) == Error::ok);
    REQUIRE(e);
    first = e.handle();
    CHECK(s.sync.idle_events() == 0);
  }
  CHECK(s.sync.idle_events() == 1);
  {
    StreamSync::Event e;
    REQUIRE(s.sync.take(&e) == Error::ok);
    CHECK(e.handle() == first);  // recycled, not created
    CHECK(s.calls(CallKind::event_create) == 1);
    StreamSync::Event moved(std::move(e));
    CHECK_FALSE(e);
    CHECK(moved.handle() == first);
    StreamSync::Event assigned;
    assigned = std::move(moved);
    CHECK(assigned.handle() == first);
    CHECK(s.sync.idle_events() == 0);  // a move hands the event on, it does not return it
    assigned.reset();
    CHECK_FALSE(assigned);
    CHECK(s.sync.idle_events() == 1);
  }
  CHECK(s.sync.idle_events() == 1);
  s.sync.destroy_idle_events();
  CHECK(s.sync.idle_events() == 0);
  CHECK(s.fake.live_events() == 0);
}

TEST_CASE("stream sync: a failed event creation is an error and hands out nothing",
          "[component][stream_sync]") {
  Sync s;
  s.fake.fail_call(CallKind::event_create, 1, Status::device_error, 2);
  StreamSync::Event e;
  CHECK(s.sync.take(&e) == Error::device_error);
  CHECK_FALSE(e);
  CHECK_FALSE(s.sync.record(kA, &e));
  CHECK_FALSE(e);
  CHECK(s.fake.calls(CallKind::event_record) == 0);
  CHECK(s.sync.take(&e) == Error::ok);  // the next creation works
  CHECK(e);
}

TEST_CASE("stream sync: order_after waits on the GPU only for unfinished work",
          "[component][stream_sync]") {
  Sync s;
  s.sync.order_after(kA, kB);  // nothing queued on A
  CHECK(s.fake.waits().empty());
  s.fake.enqueue_work(0, kA);
  s.sync.order_after(kA, kB);
  REQUIRE(waits_between(s.fake, kB, kA) == 1);
  CHECK(s.fake.waits().back().until == 1);
  CHECK(s.calls(CallKind::synchronize) == 0);
  CHECK_FALSE(s.fake.stream_idle(0, kA));  // GPU-side: the host did not wait
  s.fake.enqueue_work(0, kB);
  s.fake.complete_work(0, kB);             // B's later work runs after A's
  CHECK(s.fake.stream_idle(0, kA));
  CHECK(s.sync.idle_events() == 1);        // the event went back to the pool
}

TEST_CASE("stream sync: order_after falls back to a device synchronization",
          "[component][stream_sync]") {
  Sync s;
  s.fake.enqueue_work(0, kA);
  SECTION("when the event cannot be recorded") {
    s.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  }
  SECTION("when the wait cannot be queued") {
    s.fake.fail_call(CallKind::stream_wait_event, 1, Status::device_error);
  }
  SECTION("when the event cannot be queried") {
    s.fake.fail_call(CallKind::event_query, 1, Status::device_error);
  }
  s.sync.order_after(kA, kB);
  CHECK(s.calls(CallKind::synchronize) == 1);
  CHECK(s.fake.stream_idle(0, kA));
  CHECK(waits_between(s.fake, kB, kA) == 0);
}

TEST_CASE("stream sync: wait_for waits for one stream, else for the device",
          "[component][stream_sync]") {
  Sync s;
  s.fake.enqueue_work(0, kA);
  s.fake.enqueue_work(0, kB);
  bool whole_device = false;
  REQUIRE(s.sync.wait_for(kA, &whole_device) == Error::ok);
  CHECK_FALSE(whole_device);
  CHECK(s.fake.stream_idle(0, kA));
  CHECK_FALSE(s.fake.stream_idle(0, kB));  // only A was waited for
  CHECK(s.calls(CallKind::synchronize) == 0);

  s.fake.enqueue_work(0, kA);
  s.fake.fail_call(CallKind::event_synchronize, 1, Status::device_error);
  REQUIRE(s.sync.wait_for(kA, &whole_device) == Error::ok);
  CHECK(whole_device);
  CHECK(s.calls(CallKind::synchronize) == 1);
  CHECK(s.fake.stream_idle(0, kB));  // the device was waited for

  whole_device = false;
  s.fake.enqueue_work(0, kA);
  s.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  s.fake.fail_call(CallKind::synchronize, 1, Status::device_error);
  CHECK(s.sync.wait_for(kA, &whole_device) == Error::device_error);
  CHECK(whole_device);
  CHECK_FALSE(s.fake.stream_idle(0, kA));  // nothing was waited for
}

TEST_CASE("stream sync: a fence makes every waiter wait on the hub after all sources",
          "[component][stream_sync]") {
  Sync s;
  s.fake.enqueue_work(0, kA);
  s.fake.enqueue_work(0, kB);
  const StreamHandle sources[] = {kA, 0, kB};
  const StreamHandle waiters[] = {kC, 0, kA};
  REQUIRE(s.sync.fence(sources, waiters));
  CHECK(waits_between(s.fake, 0, kA) == 1);
  CHECK(waits_between(s.fake, 0, kB) == 1);
  CHECK(waits_between(s.fake, kC, 0) == 1);
  CHECK(waits_between(s.fake, kA, 0) == 1);
  CHECK(waits_between(s.fake, 0, 0) == 0);  // the hub does not wait on itself
  CHECK(s.fake.waits().size() == 4);
  // The gather comes before the scatter.
  const int last_source = std::max(wait_position(s.fake, 0, kA), wait_position(s.fake, 0, kB));
  CHECK(last_source < wait_position(s.fake, kC, 0));
  CHECK(last_source < wait_position(s.fake, kA, 0));
  CHECK(s.calls(CallKind::event_record) == 3);  // A, B and the hub: 0 as a source is skipped
  CHECK(s.calls(CallKind::synchronize) == 0);
  CHECK_FALSE(s.fake.stream_idle(0, kA));  // GPU-side only
}

TEST_CASE("stream sync: a fence reports failure only when the synchronization fails too",
          "[component][stream_sync]") {
  Sync s;
  s.fake.enqueue_work(0, kA);
  const StreamHandle sources[] = {kA};
  const StreamHandle waiters[] = {kC};
  s.fake.fail_call(CallKind::stream_wait_event, 1, Status::device_error);
  CHECK(s.sync.fence(sources, waiters));
  CHECK(s.calls(CallKind::synchronize) == 1);
  CHECK(s.fake.stream_idle(0, kA));

  s.fake.enqueue_work(0, kA);
  s.fake.fail_call(CallKind::event_record, 2, Status::device_error);  // the hub's record
  s.fake.fail_call(CallKind::synchronize, 1, Status::device_error);
  CHECK_FALSE(s.sync.fence(sources, waiters));
  CHECK(s.calls(CallKind::synchronize) == 2);
  CHECK(waits_between(s.fake, kC, 0) == 0);
}

TEST_CASE("stream sync: completed polls or blocks for an event", "[component][stream_sync]") {
  Sync s;
  s.fake.enqueue_work(0, kA);
  StreamSync::Event e;
  REQUIRE(s.sync.record(kA, &e));
  s.fake.enqueue_work(0, kA);  // after the record: not part of the event
  CHECK(s.sync.completed(e, Wait::poll) == Status::not_ready);
  CHECK(s.sync.completed(e, Wait::block) == Status::ok);
  CHECK(s.sync.completed(e, Wait::poll) == Status::ok);
  CHECK_FALSE(s.fake.stream_idle(0, kA));  // the later work is still queued
  s.fake.fail_call(CallKind::event_query, 1, Status::device_error);
  CHECK(s.sync.completed(e, Wait::poll) == Status::device_error);
}
