#include "api/runtime.h"

#include <atomic>
#include <cstdlib>

#include "api/hooks.h"
#include "api/options.h"
#include "core/log.h"

namespace cudalloc {
namespace {

std::atomic<Allocator*> g_created{nullptr};
std::string g_conf;
std::atomic<OutOfMemoryHook> g_oom_hook{nullptr};

Allocator* make_process_allocator() {
  Settings settings;
  if (const char* conf = std::getenv("CUDALLOC_CONF")) {
    g_conf = conf;
    for (const std::string& warning : parse_conf(conf, &settings)) log().warn("{}", warning);
  }
  device::Device& device = device::process_device();
  log().debug("using the {} device layer, {} device(s)", device.name(), device.device_count());
  auto* allocator = new Allocator(device, settings);
  g_created.store(allocator, std::memory_order_release);
  return allocator;
}

}  // namespace

Allocator& process_allocator() {
  static Allocator* allocator = make_process_allocator();
  return *allocator;
}

Allocator* process_allocator_if_created() { return g_created.load(std::memory_order_acquire); }

const std::string& process_conf() { return g_conf; }

void set_out_of_memory_hook(OutOfMemoryHook hook) { g_oom_hook.store(hook); }

OutOfMemoryHook out_of_memory_hook() { return g_oom_hook.load(); }

}  // namespace cudalloc
