// StreamCheckpoints: events at known page epochs, directly on a FakeDevice with manual
// streams (work stays queued until a test or a host wait completes it).
#include "component_fixture.h"
#include "core/captures.h"
#include "core/stream_checkpoints.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kA = 0xa0;
constexpr StreamHandle kB = 0xb0;

struct Parts {
  Parts() : fake(manual_device()), sync(fake, 0), checkpoints(sync) {}
  std::uint64_t calls(CallKind kind) const { return fake.calls(kind); }
  // An event recorded on `stream` now, to ask later whether the work before it completed.
  EventHandle mark(StreamHandle stream) {
    EventHandle e = 0;
    REQUIRE(fake.event_create(0, &e) == Status::ok);
    REQUIRE(fake.event_record(0, e, stream) == Status::ok);
    return e;
  }
  bool done(EventHandle e) { return fake.event_query(e) == Status::ok; }
  FakeDevice fake;
  StreamSync sync;
  StreamCheckpoints checkpoints;
};

using Outcome = StreamCheckpoints::Outcome;

}  // namespace

TEST_CASE("stream checkpoints: a wait for a checkpoint leaves later work queued",
          "[component][stream_checkpoints]") {
  Parts p;
  p.fake.enqueue_work(0, kA);  // the last use of a page idle since epoch 5
  const EventHandle first_use = p.mark(kA);
  p.checkpoints.cover(kA, 5, 7);
  CHECK(p.checkpoints.count(kA) == 1);
  p.fake.enqueue_work(0, kA);  // queued after the checkpoint
  std::uint64_t settled = 0;
  CHECK(p.checkpoints.settle(kA, 5, &settled) == Outcome::waited);
  CHECK(settled == 7);
  CHECK(p.done(first_use));
  CHECK_FALSE(p.fake.stream_idle(0, kA));  // the later work was not waited for
  CHECK(p.checkpoints.count(kA) == 0);     // a completed checkpoint is forgotten
  // Nothing covers a page that became idle later.
  CHECK(p.checkpoints.settle(kA, 8, &settled) == Outcome::none);
}

TEST_CASE("stream checkpoints: the newest checkpoint covering a page is not recorded twice",
          "[component][stream_checkpoints]") {
  Parts p;
  p.checkpoints.cover(kA, 3, 4);
  p.checkpoints.cover(kA, 4, 6);  // covered by the one at 4
  CHECK(p.checkpoints.count(kA) == 1);
  CHECK(p.calls(CallKind::event_record) == 1);
  p.checkpoints.cover(kA, 5, 6);
  CHECK(p.checkpoints.count(kA) == 2);
  p.checkpoints.cover(kB, 5, 6);  // streams apart
  CHECK(p.checkpoints.count(kB) == 1);
  CHECK(p.calls(CallKind::event_record) == 3);
}

TEST_CASE("stream checkpoints: a wait takes the oldest checkpoint that covers the page",
          "[component][stream_checkpoints]") {
  Parts p;
  p.checkpoints.cover(kA, 1, 2);
  p.fake.enqueue_work(0, kA);
  p.checkpoints.cover(kA, 3, 4);
  const EventHandle before_third = p.mark(kA);
  p.fake.enqueue_work(0, kA);
  p.checkpoints.cover(kA, 5, 6);
  std::uint64_t settled = 0;
  CHECK(p.checkpoints.settle(kA, 3, &settled) == Outcome::waited);
  CHECK(settled == 4);
  CHECK(p.done(before_third));
  CHECK_FALSE(p.fake.stream_idle(0, kA));
  CHECK(p.checkpoints.count(kA) == 1);  // the one at 2 went with it, the one at 6 stays
  // A checkpoint that completed meanwhile costs no wait.
  p.fake.complete_work(0, kA);
  CHECK(p.checkpoints.settle(kA, 6, &settled) == Outcome::done);
  CHECK(settled == 6);
}

TEST_CASE("stream checkpoints: at most kPerStream per stream, the oldest forgotten",
          "[component][stream_checkpoints]") {
  Parts p;
  for (std::uint64_t e = 1; e <= StreamCheckpoints::kPerStream + 2; ++e) {
    p.checkpoints.cover(kA, e, e);
  }
  CHECK(p.checkpoints.count(kA) == StreamCheckpoints::kPerStream);
  // Epochs 1 and 2 are gone: a page idle since 1 waits for the oldest left, at 3.
  std::uint64_t settled = 0;
  CHECK(p.checkpoints.settle(kA, 1, &settled) == Outcome::done);
  CHECK(settled == 3);
  CHECK(p.sync.idle_events() == 2);  // the forgotten and the completed event went back
}

TEST_CASE("stream checkpoints: nothing is recorded while a graph is being captured",
          "[component][stream_checkpoints]") {
  Parts p;
  p.fake.set_capturing(0, kA, true);
  p.checkpoints.cover(kA, 1, 2);
  CHECK(p.checkpoints.count(kA) == 0);
  CHECK(p.calls(CallKind::event_record) == 0);
  p.fake.set_capturing(0, kA, false);
  // A capture elsewhere in the process (seen by the interposer) stops them too.
  Captures::process().began(0xc0);
  p.checkpoints.cover(kB, 1, 2);
  Captures::process().ended(0xc0);
  CHECK(p.checkpoints.count(kB) == 0);
  p.checkpoints.cover(kB, 1, 2);
  CHECK(p.checkpoints.count(kB) == 1);
  CHECK(p.fake.capture_violations() == 0);
}

TEST_CASE("stream checkpoints: failures record nothing or forget the stream",
          "[component][stream_checkpoints]") {
  Parts p;
  p.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  p.checkpoints.cover(kA, 1, 2);
  CHECK(p.checkpoints.count(kA) == 0);
  CHECK(p.sync.idle_events() == 1);  // the event taken for it went back
  p.checkpoints.cover(kA, 1, 2);
  p.fake.enqueue_work(0, kA);
  p.checkpoints.cover(kA, 3, 4);
  p.fake.fail_call(CallKind::event_synchronize, 1, Status::device_error);
  std::uint64_t settled = 0;
  CHECK(p.checkpoints.settle(kA, 3, &settled) == Outcome::failed);
  CHECK(settled == 0);
  CHECK(p.checkpoints.count(kA) == 0);  // the caller waits the slow way; nothing kept
}
