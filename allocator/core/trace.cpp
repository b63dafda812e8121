#include "core/trace.h"

#include <chrono>
#include <cstring>

namespace cudalloc {
namespace {
constexpr const char* kNames[] = {"alloc",         "free_requested", "free_completed",
                                  "segment_alloc", "segment_free",   "oom",
                                  "segment_map",   "segment_unmap"};
}  // namespace

const char* trace_action_name(TraceAction action) {
  return kNames[static_cast<int>(action)];
}

bool trace_action_from_name(const char* name, TraceAction* action) {
  for (int i = 0; i < static_cast<int>(sizeof kNames / sizeof kNames[0]); ++i) {
    if (std::strcmp(name, kNames[i]) == 0) {
      *action = static_cast<TraceAction>(i);
      return true;
    }
  }
  return false;
}

void TraceRing::record(TraceAction action, std::uintptr_t addr, std::size_t size,
                       device::StreamHandle stream, std::size_t reserved) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const TraceEvent e{action, addr, size, stream,
                     std::chrono::duration_cast<std::chrono::microseconds>(now).count(), reserved};
  ++recorded_;
  if (events_.size() < capacity_) {
    events_.push_back(e);
    return;
  }
  events_[next_] = e;
  next_ = (next_ + 1) % capacity_;
}

std::vector<TraceEvent> TraceRing::events() const {
  std::vector<TraceEvent> out;
  out.reserve(events_.size());
  out.insert(out.end(), events_.begin() + static_cast<long>(next_), events_.end());
  out.insert(out.end(), events_.begin(), events_.begin() + static_cast<long>(next_));
  return out;
}

}  // namespace cudalloc
