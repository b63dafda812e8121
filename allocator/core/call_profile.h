// CallProfile: where a stretch of the allocator's work spent its time in the device layer, for
// logs. It reads the device's call times (Device::call_times: a TimedDevice, which the runtime
// puts under the allocator when CUDALLOC_CONF has time_device_calls) when made, and summary()
// gives the calls and milliseconds of each kind since then, largest first.
//
// Costs nothing where the device does not time its calls: summary() is then "". The counts
// are the process device's: calls that other threads make meanwhile (for other devices, or
// outside the allocator's lock) count too.
#pragma once

#include <string>

#include "device/device.h"

namespace cudalloc {

class CallProfile {
 public:
  explicit CallProfile(const device::Device& device);

  // "; device calls 412.3 ms: copy 256 x 160.2 ms, unmap 3104 x 120.5 ms, ..." for the `most`
  // kinds that took longest since construction; "" where the device does not time its calls.
  std::string summary(int most = 8) const;

 private:
  const device::Device& device_;
  device::CallTimes start_;
  bool timed_ = false;
};

}  // namespace cudalloc
