#include "core/call_profile.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace cudalloc {

CallProfile::CallProfile(const device::Device& device)
    : device_(device), timed_(device.call_times(&start_)) {}

std::string CallProfile::summary(int most) const {
  device::CallTimes now;
  if (!timed_ || !device_.call_times(&now)) return {};
  std::array<int, device::CallTimes::kSlots> order;
  std::uint64_t total_ns = 0;
  for (int i = 0; i < device::CallTimes::kSlots; ++i) {
    order[static_cast<std::size_t>(i)] = i;
    now.calls[i] -= start_.calls[i];
    now.ns[i] -= start_.ns[i];
    total_ns += now.ns[i];
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return now.ns[a] > now.ns[b]; });
  char text[96];
  std::snprintf(text, sizeof text, "; device calls %.1f ms", double(total_ns) / 1e6);
  std::string out = text;
  int shown = 0;
  for (const int slot : order) {
    if (shown == most) break;
    if (now.calls[slot] == 0) continue;
    std::snprintf(text, sizeof text, "%s%s %llu x %.1f ms", shown == 0 ? ": " : ", ",
                  device::call_slot_name(slot), static_cast<unsigned long long>(now.calls[slot]),
                  double(now.ns[slot]) / 1e6);
    out += text;
    ++shown;
  }
  return out;
}

}  // namespace cudalloc
