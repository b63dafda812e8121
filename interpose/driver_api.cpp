// The CUDA driver API entry points cudalloc serves under LD_PRELOAD, and the table that
// cuGetProcAddress, cudaGetDriverEntryPoint and dlsym consult to hand them out. Programs built
// by nvcc link the runtime statically; that runtime finds the driver with dlopen + dlsym +
// cuGetProcAddress, so every one of those doors leads here.
//
// cuMemFree keeps cudaFree's guarantee (memory freed is not reused before the work queued
// before the free is done) through device-ordered frees; cuMemFreeAsync keeps stream order.
// Stream creation and destruction are watched so that device-ordered frees are ordered
// against every stream the program creates.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "interpose/shim.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::interpose;

namespace {

using CUdeviceptr = unsigned long long;
using CUstream = void*;
// CUresult values (the rest come from to_cuda_error).
constexpr int kSuccess = 0, kInvalidValue = 1, kNotInitialized = 3;
constexpr std::uint64_t kPerThreadFlag = 1 << 1;  // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
void* const kPerThreadStream = reinterpret_cast<void*>(0x2);  // CU_STREAM_PER_THREAD


template <typename Fn, typename... Args>
int call_real(const char* base_name, Args... args) {
  auto fn = reinterpret_cast<Fn>(real_driver(base_name));
  return fn != nullptr ? fn(args...) : kNotInitialized;
}

int allocate(CUdeviceptr* dptr, std::size_t size, void* stream) {
  if (dptr == nullptr) return kInvalidValue;
  void* p = nullptr;
  const Error err = allocate_on_current(&p, size, stream);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return to_cuda_error(err);
}

int free_memory(const char* real_name, CUdeviceptr dptr, DeviceAllocator::FreeOrder order,
                void* stream, bool on_stream) {
  void* ptr = reinterpret_cast<void*>(dptr);
  switch (free_if_ours(ptr, order, stream, on_stream)) {
    case FreeResult::freed: return kSuccess;
    case FreeResult::failed: return kInvalidValue;
    case FreeResult::not_ours: break;
  }
  if (on_stream) return call_real<int (*)(CUdeviceptr, CUstream)>(real_name, dptr, stream);
  return call_real<int (*)(CUdeviceptr)>(real_name, dptr);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** fn,
                                                            int version, std::uint64_t flags);

__attribute__((visibility("default"))) int cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t size) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc", dptr, size);
  return allocate(dptr, size, nullptr);
}

__attribute__((visibility("default"))) int cuMemFree_v2(CUdeviceptr dptr) {
  Inside inside;
  if (!serve(inside)) return call_real<int (*)(CUdeviceptr)>("cuMemFree", dptr);
  if (dptr == 0) return kSuccess;
  return free_memory("cuMemFree", dptr, DeviceAllocator::FreeOrder::device, nullptr, false);
}

__attribute__((visibility("default"))) int cuMemAllocAsync(CUdeviceptr* dptr, std::size_t size,
                                                           CUstream stream) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(CUdeviceptr*, std::size_t, CUstream)>("cuMemAllocAsync", dptr, size,
                                                                   stream);
  }
  return allocate(dptr, size, stream);
}

__attribute__((visibility("default"))) int cuMemAllocAsync_ptsz(CUdeviceptr* dptr,
                                                                std::size_t size,
                                                                CUstream stream) {
  Inside inside;
  if (!serve(inside)) {
    auto fn = reinterpret_cast<int (*)(CUdeviceptr*, std::size_t, CUstream)>(
        real_driver("cuMemAllocAsync"));
    return fn != nullptr ? fn(dptr, size, stream != nullptr ? stream : kPerThreadStream)
                         : kNotInitialized;
  }
  return allocate(dptr, size, stream != nullptr ? stream : kPerThreadStream);
}

__attribute__((visibility("default"))) int cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync", dptr, stream);
  }
  return free_memory("cuMemFreeAsync", dptr, DeviceAllocator::FreeOrder::stream, stream, true);
}

__attribute__((visibility("default"))) int cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                                               CUstream stream) {
  return cuMemFreeAsync(dptr, stream != nullptr ? stream : kPerThreadStream);
}

__attribute__((visibility("default"))) int cuMemAllocPitch_v2(CUdeviceptr* dptr,
                                                              std::size_t* pitch,
                                                              std::size_t width,
                                                              std::size_t height,
                                                              unsigned element_size) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned)>(
        "cuMemAllocPitch", dptr, pitch, width, height, element_size);
  }
  if (pitch == nullptr || (element_size != 4 && element_size != 8 && element_size != 16)) {
    return kInvalidValue;
  }
  *pitch = round_up(width, kPitchAlignment);
  return allocate(dptr, *pitch * height, nullptr);
}

__attribute__((visibility("default"))) int cuMemGetInfo_v2(std::size_t* free_bytes,
                                                           std::size_t* total_bytes) {
  Inside inside;
  if (!serve(inside)) {
    return call_real<int (*)(std::size_t*, std::size_t*)>("cuMemGetInfo", free_bytes,
                                                          total_bytes);
  }
  return to_cuda_error(memory_info(free_bytes, total_bytes));  // NULLs allowed
}

__attribute__((visibility("default"))) int cuStreamCreate(CUstream* stream, unsigned flags) {
  Inside inside;
  const int r = call_real<int (*)(CUstream*, unsigned)>("cuStreamCreate", stream, flags);
  if (r == kSuccess && serve(inside)) watch_stream(*stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamCreateWithPriority(CUstream* stream,
                                                                      unsigned flags,
                                                                      int priority) {
  Inside inside;
  const int r = call_real<int (*)(CUstream*, unsigned, int)>("cuStreamCreateWithPriority",
                                                             stream, flags, priority);
  if (r == kSuccess && serve(inside)) watch_stream(*stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamDestroy_v2(CUstream stream) {
  Inside inside;
  if (serve(inside)) unwatch_stream(stream);
  return call_real<int (*)(CUstream)>("cuStreamDestroy", stream);
}

// cudaDeviceReset of a statically linked runtime arrives here: everything cudalloc holds on
// the device goes back before the context's memory does.
__attribute__((visibility("default"))) int cuDevicePrimaryCtxReset_v2(int device) {
  Inside inside;
  if (serve(inside)) reset_device(device);
  return call_real<int (*)(int)>("cuDevicePrimaryCtxReset", device);
}

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** fn,
                                                               int version,
                                                               std::uint64_t flags,
                                                               int* status) {
  Inside inside;
  if (serve(inside) && symbol != nullptr && fn != nullptr && version >= 3020) {
    if (void* hook = driver_hook(symbol, (flags & kPerThreadFlag) != 0)) {
      // Before CUDA 12.0, cuGetProcAddress itself had four parameters.
      if (version < 12000 && std::strcmp(symbol, "cuGetProcAddress") == 0) {
        hook = reinterpret_cast<void*>(&cuGetProcAddress);
      }
      *fn = hook;
      if (status != nullptr) *status = 0;  // CU_GET_PROC_ADDRESS_SUCCESS
      return kSuccess;
    }
  }
  return call_real<int (*)(const char*, void**, int, std::uint64_t, int*)>(
      "cuGetProcAddress", symbol, fn, version, flags, status);
}

__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** fn,
                                                            int version, std::uint64_t flags) {
  return cuGetProcAddress_v2(symbol, fn, version, flags, nullptr);
}

}  // extern "C"

namespace cudalloc::interpose {
namespace {

struct Hook {
  const char* base;       // the name cuGetProcAddress is asked for
  const char* exported;   // the versioned symbol dlsym is asked for
  void* fn;
  void* per_thread;       // the _ptsz flavour (or fn)
};

const Hook kHooks[] = {
    {"cuMemAlloc", "cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2), nullptr},
    {"cuMemFree", "cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2), nullptr},
    {"cuMemAllocPitch", "cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2), nullptr},
    {"cuMemGetInfo", "cuMemGetInfo_v2", reinterpret_cast<void*>(&cuMemGetInfo_v2), nullptr},
    {"cuMemAllocAsync", "cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync),
     reinterpret_cast<void*>(&cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", "cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync),
     reinterpret_cast<void*>(&cuMemFreeAsync_ptsz)},
    {"cuStreamCreate", "cuStreamCreate", reinterpret_cast<void*>(&cuStreamCreate), nullptr},
    {"cuStreamCreateWithPriority", "cuStreamCreateWithPriority",
     reinterpret_cast<void*>(&cuStreamCreateWithPriority), nullptr},
    {"cuStreamDestroy", "cuStreamDestroy_v2", reinterpret_cast<void*>(&cuStreamDestroy_v2), nullptr},
    {"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2",
     reinterpret_cast<void*>(&cuDevicePrimaryCtxReset_v2), nullptr},
    {"cuGetProcAddress", "cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2),
     nullptr},
};

}  // namespace

void* driver_hook(const char* base_name, bool per_thread) {
  for (const Hook& h : kHooks) {
    if (std::strcmp(h.base, base_name) == 0) {
      return per_thread && h.per_thread != nullptr ? h.per_thread : h.fn;
    }
  }
  return nullptr;
}

}  // namespace cudalloc::interpose
