#include "device/device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "device/cuda_device.h"
#include "device/fake_device.h"
#include "util/units.h"

namespace cudalloc::device {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::out_of_memory: return "out_of_memory";
    case Status::invalid_value: return "invalid_value";
    case Status::not_ready: return "not_ready";
    case Status::not_supported: return "not_supported";
    case Status::no_device: return "no_device";
    case Status::device_error: return "device_error";
  }
  return "unknown";
}

const char* call_kind_name(CallKind k) {
  static constexpr const char* kNames[kCallKinds] = {
      "malloc", "free", "reserve", "unreserve", "create_physical", "release_physical", "map",
      "unmap", "set_access", "event_create", "event_destroy", "event_record", "event_query",
      "event_synchronize", "stream_wait_event", "synchronize", "copy", "host_alloc",
      "host_free", "export_physical", "import_physical", "zero"};
  const int i = static_cast<int>(k);
  return i >= 0 && i < kCallKinds ? kNames[i] : "unknown";
}

const char* call_slot_name(int slot) {
  return slot == kCallKinds ? "query" : call_kind_name(static_cast<CallKind>(slot));
}

bool parse_fake_spec(const char* spec, FakeDevice::Options* options) {
  // spec is "", ":CAPACITY" or ":CAPACITY:DEVICES"
  if (spec == nullptr || *spec == '\0') return true;
  if (*spec != ':') return false;
  const std::string rest(spec + 1);
  const auto colon = rest.find(':');
  std::size_t capacity = 0;
  if (!parse_bytes(rest.substr(0, colon), &capacity) || capacity == 0) return false;
  // Rounding up to the page size below must not wrap around to a tiny capacity.
  if (capacity > std::numeric_limits<std::size_t>::max() - options->granularity) return false;
  int devices = 1;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long n = std::strtol(rest.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || n < 1 || n > 64) return false;
    devices = static_cast<int>(n);
  }
  options->capacity = round_up(capacity, options->granularity);
  options->devices = devices;
  return true;
}

namespace {

Device* make_process_device() {
  const char* choice = std::getenv("CUDALLOC_DEVICE");
  if (choice != nullptr && std::strncmp(choice, "fake", 4) == 0) {
    FakeDevice::Options options;
    if (parse_fake_spec(choice + 4, &options)) return new (std::nothrow) FakeDevice(options);
    // The config layer is above us and owns logging; a bad spec is reported on stderr once.
    std::fprintf(stderr,
                 "cudalloc: CUDALLOC_DEVICE='%s' is not fake[:CAPACITY[:DEVICES]]; "
                 "using fake with 80G and 1 device\n", choice);
    return new (std::nothrow) FakeDevice(FakeDevice::Options{});
  }
  return make_cuda_device().release();
}

}  // namespace

Device& process_device() {
  // Intentionally leaked: allocations may be freed from static destructors that run after
  // ours would have.
  static Device* device = make_process_device();
  return *device;
}

}  // namespace cudalloc::device
