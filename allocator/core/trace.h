// The allocation trace: a ring buffer of the last N events of one device (CUDALLOC_CONF
// trace:N), in the vocabulary of PyTorch's memory snapshots so that its tools read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/device.h"

namespace cudalloc {

enum class TraceAction : std::uint8_t {
  alloc,           // a block handed to a caller
  free_requested,  // the caller freed it
  free_completed,  // its memory became reusable (after stream events, if any)
  segment_alloc,   // device memory obtained from the driver
  segment_free,    // device memory returned to the driver
  oom,             // an allocation failed for lack of memory
  segment_map,     // a physical page mapped into a paged segment at addr
  segment_unmap,   // a physical page unmapped from a paged segment at addr
};

const char* trace_action_name(TraceAction action);
// The action named `name`, or false.
bool trace_action_from_name(const char* name, TraceAction* action);

struct TraceEvent {
  TraceAction action;
  std::uintptr_t addr;
  std::size_t size;
  device::StreamHandle stream;
  std::int64_t time_us;  // microseconds since the Unix epoch
  // The device's reserved_bytes once the event happened (the stats' definition: device memory
  // held from the driver, each physical page once however many addresses map it; the host
  // tier not in it). Sums of segment_* events cannot give it: a page mapped at two addresses
  // has two segment_map events, and physical pages come and go without one.
  std::size_t reserved;
};

class TraceRing {
 public:
  explicit TraceRing(std::size_t capacity) : capacity_(capacity) {}

  bool enabled() const { return capacity_ > 0; }
  void record(TraceAction action, std::uintptr_t addr, std::size_t size,
              device::StreamHandle stream, std::size_t reserved);
  // The retained events, oldest first.
  std::vector<TraceEvent> events() const;
  // Events recorded but overwritten since.
  std::uint64_t dropped() const { return recorded_ > events_.size() ? recorded_ - events_.size() : 0; }

 private:
  std::size_t capacity_;
  std::vector<TraceEvent> events_;
  std::size_t next_ = 0;  // slot of the next event once the ring is full
  std::uint64_t recorded_ = 0;
};

}  // namespace cudalloc
