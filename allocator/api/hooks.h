// Hooks that a higher layer (snapshot/) installs when the library loads, so that the API can
// trigger its work without including it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudalloc {

class DeviceAllocator;

// One allocation request that failed for lack of memory, as the entry point that received it
// saw it (the C API, the PyTorch entry points, the interposer's cudaMalloc and cuMemAlloc).
struct OutOfMemory {
  int device = 0;
  std::size_t size = 0;        // bytes requested
  std::uintptr_t stream = 0;   // the stream it was requested on (0: the legacy default stream)
  bool device_free_known = false;
  std::size_t device_free = 0; // the device's free memory as the driver reported it then
  const char* message = "";    // why it failed (the calling thread's last error); never NULL
};

// Called after an allocation failed for lack of memory, outside every lock, on the thread
// that asked, when CUDALLOC_CONF has snapshot_on_oom. It must not throw, and must leave the
// thread's last error message as it found it (the caller reports the allocation's failure).
using OutOfMemoryHook = void (*)(const OutOfMemory& oom) noexcept;
void set_out_of_memory_hook(OutOfMemoryHook hook);
OutOfMemoryHook out_of_memory_hook();

// What every allocating entry point calls when `d` refused a request of `size` bytes on
// `stream` with out_of_memory, outside every lock: runs the hook when snapshot_on_oom is set
// and a hook is installed, else does nothing. Fills in the device's free memory from the
// core's note of the failure (core/errors.h). Never throws; allocates nothing itself.
void report_out_of_memory(const DeviceAllocator& d, std::size_t size,
                          std::uintptr_t stream) noexcept;

}  // namespace cudalloc
