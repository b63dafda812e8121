// DeferredFrees: record_stream uses, pending and unfenced frees, directly on a FakeDevice
// with a FreeCompletion that records what completed.
#include "component_fixture.h"
#include "core/captures.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kOwn = 0x10;
constexpr StreamHandle kOther = 0x20;
constexpr StreamHandle kProgram = 0x30;

struct Completions final : FreeCompletion {
  void complete_free(Owner owner, std::uintptr_t addr) override {
    owners.push_back(owner);
    addrs.push_back(addr);
  }
  std::vector<Owner> owners;
  std::vector<std::uintptr_t> addrs;
};

struct Frees {
  explicit Frees(StreamVisibility streams = StreamVisibility::unseen_possible)
      : fake(manual_device()), sync(fake, 0), ledger(0), deferred(sync, ledger, done, streams) {}
  // Frees `a` in stream order after a use on kOther with work still queued there.
  void free_used_elsewhere(FakeAllocation& a) {
    deferred.note_use(a.entry, kOther);
    fake.enqueue_work(0, kOther);
    deferred.free_in_stream_order(a.entry);
  }
  bool needs_device_sync() const {
    bool needs = false;
    deferred.for_each([&](const PendingFree& p) { needs |= p.needs_device_sync; });
    return needs;
  }
  FakeDevice fake;
  StreamSync sync;
  Ledger ledger;
  Completions done;
  DeferredFrees deferred;
};

}  // namespace

TEST_CASE("deferred frees: without uses by other streams a free completes at once",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.deferred.note_use(a.entry, kOwn);  // its own stream: stream order covers it
  CHECK_FALSE(a.entry.owner.has_stream_uses());
  CHECK_FALSE(f.deferred.has_stream_uses(a.entry.key));
  f.deferred.free_in_stream_order(a.entry);
  REQUIRE(f.done.addrs == std::vector<std::uintptr_t>{a.entry.key});
  CHECK(f.done.owners[0] == Owner::of(&a.block));
  CHECK_FALSE(f.deferred.has_pending());
  CHECK(f.fake.calls(CallKind::event_record) == 0);
}

TEST_CASE("deferred frees: a free used by another stream waits for that stream's work",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.deferred.note_use(a.entry, kOther);
  f.deferred.note_use(a.entry, kOther);  // once per stream
  CHECK(a.entry.owner.has_stream_uses());
  CHECK(f.deferred.has_stream_uses(a.entry.key));
  f.fake.enqueue_work(0, kOther);
  f.deferred.free_in_stream_order(a.entry);
  CHECK(f.done.addrs.empty());
  CHECK(f.deferred.has_pending());
  CHECK(a.block.state == Block::State::pending);
  CHECK(f.ledger.stats().pending_frees.current == 1);
  CHECK(f.fake.calls(CallKind::event_record) == 1);
  CHECK_FALSE(f.deferred.has_stream_uses(a.entry.key));  // the uses went with the free
  f.deferred.poll(Wait::poll);
  CHECK(f.done.addrs.empty());
  f.fake.enqueue_work(0, kOwn);  // the owner's own stream does not matter
  f.fake.complete_work(0, kOther);
  f.deferred.poll(Wait::poll);
  REQUIRE(f.done.addrs.size() == 1);
  CHECK(f.done.owners[0] == Owner::of(&a.block));  // untagged
  CHECK_FALSE(f.done.owners[0].has_stream_uses());
  CHECK_FALSE(f.deferred.has_pending());
  CHECK(f.fake.calls(CallKind::synchronize) == 0);
}

TEST_CASE("deferred frees: poll(Wait::block) waits for the other stream",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.free_used_elsewhere(a);
  REQUIRE(f.deferred.has_pending());
  f.deferred.poll(Wait::block);
  CHECK(f.done.addrs.size() == 1);
  CHECK(f.fake.stream_idle(0, kOther));
  CHECK(f.fake.calls(CallKind::synchronize) == 0);  // an event wait, not the device
  CHECK(f.fake.calls(CallKind::event_synchronize) == 1);
}

TEST_CASE("deferred frees: an event that cannot be recorded falls back to the device",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  f.free_used_elsewhere(a);
  CHECK(f.done.addrs.size() == 1);  // complete after the synchronization
  CHECK(f.fake.calls(CallKind::synchronize) == 1);
  CHECK(f.fake.stream_idle(0, kOther));
  CHECK_FALSE(f.deferred.has_pending());
}

TEST_CASE("deferred frees: an event in error during a poll falls back to the device",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.free_used_elsewhere(a);
  f.fake.fail_call(CallKind::event_query, 1, Status::device_error);
  f.deferred.poll(Wait::poll);
  CHECK(f.done.addrs.size() == 1);
  CHECK(f.fake.calls(CallKind::synchronize) == 1);
  CHECK(f.fake.stream_idle(0, kOther));
}

TEST_CASE("deferred frees: a failed synchronization keeps the memory out of use",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  f.fake.fail_call(CallKind::synchronize, 1, Status::device_error, 3);
  f.free_used_elsewhere(a);
  CHECK(f.done.addrs.empty());
  REQUIRE(f.deferred.has_pending());
  CHECK(f.needs_device_sync());
  CHECK(a.block.state == Block::State::pending);
  f.fake.complete_work(0, kOther);  // the work is done, but nobody could prove it
  f.deferred.poll(Wait::poll);
  f.deferred.poll(Wait::block);
  CHECK(f.done.addrs.empty());
  CHECK(f.fake.calls(CallKind::synchronize) == 3);
  f.deferred.poll(Wait::poll);  // the fourth synchronization succeeds
  CHECK(f.done.addrs.size() == 1);
  CHECK_FALSE(f.deferred.has_pending());
}

TEST_CASE("deferred frees: device-ordered frees wait for one device synchronization",
          "[component][deferred_frees]") {
  // Work on streams nobody registered (a static runtime's) may still use the memory: only a
  // synchronization of the device proves it done, and one serves every free waiting.
  Frees f;
  FakeAllocation a(kOwn, 0x10000);
  FakeAllocation b(kOwn, 0x20000);
  f.deferred.note_use(a.entry, kOther);
  f.fake.enqueue_work(0, kProgram);
  f.deferred.free_in_device_order(a.entry);
  f.deferred.free_in_device_order(b.entry);
  CHECK(f.done.addrs.empty());
  CHECK(f.deferred.has_unfenced());
  CHECK(f.deferred.unfenced_bytes() == a.block.size + b.block.size);
  CHECK_FALSE(f.deferred.has_stream_uses(a.entry.key));  // the fence covers every stream
  CHECK(a.block.state == Block::State::pending);
  CHECK(f.ledger.stats().pending_frees.current == 2);
  f.deferred.poll(Wait::block);  // pending frees only
  CHECK(f.done.addrs.empty());
  f.deferred.fence();
  CHECK(f.done.addrs == std::vector<std::uintptr_t>{0x10000, 0x20000});
  CHECK_FALSE(f.done.owners[0].has_stream_uses());
  CHECK_FALSE(f.deferred.has_unfenced());
  CHECK(f.deferred.unfenced_bytes() == 0);
  CHECK(f.fake.calls(CallKind::synchronize) == 1);
  CHECK(f.fake.stream_idle(0, kProgram));
  CHECK(f.fake.calls(CallKind::event_record) == 0);  // no event can order unseen streams
}

TEST_CASE("deferred frees: a fence whose synchronization fails completes nothing",
          "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn);
  f.deferred.free_in_device_order(a.entry);
  f.fake.fail_call(CallKind::synchronize, 1, Status::device_error, 2);
  f.deferred.fence();
  CHECK(f.done.addrs.empty());
  CHECK(f.deferred.has_unfenced());
  f.deferred.fence();  // the second failure
  CHECK(f.done.addrs.empty());
  f.deferred.fence();
  CHECK(f.done.addrs.size() == 1);
  CHECK_FALSE(f.deferred.has_unfenced());
}

TEST_CASE("deferred frees, all streams seen: with no registered stream a free completes at once and owes one legacy event",
          "[component][deferred_frees]") {
  // Per-thread default streams are never created through a call: before the memory is
  // handed out again, one event on the legacy stream orders every blocking stream.
  Frees f(StreamVisibility::all_seen);
  FakeAllocation a(kOwn, 0x10000);
  FakeAllocation b(kOwn, 0x20000);
  f.deferred.note_use(a.entry, kOther);
  f.fake.enqueue_work(0, kOther);
  f.deferred.free_in_device_order(a.entry);
  f.deferred.free_in_device_order(b.entry);
  CHECK(f.done.addrs.size() == 2);
  CHECK_FALSE(f.done.owners[0].has_stream_uses());
  CHECK_FALSE(f.deferred.has_unfenced());
  CHECK_FALSE(f.deferred.has_stream_uses(a.entry.key));  // the legacy event covers every stream
  CHECK(f.fake.calls(CallKind::event_record) == 0);
  f.deferred.order_before_reuse();  // one event for both frees
  CHECK(f.fake.calls(CallKind::event_record) == 1);
  f.deferred.order_before_reuse();  // nothing owed any more
  CHECK(f.fake.calls(CallKind::event_record) == 1);
  CHECK(f.fake.calls(CallKind::stream_wait_event) == 0);
  CHECK(f.fake.calls(CallKind::synchronize) == 0);
  // An event that cannot be recorded: the device is synchronized instead.
  FakeAllocation c(kOwn, 0x30000);
  f.deferred.free_in_device_order(c.entry);
  f.fake.fail_call(CallKind::event_record, 1, Status::device_error);
  f.deferred.order_before_reuse();
  CHECK(f.fake.calls(CallKind::synchronize) == 1);
}

TEST_CASE("deferred frees, all streams seen: with a registered stream device-ordered frees wait for a fence",
          "[component][deferred_frees]") {
  Frees f(StreamVisibility::all_seen);
  f.deferred.register_stream(kProgram);
  REQUIRE(f.deferred.streams_registered());
  FakeAllocation a(kOwn, 0x10000);
  FakeAllocation b(kOwn, 0x20000);
  f.fake.enqueue_work(0, kProgram);
  f.deferred.free_in_device_order(a.entry);
  f.deferred.free_in_device_order(b.entry);
  CHECK(f.done.addrs.empty());
  CHECK(f.deferred.has_unfenced());
  CHECK(a.block.state == Block::State::pending);
  CHECK(f.ledger.stats().pending_frees.current == 2);
  f.deferred.poll(Wait::block);  // pending frees only
  CHECK(f.done.addrs.empty());
  const int waits_before = waits_between(f.fake, 0, kProgram);
  f.deferred.fence();
  CHECK(f.done.addrs == std::vector<std::uintptr_t>{0x10000, 0x20000});
  CHECK_FALSE(f.deferred.has_unfenced());
  CHECK(waits_between(f.fake, 0, kProgram) == waits_before + 1);  // gather
  CHECK(waits_between(f.fake, kProgram, 0) == 2);  // at registration and at the fence
  CHECK_FALSE(f.fake.stream_idle(0, kProgram));    // the host never waited
  CHECK(f.fake.calls(CallKind::synchronize) == 0);
}

TEST_CASE("deferred frees, all streams seen: a fence that orders nothing completes nothing",
          "[component][deferred_frees]") {
  Frees f(StreamVisibility::all_seen);
  f.deferred.register_stream(kProgram);
  FakeAllocation a(kOwn);
  f.deferred.free_in_device_order(a.entry);
  f.fake.fail_call(CallKind::stream_wait_event, 1, Status::device_error);
  f.fake.fail_call(CallKind::synchronize, 1, Status::device_error, 2);
  f.deferred.fence();
  CHECK(f.done.addrs.empty());
  CHECK(f.deferred.has_unfenced());
  f.deferred.complete_after_device_sync();  // the second failure
  CHECK(f.done.addrs.empty());
  f.deferred.complete_after_device_sync();
  CHECK(f.done.addrs.size() == 1);
  CHECK_FALSE(f.deferred.has_unfenced());
}

TEST_CASE("deferred frees, all streams seen: a new stream waits for all older work", "[component][deferred_frees]") {
  Frees f(StreamVisibility::all_seen);
  constexpr StreamHandle kSecond = 0x40;
  f.fake.enqueue_work(0, 0);
  f.deferred.register_stream(kProgram);
  CHECK(waits_between(f.fake, kProgram, 0) == 1);
  f.fake.enqueue_work(0, kProgram);
  f.deferred.register_stream(kSecond);
  CHECK(waits_between(f.fake, 0, kProgram) == 1);  // the older stream's work is gathered
  CHECK(waits_between(f.fake, kSecond, 0) == 1);   // and the new stream waits for it
  const auto waits = f.fake.waits().size();
  f.deferred.register_stream(kSecond);  // already registered: nothing more
  CHECK(f.fake.waits().size() == waits);
  // The new stream's work runs after the legacy stream's older work.
  f.fake.enqueue_work(0, kSecond);
  f.fake.complete_work(0, kSecond);
  CHECK(f.fake.stream_idle(0, 0));
  f.deferred.unregister_stream(kProgram);
  f.deferred.unregister_stream(kSecond);
  CHECK_FALSE(f.deferred.streams_registered());
  FakeAllocation a(kOwn);
  f.deferred.free_in_device_order(a.entry);
  CHECK(f.done.addrs.size() == 1);
}

TEST_CASE("deferred frees: forget drops every wait", "[component][deferred_frees]") {
  Frees f;
  FakeAllocation a(kOwn, 0x10000);
  FakeAllocation b(kOwn, 0x20000);
  FakeAllocation c(kOwn, 0x30000);
  f.free_used_elsewhere(a);
  f.deferred.note_use(c.entry, kOther);
  f.deferred.free_in_device_order(b.entry);
  REQUIRE(f.deferred.has_pending());
  REQUIRE(f.deferred.has_unfenced());
  f.deferred.forget();
  CHECK_FALSE(f.deferred.has_pending());
  CHECK_FALSE(f.deferred.has_unfenced());
  CHECK_FALSE(f.deferred.has_stream_uses(c.entry.key));
  f.fake.complete_all();
  f.deferred.poll(Wait::block);
  CHECK(f.done.addrs.empty());
}

TEST_CASE("deferred frees, all streams seen: during a capture a free waits, and no event goes on the legacy stream",
          "[component][deferred_frees][capture]") {
  // An operation on the legacy stream would end a capture of a blocking stream with an
  // error: the free made before the capture pays its event first; one made during it waits.
  Frees f(StreamVisibility::all_seen);
  FakeAllocation before(kOwn, 0x10000);
  FakeAllocation during(kOwn, 0x20000);
  f.deferred.free_in_device_order(before.entry);
  CHECK(f.done.addrs.size() == 1);
  f.deferred.order_before_reuse();  // what DeviceAllocator::before_capture does
  CHECK(f.fake.calls(CallKind::event_record) == 1);
  constexpr std::uintptr_t kCaptured = 0x2a;
  Captures::process().began(kCaptured);
  f.deferred.free_in_device_order(during.entry);
  CHECK(f.done.addrs.size() == 1);  // waits
  CHECK(f.deferred.has_unfenced());
  f.deferred.order_before_reuse();
  CHECK(f.fake.calls(CallKind::event_record) == 1);  // nothing on the legacy stream
  Captures::process().ended(kCaptured);
  f.deferred.fence();  // the next allocation after the capture
  CHECK(f.done.addrs.size() == 2);
  CHECK(f.fake.calls(CallKind::event_record) == 2);
}
