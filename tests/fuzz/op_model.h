// The operation fuzzer's own model of what the allocator has handed out, independent of the
// allocator's data structures, so that it can catch what validate() cannot see.
//
//   ShadowHeap  every live allocation as an address interval. Adding one that overlaps a live
//               one is a violation: the allocator handed out the same bytes twice.
//   patterns    each live allocation gets bytes derived from its tag (a repeated word),
//               written through the fake device's real host memory and verified on free. This
//               catches reuse that intervals cannot: two virtual ranges mapping one physical
//               range (FakeDevice's virtual memory is a real shared mapping).
//   quarantine  memory freed after record_stream on other streams must not be handed out
//               again before the work queued on those streams before the free has completed.
//               The model records its own event on each such stream at the free (on the fake
//               device directly) and keeps the interval until every event has completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "device/fake_device.h"

namespace cudalloc::fuzz {

using device::EventHandle;
using device::FakeDevice;
using device::StreamHandle;

struct Allocation {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // requested bytes (> 0)
  int device = 0;
  StreamHandle stream = 0;
  std::uint64_t tag = 0;  // unique per allocation: seeds its pattern
  std::vector<StreamHandle> uses;  // streams named by record_stream
};

class ShadowHeap {
 public:
  // The live allocation whose bytes intersect [addr, addr + size), or nullptr.
  const Allocation* overlapping(std::uintptr_t addr, std::size_t size) const;
  // The live allocation that starts at / contains `addr`, or nullptr.
  Allocation* starting_at(std::uintptr_t addr);
  const Allocation* containing(std::uintptr_t addr) const;
  // Requires: no overlap with a live allocation.
  void add(const Allocation& a);
  // Requires: an allocation starts at `addr`.
  Allocation remove(std::uintptr_t addr);
  // The i-th live allocation in address order (i < size()); O(i), the heap is small.
  Allocation& nth(std::size_t i);
  std::size_t size() const { return live_.size(); }
  std::size_t count_on(int device) const;
  std::vector<std::uintptr_t> addresses() const;
  void clear() { live_.clear(); }

 private:
  std::map<std::uintptr_t, Allocation> live_;  // by start address
};

// Writes the allocation's pattern: all bytes of small allocations; the first and last 256
// bytes and 64 bytes at every 1 MiB-aligned address of larger ones (aligned on absolute
// addresses, so that overlapping allocations write the same places).
void write_pattern(const Allocation& a);
// Empty if the pattern is intact, else where it is not.
std::string check_pattern(const Allocation& a);

// Freed memory that must stay unused until events recorded on the fake device complete.
class Quarantine {
 public:
  explicit Quarantine(FakeDevice& fake) : fake_(fake) {}
  ~Quarantine() { clear(); }
  Quarantine(const Quarantine&) = delete;
  Quarantine& operator=(const Quarantine&) = delete;

  // Holds [a.addr, a.addr + a.size) until the work queued so far on every stream of a.uses
  // (on a.device) has completed.
  void hold(const Allocation& a);
  // The held interval intersecting [addr, addr + size) whose work is still pending, or null.
  const Allocation* pending_overlap(std::uintptr_t addr, std::size_t size);
  // Drops what is held on `device` (its memory went back wholesale: reset).
  void forget(int device);
  // Destroys the model's events.
  void clear();

 private:
  struct Held {
    Allocation allocation;
    std::vector<EventHandle> events;
  };
  bool record(int device, StreamHandle stream, EventHandle* event);
  void release_completed();

  FakeDevice& fake_;
  std::vector<Held> held_;
};

}  // namespace cudalloc::fuzz
