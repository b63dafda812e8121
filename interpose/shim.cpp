#include "interpose/shim.h"

#include <atomic>

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "api/hooks.h"
#include "api/options.h"
#include "api/runtime.h"
#include "core/captures.h"
#include "core/deferred_frees.h"
#include "core/log.h"
#include "device/cuda_device.h"
#include "device/real_dlsym.h"
#include "util/units.h"

namespace cudalloc::interpose {
namespace {

thread_local bool t_inside = false;

// CUDALLOC_DISABLE=1/true/yes/on (any case) disables cudalloc; 0/false/no/off, empty or unset
// leave it on; anything else leaves it on with a warning.
bool read_enabled() {
  const char* v = std::getenv("CUDALLOC_DISABLE");
  if (v == nullptr || *v == '\0') return true;
  bool disable = false;
  if (parse_bool(v, &disable)) return !disable;
  log().warn("CUDALLOC_DISABLE='{}' is not 1/true/yes/on or 0/false/no/off; cudalloc stays on",
             echo(v));
  return true;
}

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

// Every stream of the program is seen being created only where its CUDA runtime is a shared
// library this one interposes (cudaStreamCreate* reach the hooks). A runtime linked
// statically into the program (nvcc's default) creates streams out of sight: then
// device-ordered frees wait for a device synchronization (core/deferred_frees.h). Decided at
// the first allocator call, when a runtime the program loads with dlopen is there too.
// Set once a CUDA runtime linked into some object shows itself (runtime_lookup_from), for
// its one log line; the switch itself is DeferredFrees' process-wide flag.
std::atomic<bool> g_hidden_runtime{false};

StreamVisibility stream_visibility() {
  return real_runtime("cudaStreamCreate") != nullptr ? StreamVisibility::all_seen
                                                     : StreamVisibility::unseen_possible;
}

// Libraries that carry a runtime but whose streams cannot hold work on memory a program
// frees out of order, matched on the object's file name:
//   - NVML, the runtime compilers and the tools' libraries (CUPTI, the profilers' and
//     compute-sanitizer's injection libraries) queue no work on the program's memory;
//   - NVIDIA's libraries (cuBLAS, cuBLASLt, cuDNN, cuFFT, cuRAND, cuSPARSE, cuSOLVER,
//     cuTENSOR, NPP, nvJPEG, NCCL) queue every operation in the order of a stream the caller
//     gives (cublasSetStream, cudnnSetStream, ncclAllReduce(..., stream), ...): work they put
//     on streams of their own is joined back into it before the operation counts as done. The
//     caller's stream is seen, so the fence covers it.
// PyTorch loads most of them, and each would otherwise make every free wait for a device
// synchronization (GPT-2 small without caching: 89 ms a step against 62, H200, 2026-12-01).
bool streams_ordered_by_caller(const char* object) {
  const char* name = std::strrchr(object, '/');
  name = name != nullptr ? name + 1 : object;
  for (const char* prefix :
       {"libnvidia-ml.so", "libnvrtc", "libnvJitLink", "libcupti", "libnvperf",
        "libToolsInjection", "libsanitizer", "libInterceptorInjection",
        "libTreeLauncherTargetInjection", "libcublas", "libcudnn", "libcufft", "libcurand",
        "libcusparse", "libcusolver", "libcutensor", "libnpp", "libnvjpeg", "libnccl"}) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

void runtime_lookup_from(const void* caller) noexcept {
  Dl_info info{};
  const char* object = dladdr(caller, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
  if (std::strstr(object, "libcudart.so") != nullptr) return;  // the runtime the hooks see
  if (streams_ordered_by_caller(object)) return;
  const bool first = !g_hidden_runtime.exchange(true);
  // From now on every device-ordered free, on every device, waits for a device
  // synchronization: a flag read without a lock (this runs inside dlsym, perhaps under the
  // loader's lock, where taking an allocator lock could deadlock). Frees that completed
  // before could not involve this runtime's streams: it had none yet.
  DeferredFrees::streams_may_be_unseen_everywhere();
  try {
    if (first) {
      log().info("a CUDA runtime linked into {} creates streams cudalloc cannot see: freed "
                 "memory now waits for a device synchronization before reuse",
                 object[0] != '\0' ? object : "an unknown object");
    }
  } catch (...) {  // no memory for the message: the switch is made all the same
  }
}

void capture_beginning() noexcept {
  try {
    if (Allocator* a = process_allocator_if_created()) {
      a->for_each_device([](DeviceAllocator& d) { d.before_capture(); });
    }
  } catch (...) {  // cannot happen (no allocation); the capture then may end with an error
  }
}

Allocator* allocator() {
  static const bool decided = [] {
    set_stream_visibility(stream_visibility());
    set_interposing();
    return true;
  }();
  (void)decided;
  try {
    return &process_allocator();
  } catch (...) {
    return nullptr;
  }
}

int to_cuda_error(Error e) {
  switch (e) {
    case Error::ok: return 0;
    case Error::invalid_value:
    case Error::invalid_pointer: return 1;
    case Error::out_of_memory: return 2;
    case Error::no_device: return 100;
    default: return 999;
  }
}

DeviceAllocator* current_device(Error* err) {
  Allocator* a = allocator();
  if (a == nullptr) {
    *err = Error::internal;
    return nullptr;
  }
  return a->device(-1, err);
}

Error allocate_on_current(void** ptr, std::size_t size, void* stream) {
  Error err = Error::ok;
  DeviceAllocator* d = current_device(&err);
  if (d == nullptr) return err;
  try {
    const Error e = d->allocate(size, reinterpret_cast<StreamHandle>(stream), ptr);
    // snapshot_on_oom, as through the C API. Writing the snapshot allocates host memory on
    // this error path: only when the user asked for it (report_out_of_memory does nothing
    // otherwise), never with a lock held, and a failure to write it is reported by the hook
    // and changes nothing here. The caller's Inside guard sends any CUDA call the hook makes
    // to the real functions.
    if (e == Error::out_of_memory) {
      report_out_of_memory(*d, size, reinterpret_cast<std::uintptr_t>(stream));
    }
    return e;
  } catch (...) {
    return Error::internal;
  }
}

Error memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  Error err = Error::ok;
  DeviceAllocator* d = current_device(&err);
  if (d == nullptr) return err;
  std::size_t f = 0, t = 0;
  err = d->memory_info(&f, &t);
  if (free_bytes != nullptr) *free_bytes = f;
  if (total_bytes != nullptr) *total_bytes = t;
  return err;
}

void reset_device(int device) {
  Allocator* a = allocator();
  Error err = Error::ok;
  if (DeviceAllocator* d = a != nullptr ? a->device(device, &err) : nullptr) d->reset();
  ipc_forget_all();  // the handles of every device go (a reset is rare; records hold no device)
}

void watch_stream(void* stream) {
  Error err = Error::ok;
  DeviceAllocator* d = stream != nullptr ? current_device(&err) : nullptr;
  if (d == nullptr) return;
  try {
    d->register_stream(reinterpret_cast<StreamHandle>(stream));
  } catch (...) {
    // Out of host memory for the stream list: the stream stays unwatched.
  }
}

void unwatch_stream(void* stream) {
  if (Allocator* a = allocator()) {
    a->for_each_device(
        [&](DeviceAllocator& d) { d.unregister_stream(reinterpret_cast<StreamHandle>(stream)); });
  }
}

FreeResult free_if_ours(void* ptr, DeviceAllocator::FreeOrder order, void* stream,
                        bool ordered_on_stream) {
  Allocator* a = allocator();
  if (a == nullptr) return FreeResult::not_ours;
  try {
    // A free on another stream than the allocation's: the memory waits for that stream.
    const auto handle = reinterpret_cast<StreamHandle>(stream);
    ipc_forget(ptr);  // before the free: the address may be handed out again at once
    const Error err = a->free_anywhere(ptr, order, ordered_on_stream ? &handle : nullptr);
    if (err == Error::invalid_pointer) return FreeResult::not_ours;
    return err == Error::ok ? FreeResult::freed : FreeResult::failed;
  } catch (...) {
    return FreeResult::failed;
  }
}

Error pitched_size(std::size_t width, std::size_t height, std::size_t* pitch,
                   std::size_t* bytes) {
  *pitch = 0;
  *bytes = 0;
  if (width > SIZE_MAX - (kPitchAlignment - 1)) return Error::invalid_value;
  const std::size_t rounded = round_up(width, kPitchAlignment);
  if (height != 0 && rounded > SIZE_MAX / height) return Error::invalid_value;
  if (height != 0) *pitch = rounded;
  *bytes = rounded * height;
  return Error::ok;
}

int free_result(FreeResult result, int not_ours) {
  switch (result) {
    case FreeResult::freed: return 0;
    case FreeResult::failed: return 1;
    case FreeResult::not_ours: break;
  }
  static const bool simulated = std::strcmp(device::process_device().name(), "fake") == 0;
  return simulated ? 1 : not_ours;
}

void* real_runtime(const char* symbol) { return device::real_dlsym(RTLD_NEXT, symbol); }

void* real_driver(const char* base_name) { return device::real_driver_function(base_name); }

bool capturing(void* stream) {
  if (stream == nullptr) return false;  // the legacy default stream is never captured
  using IsCapturing = int (*)(void*, int*);
  static const auto is_capturing = reinterpret_cast<IsCapturing>(real_driver("cuStreamIsCapturing"));
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  return is_capturing != nullptr && is_capturing(stream, &status) == 0 && status != 0;
}

void capture_began(void* stream) {
  try {
    Captures::process().began(reinterpret_cast<std::uintptr_t>(stream));
  } catch (...) {  // no memory for the record: then fences may end this capture, no worse
  }
}

void capture_ended(void* stream) {
  Captures::process().ended(reinterpret_cast<std::uintptr_t>(stream));
}

bool keep_freed_in_capture(void* ptr) {
  Allocator* a = allocator();
  if (a == nullptr || ptr == nullptr || a->owner_of(ptr) == nullptr) return false;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    try {
      log().warn("a stream-ordered free during a CUDA graph capture of memory allocated "
                 "before it ({}): the memory stays allocated (the graph may use it at every "
                 "replay)", ptr);
    } catch (...) {  // a warning must never fail the call
    }
  }
  return true;
}

}  // namespace cudalloc::interpose
