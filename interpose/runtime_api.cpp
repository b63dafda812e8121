// The CUDA runtime API entry points cudalloc serves under LD_PRELOAD. Programs that link the
// runtime dynamically call these directly; a statically linked runtime reaches cudalloc
// through the driver entry points instead (driver_api.cpp).
//
// cudaFree keeps CUDA's guarantee that the work queued before it is done with the memory: the
// free is device-ordered (DeviceAllocator::FreeOrder::device), so the memory is reused only
// after a fence of events on every stream has passed, without the device-wide
// synchronization a real cudaFree performs.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "interpose/shim.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::interpose;

namespace {

// cudaError_t values (the rest come from to_cuda_error).
constexpr int kSuccess = 0, kInvalidValue = 1, kUnknown = 999;
// cudaStreamPerThread, what a _ptsz entry point means by stream 0.
void* const kPerThreadStream = reinterpret_cast<void*>(0x2);

// Calls the real runtime function `name`, of the type of the hook that forwards to it
// (REAL(hook) gives it: decltype of the hook itself, so no signature is typed twice).
template <typename Fn, typename... Args>
int call_real(const char* name, Args... args) {
  auto fn = reinterpret_cast<Fn>(real_runtime(name));
  return fn != nullptr ? fn(args...) : kUnknown;
}
#define REAL(hook) call_real<decltype(&hook)>

// The runtime's last error, for the failures cudalloc answers itself: like the runtime, the
// calling thread's most recent error, returned by cudaPeekAtLastError and returned and
// cleared by cudaGetLastError; success does not clear it. Errors of calls that reach the real
// runtime are the runtime's own.
thread_local int t_last_error = kSuccess;

// `code`, left for cudaGetLastError when it is an error: what every served call returns.
int answered(int code) {
  if (code != kSuccess) t_last_error = code;
  return code;
}

int allocate(void** ptr, std::size_t size, void* stream) {
  if (ptr == nullptr) return answered(kInvalidValue);
  return answered(to_cuda_error(allocate_on_current(ptr, size, stream)));
}

// Frees `ptr` when it is cudalloc's (NULL too: success); kNotOurs when it is not, for the
// caller to hand to the real runtime.
constexpr int kNotOurs = -1;
int free_ours(void* ptr, DeviceAllocator::FreeOrder order, void* stream, bool on_stream) {
  if (ptr == nullptr) return kSuccess;
  const int r = free_result(free_if_ours(ptr, order, stream, on_stream), kNotOurs);
  return r == kNotOurs ? r : answered(r);
}

// cudaIpcMemHandle_t's layout: 64 opaque bytes, passed by value to cudaIpcOpenMemHandle.
struct IpcMemHandle {
  unsigned char bytes[64];
};

int legacy_open(void** base, const unsigned char* bytes, unsigned flags);
int legacy_close(void* base);
constexpr LegacyIpc kLegacy{&legacy_open, &legacy_close};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cudaMalloc(void** ptr, std::size_t size) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaMalloc)("cudaMalloc", ptr, size);
  return allocate(ptr, size, nullptr);
}

__attribute__((visibility("default"))) int cudaFree(void* ptr) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaFree)("cudaFree", ptr);
  const int r = free_ours(ptr, DeviceAllocator::FreeOrder::device, nullptr, false);
  return r != kNotOurs ? r : REAL(cudaFree)("cudaFree", ptr);
}

__attribute__((visibility("default"))) int cudaMallocAsync(void** ptr, std::size_t size,
                                                           void* stream) {
  Inside inside;
  if (!serve(inside) || capturing(stream)) {
    return REAL(cudaMallocAsync)("cudaMallocAsync", ptr, size, stream);
  }
  return allocate(ptr, size, stream);
}

__attribute__((visibility("default"))) int cudaFreeAsync(void* ptr, void* stream) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaFreeAsync)("cudaFreeAsync", ptr, stream);
  if (capturing(stream)) {
    return keep_freed_in_capture(ptr) ? kSuccess
                                      : REAL(cudaFreeAsync)("cudaFreeAsync", ptr, stream);
  }
  const auto order = async_free_order(stream);
  const int r = free_ours(ptr, order, stream, order == DeviceAllocator::FreeOrder::stream);
  return r != kNotOurs ? r : REAL(cudaFreeAsync)("cudaFreeAsync", ptr, stream);
}

__attribute__((visibility("default"))) int cudaMallocAsync_ptsz(void** ptr, std::size_t size,
                                                                void* stream) {
  Inside inside;
  void* const s = stream != nullptr ? stream : kPerThreadStream;
  if (!serve(inside) || capturing(s)) {
    return REAL(cudaMallocAsync_ptsz)("cudaMallocAsync_ptsz", ptr, size, stream);
  }
  return allocate(ptr, size, s);
}

__attribute__((visibility("default"))) int cudaFreeAsync_ptsz(void* ptr, void* stream) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaFreeAsync_ptsz)("cudaFreeAsync_ptsz", ptr, stream);
  void* const s = stream != nullptr ? stream : kPerThreadStream;
  if (capturing(s)) {
    return keep_freed_in_capture(ptr) ? kSuccess
                                      : REAL(cudaFreeAsync_ptsz)("cudaFreeAsync_ptsz", ptr, stream);
  }
  const auto order = async_free_order(s);
  const int r = free_ours(ptr, order, s, order == DeviceAllocator::FreeOrder::stream);
  return r != kNotOurs ? r : REAL(cudaFreeAsync_ptsz)("cudaFreeAsync_ptsz", ptr, stream);
}

__attribute__((visibility("default"))) int cudaMallocPitch(void** ptr, std::size_t* pitch,
                                                           std::size_t width,
                                                           std::size_t height) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaMallocPitch)("cudaMallocPitch", ptr, pitch, width, height);
  if (ptr == nullptr || pitch == nullptr) return answered(kInvalidValue);
  *ptr = nullptr;
  std::size_t bytes = 0;
  if (const Error e = pitched_size(width, height, pitch, &bytes); e != Error::ok) {
    return answered(to_cuda_error(e));
  }
  return allocate(ptr, bytes, nullptr);  // an empty area: success, NULL, pitch 0
}

__attribute__((visibility("default"))) int cudaMemGetInfo(std::size_t* free_bytes,
                                                          std::size_t* total_bytes) {
  Inside inside;
  if (!serve(inside)) return REAL(cudaMemGetInfo)("cudaMemGetInfo", free_bytes, total_bytes);
  return answered(to_cuda_error(memory_info(free_bytes, total_bytes)));
}

__attribute__((visibility("default"))) int cudaDeviceReset() {
  Inside inside;
  // Everything cudalloc holds on the current device goes back before the context does.
  if (serve(inside)) reset_device(-1);
  return REAL(cudaDeviceReset)("cudaDeviceReset");
}

// The last error: cudalloc's own when it has one pending (clearing the runtime's too, as one
// cudaGetLastError clears everything), else the runtime's.
__attribute__((visibility("default"))) int cudaGetLastError() {
  const int ours = t_last_error;
  t_last_error = kSuccess;
  auto real = reinterpret_cast<decltype(&cudaGetLastError)>(real_runtime("cudaGetLastError"));
  const int theirs = real != nullptr ? real() : kSuccess;
  return ours != kSuccess ? ours : theirs;
}

__attribute__((visibility("default"))) int cudaPeekAtLastError() {
  if (t_last_error != kSuccess) return t_last_error;
  auto real =
      reinterpret_cast<decltype(&cudaPeekAtLastError)>(real_runtime("cudaPeekAtLastError"));
  return real != nullptr ? real() : kSuccess;
}

// The runtime's doorway to driver entry points (PyTorch resolves cuMem* this way): hooked
// names get cudalloc's entry points, everything else the runtime's answer.
__attribute__((visibility("default"))) int cudaGetDriverEntryPoint(const char* symbol,
                                                                   void** fn,
                                                                   unsigned long long flags,
                                                                   int* status) {
  Inside inside;
  if (serve(inside) && symbol != nullptr && fn != nullptr) {
    if (void* hook = driver_hook(symbol, (flags & 2) != 0)) {  // 2: per-thread stream
      *fn = hook;
      if (status != nullptr) *status = 0;  // cudaDriverEntryPointSuccess
      return kSuccess;
    }
  }
  return REAL(cudaGetDriverEntryPoint)("cudaGetDriverEntryPoint", symbol, fn, flags, status);
}

__attribute__((visibility("default"))) int cudaGetDriverEntryPointByVersion(
    const char* symbol, void** fn, unsigned int version, unsigned long long flags, int* status) {
  Inside inside;
  if (serve(inside) && symbol != nullptr && fn != nullptr && version >= 3020) {
    if (void* hook = driver_hook(symbol, (flags & 2) != 0)) {
      *fn = hook;
      if (status != nullptr) *status = 0;
      return kSuccess;
    }
  }
  return REAL(cudaGetDriverEntryPointByVersion)("cudaGetDriverEntryPointByVersion", symbol, fn,
                                                version, flags, status);
}

// Streams the program creates are watched, so that device-ordered frees are ordered against
// them (the runtime may create them without going through the hooked driver entry points).
static void watch_created(int result, void** stream) {
  if (result == kSuccess && stream != nullptr) watch_stream(*stream);
}

__attribute__((visibility("default"))) int cudaStreamCreate(void** stream) {
  Inside inside;
  const int r = REAL(cudaStreamCreate)("cudaStreamCreate", stream);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamCreateWithFlags(void** stream,
                                                                     unsigned flags) {
  Inside inside;
  const int r = REAL(cudaStreamCreateWithFlags)("cudaStreamCreateWithFlags", stream, flags);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamCreateWithPriority(void** stream,
                                                                        unsigned flags,
                                                                        int priority) {
  Inside inside;
  const int r = REAL(cudaStreamCreateWithPriority)("cudaStreamCreateWithPriority", stream, flags,
                                                   priority);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamDestroy(void* stream) {
  Inside inside;
  if (serve(inside)) unwatch_stream(stream);
  return REAL(cudaStreamDestroy)("cudaStreamDestroy", stream);
}

// Captures are counted (core/captures.h): while one is underway nothing fences frees.
__attribute__((visibility("default"))) int cudaStreamBeginCapture(void* stream, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cudaStreamBeginCapture)("cudaStreamBeginCapture", stream, mode);
  if (r == kSuccess && serve(inside)) capture_began(stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamEndCapture(void* stream, void** graph) {
  Inside inside;
  const int r = REAL(cudaStreamEndCapture)("cudaStreamEndCapture", stream, graph);
  if (serve(inside)) capture_ended(stream);  // ended also when it failed
  return r;
}

__attribute__((visibility("default"))) int cudaStreamBeginCapture_ptsz(void* stream, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cudaStreamBeginCapture_ptsz)("cudaStreamBeginCapture_ptsz", stream, mode);
  if (r == kSuccess && serve(inside)) capture_began(stream != nullptr ? stream : kPerThreadStream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamEndCapture_ptsz(void* stream, void** graph) {
  Inside inside;
  const int r = REAL(cudaStreamEndCapture_ptsz)("cudaStreamEndCapture_ptsz", stream, graph);
  if (serve(inside)) capture_ended(stream != nullptr ? stream : kPerThreadStream);
  return r;
}

// A capture into an existing graph (CUDA 12.3) is counted like any other; it ends with
// cudaStreamEndCapture.
__attribute__((visibility("default"))) int cudaStreamBeginCaptureToGraph(
    void* stream, void* graph, const void* dependencies, const void* dependency_data,
    std::size_t count, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cudaStreamBeginCaptureToGraph)("cudaStreamBeginCaptureToGraph", stream, graph,
                                                    dependencies, dependency_data, count, mode);
  if (r == kSuccess && serve(inside)) capture_began(stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamBeginCaptureToGraph_ptsz(
    void* stream, void* graph, const void* dependencies, const void* dependency_data,
    std::size_t count, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cudaStreamBeginCaptureToGraph_ptsz)(
      "cudaStreamBeginCaptureToGraph_ptsz", stream, graph, dependencies, dependency_data, count,
      mode);
  if (r == kSuccess && serve(inside)) capture_began(stream != nullptr ? stream : kPerThreadStream);
  return r;
}

// CUDA IPC (shim.h): cudalloc's memory gets a handle of cudalloc's, which these open; other
// memory and other handles go to the runtime.
__attribute__((visibility("default"))) int cudaIpcGetMemHandle(IpcMemHandle* handle, void* ptr) {
  Inside inside;
  int code = kSuccess;
  if (handle != nullptr && serve(inside) && ipc_export(ptr, handle->bytes, &code)) {
    return answered(code);
  }
  return REAL(cudaIpcGetMemHandle)("cudaIpcGetMemHandle", handle, ptr);
}

__attribute__((visibility("default"))) int cudaIpcOpenMemHandle(void** ptr, IpcMemHandle handle,
                                                                unsigned flags) {
  Inside inside;
  int code = kSuccess;
  if (ptr != nullptr && serve(inside) && ipc_open(handle.bytes, flags, ptr, kLegacy, &code)) {
    return answered(code);
  }
  return REAL(cudaIpcOpenMemHandle)("cudaIpcOpenMemHandle", ptr, handle, flags);
}

__attribute__((visibility("default"))) int cudaIpcCloseMemHandle(void* ptr) {
  Inside inside;
  int code = kSuccess;
  if (serve(inside) && ipc_close(ptr, kLegacy, &code)) return answered(code);
  return REAL(cudaIpcCloseMemHandle)("cudaIpcCloseMemHandle", ptr);
}

}  // extern "C"

namespace {

int legacy_open(void** base, const unsigned char* bytes, unsigned flags) {
  IpcMemHandle h;
  std::memcpy(h.bytes, bytes, sizeof h.bytes);
  return REAL(cudaIpcOpenMemHandle)("cudaIpcOpenMemHandle", base, h, flags);
}

int legacy_close(void* base) { return REAL(cudaIpcCloseMemHandle)("cudaIpcCloseMemHandle", base); }

}  // namespace

#undef REAL
