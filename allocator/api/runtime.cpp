#include "api/runtime.h"

#include <cstdlib>

#include "api/options.h"
#include "core/log.h"

namespace cudalloc {
namespace {

Allocator* make_process_allocator() {
  Settings settings;
  if (const char* conf = std::getenv("CUDALLOC_CONF")) {
    for (const std::string& warning : parse_conf(conf, &settings)) log().warn("{}", warning);
  }
  device::Device& device = device::process_device();
  log().debug("using the {} device layer, {} device(s)", device.name(), device.device_count());
  return new Allocator(device, settings);
}

}  // namespace

Allocator& process_allocator() {
  static Allocator* allocator = make_process_allocator();
  return *allocator;
}

}  // namespace cudalloc
