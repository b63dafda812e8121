// A replay plan: a trace turned into the operations an allocator must perform, with every
// address already resolved to a slot, so that timing a replay measures the allocator alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/trace_reader.h"

namespace cudalloc::replay {

struct ReplayOp {
  enum Kind : std::uint8_t { alloc, free };
  Kind kind;
  std::uint32_t slot;    // where the allocation lives between its alloc and free
  std::uint64_t size;
  std::uint64_t stream;
};

struct Plan {
  int device = 0;
  std::vector<ReplayOp> ops;
  // op_events[i]: the index, among the device's events, of the event op i replays. Apart from
  // ops so that the timed replay reads no more than it did.
  std::vector<std::uint64_t> op_events;
  std::uint32_t slots = 0;           // most allocations live at once
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t alloc_events = 0;
  std::uint64_t free_events = 0;
  std::uint64_t skipped_events = 0;  // inconsistent events skipped on request
  std::uint64_t ignored_events = 0;  // free_requested, segment and oom events
};

// Builds the plan of `device` from the trace. Replays alloc and free_completed. An
// inconsistent event (a free of an address that is not live, a second alloc at a live
// address) fails with its index, or is skipped and counted with skip_inconsistent.
bool make_plan(const std::vector<snapshot::TraceRecord>& events, int device,
               bool skip_inconsistent, Plan* plan, std::string* error);

// The devices that have events, in ascending order.
std::vector<int> trace_devices(const std::vector<snapshot::TraceRecord>& events);

}  // namespace cudalloc::replay
