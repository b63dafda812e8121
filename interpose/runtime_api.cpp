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

#include "interpose/shim.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::interpose;

namespace {

// cudaError_t values (the rest come from to_cuda_error).
constexpr int kSuccess = 0, kInvalidValue = 1, kUnknown = 999;
// cudaStreamPerThread, what a _ptsz entry point means by stream 0.
void* const kPerThreadStream = reinterpret_cast<void*>(0x2);


template <typename Fn, typename... Args>
int call_real(const char* name, Args... args) {
  auto fn = reinterpret_cast<Fn>(real_runtime(name));
  return fn != nullptr ? fn(args...) : kUnknown;
}

int allocate(void** ptr, std::size_t size, void* stream) {
  if (ptr == nullptr) return kInvalidValue;
  return to_cuda_error(allocate_on_current(ptr, size, stream));
}

int free_memory(const char* real_name, void* ptr, DeviceAllocator::FreeOrder order,
                void* stream, bool on_stream) {
  if (ptr == nullptr) return kSuccess;
  switch (free_if_ours(ptr, order, stream, on_stream)) {
    case FreeResult::freed: return kSuccess;
    case FreeResult::failed: return kInvalidValue;
    case FreeResult::not_ours: break;
  }
  if (on_stream) return call_real<int (*)(void*, void*)>(real_name, ptr, stream);
  return call_real<int (*)(void*)>(real_name, ptr);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cudaMalloc(void** ptr, std::size_t size) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(void**, std::size_t)>("cudaMalloc", ptr, size);
  return allocate(ptr, size, nullptr);
}

__attribute__((visibility("default"))) int cudaFree(void* ptr) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(void*)>("cudaFree", ptr);
  return free_memory("cudaFree", ptr, DeviceAllocator::FreeOrder::device, nullptr, false);
}

__attribute__((visibility("default"))) int cudaMallocAsync(void** ptr, std::size_t size,
                                                           void* stream) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(void**, std::size_t, void*)>("cudaMallocAsync", ptr, size, stream);
  }
  return allocate(ptr, size, stream);
}

__attribute__((visibility("default"))) int cudaFreeAsync(void* ptr, void* stream) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(void*, void*)>("cudaFreeAsync", ptr, stream);
  return free_memory("cudaFreeAsync", ptr, DeviceAllocator::FreeOrder::stream, stream, true);
}

__attribute__((visibility("default"))) int cudaMallocAsync_ptsz(void** ptr, std::size_t size,
                                                                void* stream) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(void**, std::size_t, void*)>("cudaMallocAsync_ptsz", ptr, size,
                                                          stream);
  }
  return allocate(ptr, size, stream != nullptr ? stream : kPerThreadStream);
}

__attribute__((visibility("default"))) int cudaFreeAsync_ptsz(void* ptr, void* stream) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(void*, void*)>("cudaFreeAsync_ptsz", ptr, stream);
  return free_memory("cudaFreeAsync_ptsz", ptr, DeviceAllocator::FreeOrder::stream,
                     stream != nullptr ? stream : kPerThreadStream, true);
}

__attribute__((visibility("default"))) int cudaMallocPitch(void** ptr, std::size_t* pitch,
                                                           std::size_t width,
                                                           std::size_t height) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(void**, std::size_t*, std::size_t, std::size_t)>(
        "cudaMallocPitch", ptr, pitch, width, height);
  }
  if (pitch == nullptr) return kInvalidValue;
  *pitch = round_up(width, kPitchAlignment);
  return allocate(ptr, *pitch * height, nullptr);
}

__attribute__((visibility("default"))) int cudaMemGetInfo(std::size_t* free_bytes,
                                                          std::size_t* total_bytes) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(std::size_t*, std::size_t*)>("cudaMemGetInfo", free_bytes,
                                                          total_bytes);
  }
  return to_cuda_error(memory_info(free_bytes, total_bytes));
}

__attribute__((visibility("default"))) int cudaDeviceReset() {
  Inside inside;
  // Everything cudalloc holds on the current device goes back before the context does.
  if (serve(inside)) reset_device(-1);
  return call_real<int (*)()>("cudaDeviceReset");
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
  return call_real<int (*)(const char*, void**, unsigned long long, int*)>(
      "cudaGetDriverEntryPoint", symbol, fn, flags, status);
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
  return call_real<int (*)(const char*, void**, unsigned int, unsigned long long, int*)>(
      "cudaGetDriverEntryPointByVersion", symbol, fn, version, flags, status);
}

// Streams the program creates are watched, so that device-ordered frees are ordered against
// them (the runtime may create them without going through the hooked driver entry points).
static void watch_created(int result, void** stream) {
  if (result == kSuccess && stream != nullptr) watch_stream(*stream);
}

__attribute__((visibility("default"))) int cudaStreamCreate(void** stream) {
  Inside inside;
  const int r = call_real<int (*)(void**)>("cudaStreamCreate", stream);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamCreateWithFlags(void** stream,
                                                                     unsigned flags) {
  Inside inside;
  const int r = call_real<int (*)(void**, unsigned)>("cudaStreamCreateWithFlags", stream, flags);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamCreateWithPriority(void** stream,
                                                                        unsigned flags,
                                                                        int priority) {
  Inside inside;
  const int r = call_real<int (*)(void**, unsigned, int)>("cudaStreamCreateWithPriority", stream,
                                                          flags, priority);
  if (serve(inside)) watch_created(r, stream);
  return r;
}

__attribute__((visibility("default"))) int cudaStreamDestroy(void* stream) {
  Inside inside;
  if (serve(inside)) unwatch_stream(stream);
  return call_real<int (*)(void*)>("cudaStreamDestroy", stream);
}

}  // extern "C"
