#include "replay/plan.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "core/device_allocator.h"

namespace cudalloc::replay {
namespace {

std::string hex(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

std::vector<int> trace_devices(const std::vector<snapshot::TraceRecord>& events) {
  std::set<int> devices;
  for (const auto& e : events) devices.insert(e.device);
  return {devices.begin(), devices.end()};
}

bool make_plan(const std::vector<snapshot::TraceRecord>& events, int device,
               bool skip_inconsistent, Plan* plan, std::string* error) {
  struct Live {
    std::uint32_t slot;
    std::uint64_t size;
    std::size_t index;
  };
  std::unordered_map<std::uint64_t, Live> live;
  std::vector<std::uint32_t> free_slots;
  std::uint64_t live_bytes = 0;
  plan->device = device;
  auto inconsistent = [&](std::size_t index, const std::string& what) {
    if (skip_inconsistent) {
      ++plan->skipped_events;
      return true;
    }
    *error = "inconsistent trace at event " + std::to_string(index) + " (device " +
             std::to_string(device) + "): " + what +
             "; --skip-inconsistent skips such events";
    return false;
  };
  std::uint64_t local = 0;  // how many of the device's events came before events[i]
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.device != device) continue;
    const std::uint64_t event = local++;
    if (e.action == TraceAction::alloc) {
      // A size no allocator accepts (a wrapped negative size, a corrupt field) is a broken
      // trace, not an out-of-memory to count: a model would round it and wrap.
      if (e.size > DeviceAllocator::kMaxRequest) {
        *error = "malformed trace at event " + std::to_string(i) + " (device " +
                 std::to_string(device) + "): alloc of " + std::to_string(e.size) +
                 " bytes, more than any device holds (at most " +
                 std::to_string(DeviceAllocator::kMaxRequest) + ")";
        return false;
      }
      if (auto it = live.find(e.addr); it != live.end()) {
        if (!inconsistent(i, "alloc at " + hex(e.addr) + ", which is still live since event " +
                                 std::to_string(it->second.index))) {
          return false;
        }
        continue;
      }
      std::uint32_t slot = plan->slots;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        ++plan->slots;
      }
      live.emplace(e.addr, Live{slot, e.size, i});
      live_bytes += e.size;
      plan->peak_live_bytes = std::max(plan->peak_live_bytes, live_bytes);
      plan->ops.push_back(ReplayOp{ReplayOp::alloc, slot, e.size, e.stream});
      plan->op_events.push_back(event);
      ++plan->alloc_events;
    } else if (e.action == TraceAction::free_completed) {
      auto it = live.find(e.addr);
      if (it == live.end()) {
        if (!inconsistent(i, "free of " + hex(e.addr) + ", which is not live")) return false;
        continue;
      }
      plan->ops.push_back(ReplayOp{ReplayOp::free, it->second.slot, it->second.size, e.stream});
      plan->op_events.push_back(event);
      free_slots.push_back(it->second.slot);
      live_bytes -= it->second.size;
      live.erase(it);
      ++plan->free_events;
    } else {
      ++plan->ignored_events;
    }
  }
  return true;
}

}  // namespace cudalloc::replay
