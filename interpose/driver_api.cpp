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


// Calls the real driver function `base_name`, of the type of the hook that forwards to it
// (REAL(hook) gives it: decltype of the hook itself, so no signature is typed twice).
template <typename Fn, typename... Args>
int call_real(const char* base_name, Args... args) {
  auto fn = reinterpret_cast<Fn>(real_driver(base_name));
  return fn != nullptr ? fn(args...) : kNotInitialized;
}
#define REAL(hook) call_real<decltype(&hook)>

int allocate(CUdeviceptr* dptr, std::size_t size, void* stream) {
  if (dptr == nullptr) return kInvalidValue;
  void* p = nullptr;
  const Error err = allocate_on_current(&p, size, stream);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return to_cuda_error(err);
}

// Frees a cudalloc pointer; kNotOurs when it is not one (the caller asks the real driver).
constexpr int kNotOurs = -1;
int free_ours(CUdeviceptr dptr, DeviceAllocator::FreeOrder order, void* stream, bool on_stream) {
  return free_result(free_if_ours(reinterpret_cast<void*>(dptr), order, stream, on_stream),
                     kNotOurs);
}

// CUipcMemHandle's layout: 64 opaque bytes, passed by value to cuIpcOpenMemHandle.
struct IpcMemHandle {
  unsigned char bytes[64];
};

int legacy_open(void** base, const unsigned char* bytes, unsigned flags);
int legacy_close(void* base);
constexpr LegacyIpc kLegacy{&legacy_open, &legacy_close};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** fn,
                                                            int version, std::uint64_t flags);
__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** fn,
                                                               int version,
                                                               std::uint64_t flags,
                                                               int* status);

__attribute__((visibility("default"))) int cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t size) {
  Inside inside;
  if (!serve(inside)) return REAL(cuMemAlloc_v2)("cuMemAlloc", dptr, size);
  if (size == 0) return kInvalidValue;  // the driver refuses 0 bytes (the runtime does not)
  return allocate(dptr, size, nullptr);
}

__attribute__((visibility("default"))) int cuMemFree_v2(CUdeviceptr dptr) {
  Inside inside;
  if (!serve(inside)) return REAL(cuMemFree_v2)("cuMemFree", dptr);
  if (dptr == 0) return kSuccess;
  const int r = free_ours(dptr, DeviceAllocator::FreeOrder::device, nullptr, false);
  return r != kNotOurs ? r : REAL(cuMemFree_v2)("cuMemFree", dptr);
}

__attribute__((visibility("default"))) int cuMemAllocAsync(CUdeviceptr* dptr, std::size_t size,
                                                           CUstream stream) {
  Inside inside;
  if (!serve(inside) || capturing(stream)) {
    return REAL(cuMemAllocAsync)("cuMemAllocAsync", dptr, size, stream);
  }
  return allocate(dptr, size, stream);
}

__attribute__((visibility("default"))) int cuMemAllocAsync_ptsz(CUdeviceptr* dptr,
                                                                std::size_t size,
                                                                CUstream stream) {
  return cuMemAllocAsync(dptr, size, stream != nullptr ? stream : kPerThreadStream);
}

__attribute__((visibility("default"))) int cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  Inside inside;
  if (!serve(inside)) return REAL(cuMemFreeAsync)("cuMemFreeAsync", dptr, stream);
  if (dptr == 0) return kSuccess;  // as CUDA answers: nothing to free
  if (capturing(stream)) {
    return keep_freed_in_capture(reinterpret_cast<void*>(dptr))
               ? kSuccess
               : REAL(cuMemFreeAsync)("cuMemFreeAsync", dptr, stream);
  }
  const auto order = async_free_order(stream);
  const int r = free_ours(dptr, order, stream, order == DeviceAllocator::FreeOrder::stream);
  return r != kNotOurs ? r : REAL(cuMemFreeAsync)("cuMemFreeAsync", dptr, stream);
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
    return REAL(cuMemAllocPitch_v2)("cuMemAllocPitch", dptr, pitch, width, height, element_size);
  }
  if (dptr == nullptr || pitch == nullptr ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    return kInvalidValue;
  }
  *dptr = 0;
  std::size_t bytes = 0;
  const Error e = pitched_size(width, height, pitch, &bytes);
  // Unlike cudaMallocPitch, the driver refuses an empty area, as cuMemAlloc refuses 0 bytes.
  if (e != Error::ok || bytes == 0) return kInvalidValue;
  return allocate(dptr, bytes, nullptr);
}

__attribute__((visibility("default"))) int cuMemGetInfo_v2(std::size_t* free_bytes,
                                                           std::size_t* total_bytes) {
  Inside inside;
  if (!serve(inside)) return REAL(cuMemGetInfo_v2)("cuMemGetInfo", free_bytes, total_bytes);
  return to_cuda_error(memory_info(free_bytes, total_bytes));  // NULLs allowed
}

__attribute__((visibility("default"))) int cuStreamCreate(CUstream* stream, unsigned flags) {
  Inside inside;
  const int r = REAL(cuStreamCreate)("cuStreamCreate", stream, flags);
  if (r == kSuccess && stream != nullptr && serve(inside)) watch_stream(*stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamCreateWithPriority(CUstream* stream,
                                                                      unsigned flags,
                                                                      int priority) {
  Inside inside;
  const int r =
      REAL(cuStreamCreateWithPriority)("cuStreamCreateWithPriority", stream, flags, priority);
  if (r == kSuccess && stream != nullptr && serve(inside)) watch_stream(*stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamDestroy_v2(CUstream stream) {
  Inside inside;
  if (serve(inside)) unwatch_stream(stream);
  return REAL(cuStreamDestroy_v2)("cuStreamDestroy", stream);
}

// Captures are counted (core/captures.h): while one is underway nothing fences frees. The
// statically linked runtime's cudaStreamBeginCapture arrives here.
__attribute__((visibility("default"))) int cuStreamBeginCapture_v2(CUstream stream, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cuStreamBeginCapture_v2)("cuStreamBeginCapture", stream, mode);
  if (r == kSuccess && serve(inside)) capture_began(stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamBeginCapture_v2_ptsz(CUstream stream,
                                                                        int mode) {
  return cuStreamBeginCapture_v2(stream != nullptr ? stream : kPerThreadStream, mode);
}

// A capture into an existing graph (CUDA 12.3): counted like cuStreamBeginCapture.
__attribute__((visibility("default"))) int cuStreamBeginCaptureToGraph(
    CUstream stream, void* graph, const void* dependencies, const void* dependency_data,
    std::size_t count, int mode) {
  Inside inside;
  if (serve(inside)) capture_beginning();
  const int r = REAL(cuStreamBeginCaptureToGraph)("cuStreamBeginCaptureToGraph", stream, graph,
                                                  dependencies, dependency_data, count, mode);
  if (r == kSuccess && serve(inside)) capture_began(stream);
  return r;
}

__attribute__((visibility("default"))) int cuStreamBeginCaptureToGraph_ptsz(
    CUstream stream, void* graph, const void* dependencies, const void* dependency_data,
    std::size_t count, int mode) {
  return cuStreamBeginCaptureToGraph(stream != nullptr ? stream : kPerThreadStream, graph,
                                     dependencies, dependency_data, count, mode);
}

__attribute__((visibility("default"))) int cuStreamEndCapture(CUstream stream, void** graph) {
  Inside inside;
  const int r = REAL(cuStreamEndCapture)("cuStreamEndCapture", stream, graph);
  if (serve(inside)) capture_ended(stream);  // ended also when it failed
  return r;
}

__attribute__((visibility("default"))) int cuStreamEndCapture_ptsz(CUstream stream,
                                                                   void** graph) {
  return cuStreamEndCapture(stream != nullptr ? stream : kPerThreadStream, graph);
}

// CUDA IPC (shim.h); a statically linked runtime's cudaIpc* calls arrive here.
__attribute__((visibility("default"))) int cuIpcGetMemHandle(IpcMemHandle* handle,
                                                             CUdeviceptr ptr) {
  Inside inside;
  int code = 0;
  if (handle != nullptr && serve(inside) &&
      ipc_export(reinterpret_cast<void*>(ptr), handle->bytes, &code)) {
    return code;
  }
  return REAL(cuIpcGetMemHandle)("cuIpcGetMemHandle", handle, ptr);
}

__attribute__((visibility("default"))) int cuIpcOpenMemHandle_v2(CUdeviceptr* ptr,
                                                                 IpcMemHandle handle,
                                                                 unsigned flags) {
  Inside inside;
  int code = 0;
  void* opened = nullptr;
  if (ptr != nullptr && serve(inside) && ipc_open(handle.bytes, flags, &opened, kLegacy, &code)) {
    if (code == 0) *ptr = reinterpret_cast<CUdeviceptr>(opened);
    return code;
  }
  return REAL(cuIpcOpenMemHandle_v2)("cuIpcOpenMemHandle", ptr, handle, flags);
}

__attribute__((visibility("default"))) int cuIpcCloseMemHandle(CUdeviceptr ptr) {
  Inside inside;
  int code = 0;
  if (serve(inside) && ipc_close(reinterpret_cast<void*>(ptr), kLegacy, &code)) return code;
  return REAL(cuIpcCloseMemHandle)("cuIpcCloseMemHandle", ptr);
}

// cudaDeviceReset of a statically linked runtime arrives here: everything cudalloc holds on
// the device goes back before the context's memory does.
__attribute__((visibility("default"))) int cuDevicePrimaryCtxReset_v2(int device) {
  Inside inside;
  if (serve(inside)) reset_device(device);
  return REAL(cuDevicePrimaryCtxReset_v2)("cuDevicePrimaryCtxReset", device);
}

namespace {

// cuGetProcAddress of either signature, called from `caller`.
int get_proc_address(const char* symbol, void** fn, int version, std::uint64_t flags,
                     int* status, const void* caller) {
  Inside inside;
  if (serve(inside) && symbol != nullptr && std::strcmp(symbol, "cuGetExportTable") == 0) {
    runtime_lookup_from(caller);
  }
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
  return REAL(cuGetProcAddress_v2)("cuGetProcAddress", symbol, fn, version, flags, status);
}

}  // namespace

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** fn,
                                                               int version,
                                                               std::uint64_t flags,
                                                               int* status) {
  return get_proc_address(symbol, fn, version, flags, status, __builtin_return_address(0));
}

__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** fn,
                                                            int version, std::uint64_t flags) {
  return get_proc_address(symbol, fn, version, flags, nullptr, __builtin_return_address(0));
}

}  // extern "C"

namespace {

int legacy_open(void** base, const unsigned char* bytes, unsigned flags) {
  IpcMemHandle h;
  std::memcpy(h.bytes, bytes, sizeof h.bytes);
  CUdeviceptr p = 0;
  const int r = REAL(cuIpcOpenMemHandle_v2)("cuIpcOpenMemHandle", &p, h, flags);
  if (r == 0) *base = reinterpret_cast<void*>(p);
  return r;
}

int legacy_close(void* base) {
  return REAL(cuIpcCloseMemHandle)("cuIpcCloseMemHandle", reinterpret_cast<CUdeviceptr>(base));
}

}  // namespace

#undef REAL

namespace cudalloc::interpose {
namespace {

struct Hook {
  const char* base;       // the name cuGetProcAddress is asked for
  const char* exported;   // the versioned symbol dlsym is asked for
  void* fn;
  void* per_thread;       // the _ptsz flavour (or fn)
};

// From symbols.def: every driver entry point defined above.
const Hook kHooks[] = {
#define CUDALLOC_DRIVER(base, name) {#base, #name, reinterpret_cast<void*>(&name), nullptr},
#define CUDALLOC_DRIVER_PTSZ(base, name, per_thread) \
  {#base, #name, reinterpret_cast<void*>(&name), reinterpret_cast<void*>(&per_thread)},
#include "interpose/symbols.def"
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
