// Fuzz target: the configuration strings a user controls.
//
//   CUDALLOC_CONF    parse_conf (api/options.cpp)
//   CUDALLOC_DEVICE  parse_fake_spec, the "fake[:CAPACITY[:DEVICES]]" suffix (device/device.cpp)
//
// Properties checked, beyond "does not crash" under ASan/UBSan:
//   - every setting stays inside the range its option documents, whatever the input;
//   - there are never more warnings than comma-separated items;
//   - the settings round-trip: writing every option back as key:value (with the option's own
//     getter) and parsing that into default settings gives no warning and the same values;
//   - an accepted fake spec gives at least one device and a non-zero capacity that is a
//     multiple of the page size.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/options.h"
#include "device/fake_device.h"

namespace {

using cudalloc::Settings;

[[noreturn]] void violation(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_conf: %s\ninput: '%.*s'\n", what, int(input.size()), input.data());
  std::abort();
}

// One "key:value" per option with a value (paths may be empty: then they are not set).
std::string render(const Settings& s) {
  std::string out;
  for (const cudalloc::Option& o : cudalloc::options()) {
    const std::string value = o.get(s);
    if (value.empty()) continue;
    out += (out.empty() ? "" : ",") + std::string(o.key) + ":" + value;
  }
  return out;
}

void check_ranges(const Settings& s, std::string_view input) {
  constexpr std::size_t kNoMax = std::size_t{1} << 60;  // as in options.cpp
  if (s.limit > kNoMax) violation("limit out of range", input);
  if (!(s.fraction > 0.0 && s.fraction <= 1.0)) violation("fraction out of (0, 1]", input);
  if (s.slab_max < 256 || s.slab_max > (1u << 20)) violation("slab_max out of range", input);
  if (s.large_segment < (2u << 20) || s.large_segment > kNoMax) {
    violation("large_segment out of range", input);
  }
  if (s.slab_keep > 1024) violation("slab_keep out of range", input);
  if (s.trace > (std::size_t{1} << 28)) violation("trace out of range", input);
  if (s.snapshot_on_oom_max > (std::size_t{1} << 20)) {
    violation("snapshot_on_oom_max out of range", input);
  }
}

void fuzz_conf(std::string_view input) {
  Settings s;
  const auto warnings = cudalloc::parse_conf(input, &s);
  std::size_t items = 1;
  for (char c : input) items += c == ',';
  if (warnings.size() > items) violation("more warnings than items", input);
  check_ranges(s, input);

  // Paths holding a comma cannot be written back as one item (the item separator); nothing
  // else needs escaping, since the parser trims only the ends and splits at the first ':'.
  if (s.snapshot_on_oom.find(',') != std::string::npos ||
      s.snapshot_at_exit.find(',') != std::string::npos) {
    return;
  }
  const std::string written = render(s);
  Settings again;
  if (!cudalloc::parse_conf(written, &again).empty()) {
    violation(("settings written back do not parse cleanly: " + written).c_str(), input);
  }
  if (render(again) != written) {
    violation(("settings do not round-trip: " + written + " -> " + render(again)).c_str(),
              input);
  }
}

void fuzz_fake_spec(std::string_view input) {
  const std::string spec(input);  // parse_fake_spec takes a C string: stops at a NUL
  cudalloc::device::FakeDevice::Options o;
  if (!cudalloc::device::parse_fake_spec(spec.c_str(), &o)) return;
  if (o.devices < 1 || o.devices > 64) violation("fake spec: device count out of range", input);
  if (o.capacity == 0 || o.capacity % o.granularity != 0) {
    violation("fake spec: capacity zero or not a multiple of the page size", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  fuzz_conf(input);
  fuzz_fake_spec(input);
  return 0;
}
