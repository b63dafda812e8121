// Fault-injection sweep: every kind of device call the allocator makes, made to fail at every
// position it has in a representative workload.
//
// For each CallKind the workload uses (counted in a fault-free run) and each nth call of that
// kind, a fresh allocator runs the workload with that call failing. Each operation must give a
// result its contract allows (an allocation succeeds, possibly through a fallback, or fails
// cleanly with no pointer; frees of live pointers take effect; empty_cache, record_stream and
// set_memory_limit succeed), validate() must hold after every operation, and once faults are
// cleared, everything is freed and the cache emptied, the device must hold no memory and,
// after the allocator is destroyed, no event.
#include <vector>

#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr StreamHandle kS1 = 0x100, kS2 = 0x200, kS3 = 0x300;

// Runs the workload; allocations that fail cleanly are simply not used further.
class Workload {
 public:
  explicit Workload(Harness& h) : h_(h) {}

  void run() {
    // Small (slab), medium (shared segment) and large (own segment) allocations on 2 streams
    // (indices 0-9: S1, S2, S1, S2, ...), and 9 MiB more in S2's shared segment (index 10).
    for (std::size_t size : {1000ul, 100 * KiB, 300 * KiB, 3 * MiB, 25 * MiB}) {
      get(size, kS1);
      get(size, kS2);
    }
    get(9 * MiB, kS2);
    // Uses by other streams, with their work still running.
    record(0, kS2);
    record(1, kS1);
    record(8, kS3);
    h_.fake.enqueue_work(0, kS1);
    h_.fake.enqueue_work(0, kS2);
    h_.fake.enqueue_work(0, kS3);
    // Free S1's and one of S2's: the recorded ones become pending frees.
    for (std::size_t i = 0; i < 10; i += 2) put(i);
    put(1);
    // S2's segment is too full: it takes S1's wholly free one (an event on S1, a wait of S2).
    get(9 * MiB, kS2);
    // Past the device's capacity: the OOM path waits for pending frees, synchronizes and
    // returns free segments.
    get(25 * MiB, kS2);
    REQUIRE(h_.alloc->empty_cache() == Error::ok);
    h_.check();
    h_.fake.complete_work(0, kS3);
    get(4096, kS1);
    // Past a cap, with nothing left to release: a clean out-of-memory error.
    REQUIRE(h_.alloc->set_memory_limit(48 * MiB) == Error::ok);
    get(40 * MiB, kS3);
    REQUIRE(h_.alloc->set_memory_limit(0) == Error::ok);
    // Device-ordered frees with a registered stream: a fence when memory runs short.
    h_.alloc->register_stream(kS3);
    for (std::size_t i = 0; i < live_.size(); ++i) put(i, DeviceAllocator::FreeOrder::device);
    get(100 * MiB, kS1);
    // Idle pages of a stream whose work is still queued, taken by another stream: it waits
    // for that work on the GPU (an event, a stream wait).
    h_.fake.enqueue_work(0, kS1);
    put(live_.size() - 1);
    get(6 * MiB, kS3);
    h_.alloc->unregister_stream(kS3);
  }

  // Frees whatever is still live.
  void free_all() {
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] != nullptr) put(i);
    }
  }

 private:
  void get(std::size_t size, StreamHandle stream) {
    void* p = reinterpret_cast<void*>(1);
    const Error err = h_.alloc->allocate(size, stream, &p);
    INFO("allocate " << size << " on stream " << stream << ": " << last_error_message());
    if (err == Error::ok) {
      REQUIRE(p != nullptr);
    } else {
      REQUIRE((err == Error::out_of_memory || err == Error::device_error));
      REQUIRE(p == nullptr);
    }
    h_.check();
    live_.push_back(p);
  }
  void put(std::size_t i, DeviceAllocator::FreeOrder order = DeviceAllocator::FreeOrder::stream) {
    void* p = live_[i];
    if (p == nullptr) return;
    const Error err = h_.alloc->deallocate(p, order);
    INFO("free: " << last_error_message());
    REQUIRE(err == Error::ok);
    REQUIRE_FALSE(h_.alloc->owns(p));
    h_.check();
    live_[i] = nullptr;
  }
  void record(std::size_t i, StreamHandle stream) {
    if (live_[i] == nullptr) return;
    REQUIRE(h_.alloc->record_stream(live_[i], stream) == Error::ok);
    h_.check();
  }

  Harness& h_;
  std::vector<void*> live_;
};

FakeDevice::Options sweep_device() {
  FakeDevice::Options o = fake_options(120 * MiB);
  o.manual_streams = true;
  return o;
}

// Calls of each kind made by one fault-free run of the workload.
std::vector<std::uint64_t> baseline_calls() {
  Harness h(Settings{}, sweep_device());
  Workload w(h);
  w.run();
  std::vector<std::uint64_t> calls;
  for (int k = 0; k < device::kCallKinds; ++k) calls.push_back(h.fake.calls(CallKind(k)));
  return calls;
}

}  // namespace

TEST_CASE("the fault-free workload uses the device calls the sweep relies on", "[faults]") {
  const auto calls = baseline_calls();
  const auto used = [&](CallKind k) { return calls[static_cast<std::size_t>(k)] > 0; };
  for (CallKind k : {CallKind::event_create, CallKind::event_record, CallKind::event_query,
                     CallKind::event_synchronize, CallKind::stream_wait_event,
                     CallKind::synchronize}) {
    INFO(device::call_kind_name(k));
    CHECK(used(k));
  }
  // Device memory comes and goes either as plain allocations or as physical pages (virtual
  // memory), whichever the allocator uses for segments.
  CHECK((used(CallKind::malloc) || used(CallKind::create_physical)));
  CHECK((used(CallKind::free) || used(CallKind::release_physical)));
}

TEST_CASE("every device call of the workload can fail at every position", "[faults][sweep]") {
  const auto calls = baseline_calls();
  std::size_t runs = 0;
  for (int k = 0; k < device::kCallKinds; ++k) {
    const auto kind = CallKind(k);
    for (int nth = 1; nth <= int(calls[std::size_t(k)]); ++nth) {
      for (device::Status status : {device::Status::device_error, device::Status::out_of_memory}) {
        INFO(device::call_kind_name(kind) << " call " << nth << " fails with "
                                          << device::status_name(status));
        Harness h(Settings{}, sweep_device());
        Workload w(h);
        h.fake.fail_call(kind, nth, status);
        w.run();
        CHECK(h.fake.calls(kind) >= std::uint64_t(nth));  // the fault did fire
        h.fake.clear_faults();
        h.fake.complete_all();
        w.free_all();
        REQUIRE(h.alloc->empty_cache() == Error::ok);
        h.check();
        CHECK(h.stats().reserved_bytes.current == 0);
        CHECK(h.fake.used_bytes(0) == 0);
        h.alloc.reset();
        // A failed event_destroy may lose that one event; nothing else may leak.
        CHECK(h.fake.live_events() <= (kind == CallKind::event_destroy ? 1u : 0u));
        ++runs;
      }
    }
  }
  CHECK(runs > 0);
}
