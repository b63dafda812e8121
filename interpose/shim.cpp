#include "interpose/shim.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "api/runtime.h"
#include "device/cuda_device.h"
#include "device/real_dlsym.h"

namespace cudalloc::interpose {
namespace {

thread_local bool t_inside = false;

bool read_enabled() {
  const char* v = std::getenv("CUDALLOC_DISABLE");
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0;
}

// fork() while another thread holds an allocator lock would leave the child's copy locked
// forever: take every lock around fork and release it in both processes.
void lock_all() {
  if (Allocator* a = process_allocator_if_created()) a->lock_all();
}
void unlock_all() {
  if (Allocator* a = process_allocator_if_created()) a->unlock_all();
}

[[maybe_unused]] const bool g_atfork = [] {
  pthread_atfork(&lock_all, &unlock_all, &unlock_all);
  return true;
}();

}  // namespace

bool enabled() {
  static const bool on = read_enabled();
  return on;
}

Inside::Inside() : entered_(!t_inside) { t_inside = true; }
Inside::~Inside() {
  if (entered_) t_inside = false;
}
bool Inside::active() { return t_inside; }

Allocator* allocator() {
  try {
    return &process_allocator();
  } catch (...) {
    return nullptr;
  }
}

FreeResult free_if_ours(void* ptr, DeviceAllocator::FreeOrder order, void* stream,
                        bool ordered_on_stream) {
  Allocator* a = allocator();
  if (a == nullptr) return FreeResult::not_ours;
  DeviceAllocator* d = a->owner_of(ptr);
  if (d == nullptr) return FreeResult::not_ours;
  try {
    // A free on another stream than the allocation's: the memory waits for that stream.
    if (ordered_on_stream) d->record_stream(ptr, reinterpret_cast<StreamHandle>(stream));
    return d->deallocate(ptr, order) == Error::ok ? FreeResult::freed : FreeResult::failed;
  } catch (...) {
    return FreeResult::failed;
  }
}

void* real_runtime(const char* symbol) { return device::real_dlsym(RTLD_NEXT, symbol); }

void* real_driver(const char* base_name) { return device::real_driver_function(base_name); }

}  // namespace cudalloc::interpose
