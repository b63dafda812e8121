// Stress: many threads on two simulated devices at once, for the ThreadSanitizer build
// (label concurrency). Workers allocate and free random sizes on their own streams, declare
// uses by other threads' streams (record_stream), queue and complete simulated work, and free
// through the Allocator's device lookup; meanwhile other threads empty the cache, validate,
// and read stats and memory info. Every allocation carries its owner's bytes at both ends,
// checked at free: memory handed to two threads at once shows up as a changed byte.
//
// Bounded by operation counts, not by time: the test proves the same thing on any machine.
#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

constexpr int kWorkers = 6;
constexpr int kOpsPerWorker = 2000;
constexpr int kDevices = 2;

// Catch2 assertions are not thread-safe: threads report here, the test checks at the end.
class Failures {
 public:
  void add(const std::string& what) {
    std::lock_guard lock(mutex_);
    if (first_.empty()) first_ = what;
    ++count_;
  }
  int count() const { return count_; }
  std::string first() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  mutable std::mutex mutex_;
  std::string first_;
  std::atomic<int> count_{0};
};

struct Held {
  unsigned char* p;
  std::size_t size;
  unsigned char mark;
};

StreamHandle stream_of(int worker, int which) { return StreamHandle(0x1000 + 2 * worker + which); }

void worker(Allocator& allocator, FakeDevice& fake, int id, Failures& failures) {
  std::mt19937_64 rng(std::uint64_t(id) * 104729 + 1);
  std::vector<Held> mine;
  Error err = Error::ok;
  for (int i = 0; i < kOpsPerWorker; ++i) {
    const int dev = int(rng() % kDevices);
    const StreamHandle stream = stream_of(id, int(rng() % 2));
    const unsigned roll = unsigned(rng() % 100);
    if (mine.empty() || roll < 50) {
      // Sizes spread over slabs, shared segments and own segments (up to 8 MiB).
      const std::size_t size = 1 + rng() % (std::size_t{1} << (rng() % 24));
      void* p = nullptr;
      DeviceAllocator* d = allocator.device(dev, &err);
      if (d == nullptr) {
        failures.add("no allocator for a device");
        continue;
      }
      const Error e = d->allocate(size, stream, &p);
      if (e == Error::out_of_memory) continue;  // other threads may hold the memory
      if (e != Error::ok || p == nullptr) {
        failures.add(std::string("allocate: ") + error_name(e));
        continue;
      }
      const auto mark = static_cast<unsigned char>(id * 31 + i);
      auto* bytes = static_cast<unsigned char*>(p);
      bytes[0] = mark;
      bytes[size - 1] = mark;
      if (rng() % 4 == 0) {
        // A use by another thread's stream, or by this thread's other stream.
        const StreamHandle user = stream_of(int(rng() % kWorkers), int(rng() % 2));
        if (d->record_stream(p, user) != Error::ok) failures.add("record_stream of a live pointer");
        fake.enqueue_work(dev, user);
      }
      mine.push_back({bytes, size, mark});
    } else if (roll < 85) {
      const std::size_t k = rng() % mine.size();
      const Held h = mine[k];
      if (h.p[0] != h.mark || h.p[h.size - 1] != h.mark) failures.add("an allocation was overwritten");
      if (allocator.free_anywhere(h.p, DeviceAllocator::FreeOrder::stream) != Error::ok) {
        failures.add("free of a live pointer failed");
      }
      mine[k] = mine.back();
      mine.pop_back();
    } else if (roll < 95) {
      fake.enqueue_work(dev, stream);
    } else {
      fake.complete_work(dev, stream);
    }
  }
  for (const Held& h : mine) {
    if (h.p[0] != h.mark || h.p[h.size - 1] != h.mark) failures.add("an allocation was overwritten");
    if (allocator.free_anywhere(h.p, DeviceAllocator::FreeOrder::stream) != Error::ok) {
      failures.add("final free failed");
    }
  }
}

// Empties caches, validates, and reads stats and memory info until the workers are done
// (at least once).
void observer(Allocator& allocator, FakeDevice& fake, const std::atomic<int>& running,
              Failures& failures) {
  do {
    allocator.for_each_device([&](DeviceAllocator& d) {
      if (d.empty_cache() != Error::ok) failures.add("empty_cache failed");
      const std::string problem = d.validate();
      if (!problem.empty()) failures.add("validate: " + problem);
      const Stats s = d.stats();
      if (s.allocated_bytes.current > s.active_bytes.current ||
          s.active_bytes.current > s.reserved_bytes.current) {
        failures.add("stats: allocated <= active <= reserved does not hold");
      }
      std::size_t free_bytes = 0, total = 0;
      if (d.memory_info(&free_bytes, &total) != Error::ok || free_bytes > total) {
        failures.add("memory_info");
      }
    });
    fake.complete_all();  // lets pending frees finish now and then
    std::this_thread::yield();
  } while (running > 0);
}

}  // namespace

TEST_CASE("stress: threads on their own streams of two devices with observers",
          "[concurrency][stress]") {
  FakeDevice::Options o = fake_options(512 * MiB);
  o.devices = kDevices;
  o.manual_streams = true;
  FakeDevice fake(o);
  Allocator allocator(fake, Settings{});
  Failures failures;
  std::atomic<int> running{kWorkers};
  std::thread watch(observer, std::ref(allocator), std::ref(fake), std::cref(running),
                    std::ref(failures));
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      worker(allocator, fake, t, failures);
      --running;
    });
  }
  for (auto& t : workers) t.join();
  watch.join();

  INFO(failures.first());
  CHECK(failures.count() == 0);
  fake.complete_all();
  for (int dev = 0; dev < kDevices; ++dev) {
    Error err = Error::ok;
    DeviceAllocator* d = allocator.device(dev, &err);
    REQUIRE(d != nullptr);
    CHECK(d->stats().allocated_count.current == 0);
    REQUIRE(d->empty_cache() == Error::ok);
    CHECK(d->validate().empty());
    CHECK(d->stats().reserved_bytes.current == 0);
    CHECK(fake.used_bytes(dev) == 0);
  }
}
