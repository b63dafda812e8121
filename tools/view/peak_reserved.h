// Peak reserved and peak live memory of one device: one definition for `view` (the panel and
// the timeline), `inspect` and `replay`. Reserved is cudalloc's reserved_bytes stat (device
// memory held from the driver, each physical page once, the host tier beside it), live its
// active_bytes (allocated or waiting for a stream's event).
//   - from cudalloc's stats when the snapshot has them: they cover the whole run, and are
//     what `replay` reports;
//   - else from the trace's timeline (timeline.h), which counts reserved the same way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "view/timeline.h"

namespace cudalloc::view {

struct DevicePeaks {
  std::string source;  // "cudalloc stats", "trace", or "" (unknown)
  std::uint64_t reserved = 0, live = 0;
  bool known() const { return !source.empty(); }
};

// `device_info`: the device's entry of cudalloc.devices[] (or null).
DevicePeaks device_peaks(const Timeline& timeline, const nlohmann::json* device_info);

}  // namespace cudalloc::view
