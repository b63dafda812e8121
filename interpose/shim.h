// The LD_PRELOAD shim's shared pieces. The shim is a set of thin extern "C" forwarders
// (runtime_api.cpp, driver_api.cpp, dlsym_hook.cpp) into the process-wide allocator.
//
// Rules every forwarder follows:
//   - never throws, never allocates on its error path, never recurses into itself: while a
//     thread is inside cudalloc (Inside), every hooked entry point goes straight to the real
//     function, so driver code that calls back through dlsym or a hooked symbol cannot loop;
//   - with CUDALLOC_DISABLE=1 everything goes to the real functions;
//   - a pointer cudalloc did not hand out goes to the real free, whose error CUDA returns.
#pragma once

#include <cstddef>

#include "core/allocator.h"

namespace cudalloc::interpose {

bool enabled();  // false with CUDALLOC_DISABLE=1

// Marks the calling thread as inside cudalloc for its lifetime; `entered()` is false when the
// thread already was (a re-entrant call that must go to the real function).
class Inside {
 public:
  Inside();
  ~Inside();
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
  bool entered() const { return entered_; }
  static bool active();

 private:
  bool entered_;
};

// True when the shim should serve this call itself.
inline bool serve(const Inside& inside) { return inside.entered() && enabled(); }

// A lookup of the driver's private interface (cuGetExportTable), made only by CUDA
// runtimes, from code at `caller`. One that does not come from the shared libcudart these
// hooks interpose is a runtime linked into its object (nvcc's default; CuPy's modules carry
// one): it creates streams out of sight, so device-ordered frees switch, for the rest of the
// process, to waiting for a device synchronization (core/deferred_frees.h). NVIDIA's own
// libraries, which carry one too but order their work on the caller's streams, are known by
// name and change nothing (shim.cpp).
void runtime_lookup_from(const void* caller) noexcept;

// The process-wide allocator, or nullptr if it cannot be created.
Allocator* allocator();

// The CUDA error code of an Error. cudaError_t and CUresult agree on every code used here:
// 0 success, 1 invalid value, 2 out of memory, 100 no device, 999 unknown.
int to_cuda_error(Error e);

// The work the runtime and driver entry points share; errors are cudalloc's, each entry
// point turns them into its own API's codes.
DeviceAllocator* current_device(Error* err);            // the calling thread's device
Error allocate_on_current(void** ptr, std::size_t size, void* stream);
Error memory_info(std::size_t* free_bytes, std::size_t* total_bytes);  // either may be NULL
void reset_device(int device);                          // -1: the current device
void watch_stream(void* stream);                        // a stream the program created
void unwatch_stream(void* stream);                      // before it is destroyed
constexpr std::size_t kPitchAlignment = 512;            // row pitch of pitched allocations
// The pitch (width rounded up to kPitchAlignment) and size of a pitched allocation. When
// either does not fit in size_t: invalid_value and *pitch = 0 (CUDA's answer, measured on an
// H200; a wrapped size would be a tiny allocation handed out as a large one). An empty area
// (width or height 0) has pitch 0 and size 0, as CUDA reports it.
Error pitched_size(std::size_t width, std::size_t height, std::size_t* pitch, std::size_t* bytes);

// Stream capture. A stream-ordered allocation on a stream being captured into a CUDA graph
// must become a graph memory node, as without cudalloc: the graph owns that memory and
// replays into it. capturing() is the driver's answer (cuStreamIsCapturing), false for the
// legacy default stream (which cannot be captured) and where the driver cannot say.
bool capturing(void* stream);
// A stream-ordered free, on a capturing stream, of memory cudalloc handed out before the
// capture: the graph's captured work may still use it at every replay, so it is never reused
// (kept allocated for the life of the process, with one warning). True when `ptr` was
// cudalloc's (and so is kept).
bool keep_freed_in_capture(void* ptr);

// Called before a capture begins: the event on the legacy stream a free may owe goes first
// (during the capture it would end it with an error).
void capture_beginning() noexcept;
// A capture of `stream` began / ended (core/captures.h: no fence meanwhile).
void capture_began(void* stream);
void capture_ended(void* stream);

// CUDA IPC (ipc.cpp). The handle of cudalloc's memory is cudalloc's own: it names a record
// in the exporting process that says how to open it (a legacy handle of the segment plus an
// offset, or the file descriptors of the pages). `LegacyIpc` is the real API's legacy
// open/close, for plain memory and for handles that are not cudalloc's.
struct LegacyIpc {
  int (*open)(void** base, const unsigned char* handle, unsigned flags);
  int (*close)(void* base);
};
// cudalloc's handle of its live allocation `ptr` into the 64 bytes of `handle`, with the
// CUDA code in *code; false when `ptr` is not cudalloc's (the caller asks the driver).
bool ipc_export(void* ptr, unsigned char* handle, int* code) noexcept;
// Opens `handle` when it is cudalloc's (true; the code in *code); false otherwise.
bool ipc_open(const unsigned char* handle, unsigned flags, void** ptr, const LegacyIpc& legacy,
              int* code) noexcept;
// Closes what ipc_open opened (true; the code in *code); false for other pointers.
bool ipc_close(void* ptr, const LegacyIpc& legacy, int* code) noexcept;
// The allocation `ptr` is being freed: its records go (a handle of it no longer opens).
// Called before the free, so that an allocation at the same address afterwards keeps its own.
void ipc_forget(void* ptr) noexcept;
void ipc_forget_all() noexcept;  // a device reset: every allocation is gone

// The order of a stream-ordered free (cudaFreeAsync, cuMemFreeAsync) on `stream`. Every
// thread's per-thread default stream has the one handle CU_STREAM_PER_THREAD (0x2), so its
// pool is shared by threads whose streams do not order each other: a free there is
// device-ordered (cudaFree's rule), which orders every blocking stream before reuse.
inline DeviceAllocator::FreeOrder async_free_order(void* stream) {
  return reinterpret_cast<std::uintptr_t>(stream) == 0x2 ? DeviceAllocator::FreeOrder::device
                                                         : DeviceAllocator::FreeOrder::stream;
}

// Outcome of freeing through cudalloc.
enum class FreeResult { freed, not_ours, failed };
FreeResult free_if_ours(void* ptr, DeviceAllocator::FreeOrder order, void* stream, bool ordered_on_stream);
// The CUDA answer to a free that went through cudalloc: 0 when freed, 1 (invalid value) when
// it failed, and `not_ours` for a pointer cudalloc does not hold, which the caller hands to
// the real free. On the simulated device nothing else holds device memory, so there a
// pointer that is not cudalloc's gets CUDA's answer to a pointer it does not know: 1.
int free_result(FreeResult result, int not_ours);

// The real functions: the CUDA runtime's through the dynamic linker (nullptr when the runtime
// is linked statically into the program, in which case nothing called it through us), and
// the driver's through its own cuGetProcAddress.
void* real_runtime(const char* symbol);
void* real_driver(const char* base_name);

// A hooked driver entry point for `base_name` ("cuMemAlloc"), per-thread-default-stream
// flavour when `per_thread`, or nullptr if cudalloc does not hook it.
void* driver_hook(const char* base_name, bool per_thread);
// A hooked symbol by its exported name ("cuMemAlloc_v2", "cudaMalloc"), or nullptr.
void* exported_hook(const char* symbol);

}  // namespace cudalloc::interpose
