#include "api/runtime.h"

#include <pthread.h>
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/hooks.h"
#include "api/options.h"
#include "core/call_profile.h"
#include "core/log.h"
#include "device/timed_device.h"

namespace cudalloc {
namespace {

std::atomic<Allocator*> g_created{nullptr};
std::string g_conf;
std::atomic<OutOfMemoryHook> g_oom_hook{nullptr};
std::atomic<StreamVisibility> g_visibility{StreamVisibility::unseen_possible};

// fork() while another thread holds an allocator lock would leave the child's copy locked
// forever: every lock is taken around fork and released in both processes. Registered once
// per library (libcudalloc.so and the preload library each have their own allocator) when
// the allocator is created, after the device layer: prepare handlers run in reverse order of
// registration, so the allocator's locks are taken before the device layer's (the order in
// which the allocator takes them while it calls the device), and nothing exists to lock
// before the allocator does.
void lock_for_fork() {
  if (Allocator* a = process_allocator_if_created()) a->lock_all();
}
void unlock_after_fork() {
  if (Allocator* a = process_allocator_if_created()) a->unlock_all();
}

// time_device_calls: the process's driver calls by kind, logged (info) when it exits, for
// workloads whose time goes to calls outside pause and resume (remaps, waits). The profile
// is immortal like the device it reads; logging at exit only reads it.
const CallProfile* g_process_calls = nullptr;

void log_device_calls_at_exit(const device::Device& timed) {
  g_process_calls = new (std::nothrow) CallProfile(timed);
  if (g_process_calls == nullptr) return;
  std::atexit([] {
    log().info("time_device_calls: the whole process{}", g_process_calls->summary(12));
  });
}

Allocator* make_process_allocator() {
  const std::string device_warning = device_choice_warning(std::getenv("CUDALLOC_DEVICE"));
  if (!device_warning.empty()) log().warn("{}", device_warning);
  Settings settings;
  if (const char* conf = std::getenv("CUDALLOC_CONF")) {
    g_conf = conf;
    for (const std::string& warning : parse_conf(conf, &settings)) log().warn("{}", warning);
  }
  settings.streams = g_visibility.load();
  device::Device* device = &device::process_device();
  if (settings.time_device_calls) {
    // Lives as long as the process device does (never destroyed: see process_device).
    if (auto* timed = new (std::nothrow) device::TimedDevice(*device)) {
      device = timed;
      log_device_calls_at_exit(*timed);
    } else {
      log().warn("time_device_calls: no memory for the timer; device calls are not timed");
    }
  }
  log().debug("using the {} device layer, {} device(s)", device->name(), device->device_count());
  auto* allocator = new Allocator(*device, settings);
  g_created.store(allocator, std::memory_order_release);
  pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork);
  return allocator;
}

}  // namespace

std::string device_choice_warning(const char* choice) {
  if (choice == nullptr || *choice == '\0' || strcasecmp(choice, "cuda") == 0 ||
      std::strncmp(choice, "fake", 4) == 0) {
    return {};  // the device layer parses (and warns about) the fake spec itself
  }
  return "CUDALLOC_DEVICE='" + echo(choice) +
         "' is neither cuda nor fake[:CAPACITY[:DEVICES]]; using the default (cuda)";
}

Allocator& process_allocator() {
  static Allocator* allocator = make_process_allocator();
  return *allocator;
}

Allocator* process_allocator_if_created() { return g_created.load(std::memory_order_acquire); }

const std::string& process_conf() { return g_conf; }

void set_stream_visibility(StreamVisibility visibility) { g_visibility.store(visibility); }

namespace {
std::atomic<bool> g_interposing{false};
}  // namespace

void set_interposing() { g_interposing.store(true); }
bool interposing() { return g_interposing.load(); }

void set_out_of_memory_hook(OutOfMemoryHook hook) { g_oom_hook.store(hook); }

OutOfMemoryHook out_of_memory_hook() { return g_oom_hook.load(); }

void report_out_of_memory(const DeviceAllocator& d, std::size_t size,
                          std::uintptr_t stream) noexcept {
  if (d.settings().snapshot_on_oom.empty()) return;
  const OutOfMemoryHook hook = out_of_memory_hook();
  if (hook == nullptr) return;
  OutOfMemory oom;
  oom.device = d.ordinal();
  oom.size = size;
  oom.stream = stream;
  oom.message = last_error_message();
  // The core noted this failure on this thread just before it returned (a note of another
  // request would not match it).
  if (const OutOfMemoryDetail& note = last_out_of_memory();
      note.device == oom.device && note.size == size && note.device_free_known) {
    oom.device_free_known = true;
    oom.device_free = note.device_free;
  }
  hook(oom);
}

}  // namespace cudalloc
