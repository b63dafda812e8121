// CudaDevice: see cuda_device.h. Types and enums come from <cuda.h>; no symbol of libcuda is
// linked. Entry points are resolved once, through cuGetProcAddress, with CUDA 12.0 semantics
// (so cuMemAlloc is cuMemAlloc_v2, cuCtxSynchronize takes no context, ...).
#include "device/cuda_device.h"
#include "device/real_dlsym.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <vector>

namespace cudalloc::device {
namespace {

constexpr int kRequestedCudaVersion = 12000;

// Function pointers (explicit versions, so a newer cuda.h cannot change a signature) and the
// per-device state built once at initialisation. Read-only after load().
struct Driver {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDeviceGetCount_v2000 device_get_count = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;
  PFN_cuMemAlloc_v3020 mem_alloc = nullptr;
  PFN_cuMemFree_v3020 mem_free = nullptr;
  PFN_cuMemGetInfo_v3020 mem_get_info = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
  PFN_cuMemcpyAsync_v4000 memcpy_async = nullptr;
  PFN_cuMemsetD8Async_v3020 memset_d8_async = nullptr;
  PFN_cuMemHostAlloc_v2020 mem_host_alloc = nullptr;
  PFN_cuMemFreeHost_v2000 mem_free_host = nullptr;
  PFN_cuDeviceCanAccessPeer_v4000 can_access_peer = nullptr;
  // Stream capture (optional: null where the driver lacks them).
  PFN_cuStreamIsCapturing_v10000 stream_is_capturing = nullptr;
  PFN_cuStreamGetCaptureInfo_v11030 stream_capture_info = nullptr;
  PFN_cuIpcGetMemHandle_v4010 ipc_get_mem_handle = nullptr;
  // Sharing physical memory between processes as POSIX file descriptors (optional).
  PFN_cuMemExportToShareableHandle_v10020 mem_export = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 mem_import = nullptr;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_capture_mode = nullptr;
  // Virtual memory management; all resolved or `vmm` is false.
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;

  bool ready = false;  // driver loaded and cuInit succeeded
  bool vmm = false;
  const char* failure = "";  // why !ready
  std::vector<CUdevice> devices;             // by ordinal
  std::vector<CUcontext> contexts;           // primary contexts; null if retain failed
  std::vector<CUresult> context_results;     // result of cuDevicePrimaryCtxRetain
  std::vector<std::size_t> granularities;    // 0 = no VMM
  std::vector<int> host_numa;                // the host NUMA node closest to each; -1 unknown
  std::vector<bool> fd_handles;              // device memory can carry a POSIX fd handle
  // By ordinal: the devices that can reach its memory over peer-to-peer, itself first. Pages
  // mapped for a device are granted to all of them, so that copies and kernels of another
  // GPU (a tensor moved between devices) can use them, as with cudaMalloc'd memory.
  std::vector<std::vector<CUdevice>> access;
};

thread_local const char* t_last_error = "";

// cuGetProcAddress_v2 (CUDA >= 12.0) or cuGetProcAddress (11.3 .. 11.8).
PFN_cuGetProcAddress_v12000 g_get_proc_v2 = nullptr;
PFN_cuGetProcAddress_v11030 g_get_proc_v1 = nullptr;

template <class Fn>
bool resolve(const char* symbol, Fn* out) {
  void* fn = nullptr;
  CUresult r = g_get_proc_v2
                   ? g_get_proc_v2(symbol, &fn, kRequestedCudaVersion,
                                   CU_GET_PROC_ADDRESS_DEFAULT, nullptr)
                   : g_get_proc_v1(symbol, &fn, kRequestedCudaVersion,
                                   CU_GET_PROC_ADDRESS_DEFAULT);
  if (r != CUDA_SUCCESS || fn == nullptr) return false;
  *out = reinterpret_cast<Fn>(fn);
  return true;
}

bool resolve_core(Driver& d) {
  return resolve("cuInit", &d.init) && resolve("cuDeviceGetCount", &d.device_get_count) &&
         resolve("cuDeviceGet", &d.device_get) &&
         resolve("cuDeviceGetAttribute", &d.device_get_attribute) &&
         resolve("cuDevicePrimaryCtxRetain", &d.primary_ctx_retain) &&
         resolve("cuCtxGetCurrent", &d.ctx_get_current) &&
         resolve("cuCtxSetCurrent", &d.ctx_set_current) &&
         resolve("cuCtxGetDevice", &d.ctx_get_device) &&
         resolve("cuCtxSynchronize", &d.ctx_synchronize) &&
         resolve("cuMemAlloc", &d.mem_alloc) && resolve("cuMemFree", &d.mem_free) &&
         resolve("cuMemGetInfo", &d.mem_get_info) &&
         resolve("cuEventCreate", &d.event_create) &&
         resolve("cuEventDestroy", &d.event_destroy) &&
         resolve("cuEventRecord", &d.event_record) && resolve("cuEventQuery", &d.event_query) &&
         resolve("cuEventSynchronize", &d.event_synchronize) &&
         resolve("cuStreamWaitEvent", &d.stream_wait_event) &&
         resolve("cuMemcpyAsync", &d.memcpy_async) &&
         resolve("cuMemsetD8Async", &d.memset_d8_async) &&
         resolve("cuMemHostAlloc", &d.mem_host_alloc) &&
         resolve("cuMemFreeHost", &d.mem_free_host) &&
         resolve("cuDeviceCanAccessPeer", &d.can_access_peer);
}

void resolve_optional(Driver& d) {
  if (!resolve("cuIpcGetMemHandle", &d.ipc_get_mem_handle)) d.ipc_get_mem_handle = nullptr;
  if (!resolve("cuMemExportToShareableHandle", &d.mem_export) ||
      !resolve("cuMemImportFromShareableHandle", &d.mem_import)) {
    d.mem_export = nullptr;
    d.mem_import = nullptr;
  }
}

void resolve_capture(Driver& d) {
  if (!resolve("cuStreamIsCapturing", &d.stream_is_capturing)) d.stream_is_capturing = nullptr;
  if (!resolve("cuStreamGetCaptureInfo", &d.stream_capture_info)) d.stream_capture_info = nullptr;
  if (!resolve("cuThreadExchangeStreamCaptureMode", &d.exchange_capture_mode)) {
    d.exchange_capture_mode = nullptr;
  }
}

bool resolve_vmm(Driver& d) {
  return resolve("cuMemGetAllocationGranularity", &d.mem_get_granularity) &&
         resolve("cuMemAddressReserve", &d.mem_address_reserve) &&
         resolve("cuMemAddressFree", &d.mem_address_free) &&
         resolve("cuMemCreate", &d.mem_create) && resolve("cuMemRelease", &d.mem_release) &&
         resolve("cuMemMap", &d.mem_map) && resolve("cuMemUnmap", &d.mem_unmap) &&
         resolve("cuMemSetAccess", &d.mem_set_access);
}

// Pinned device memory on `device`, the only kind this layer creates.
CUmemAllocationProp device_memory_prop(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// The VMM page size of `device`, 0 when the device or the driver lacks VMM.
std::size_t query_granularity(const Driver& d, CUdevice device) {
  int supported = 0;
  if (!d.vmm ||
      d.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             device) != CUDA_SUCCESS ||
      supported == 0)
    return 0;
  CUmemAllocationProp prop = device_memory_prop(device);
  std::size_t page = 0;
  if (d.mem_get_granularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
    return 0;
  return page;
}

// Opens the driver, initialises it and retains every primary context. Leaves d.ready false
// (with d.failure set) when anything before the per-device loop fails.
void load(Driver& d) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // never closed
  if (lib == nullptr) {
    d.failure = "libcuda.so.1 could not be loaded";
    return;
  }
  // real_dlsym: an interposed dlsym (ours under LD_PRELOAD) would hand back wrappers.
  g_get_proc_v2 =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(real_dlsym(lib, "cuGetProcAddress_v2"));
  if (g_get_proc_v2 == nullptr)
    g_get_proc_v1 =
        reinterpret_cast<PFN_cuGetProcAddress_v11030>(real_dlsym(lib, "cuGetProcAddress"));
  if (g_get_proc_v2 == nullptr && g_get_proc_v1 == nullptr) {
    d.failure = "libcuda.so.1 has no cuGetProcAddress";
    return;
  }
  resolve("cuGetErrorName", &d.get_error_name);  // optional: only for messages
  if (!resolve_core(d)) {
    d.failure = "libcuda.so.1 lacks a required entry point";
    return;
  }
  d.vmm = resolve_vmm(d);
  resolve_capture(d);
  resolve_optional(d);
  int count = 0;
  CUresult r = d.init(0);
  if (r == CUDA_SUCCESS) r = d.device_get_count(&count);
  if (r != CUDA_SUCCESS) {
    static char message[80];
    const char* name = "?";
    if (d.get_error_name != nullptr) d.get_error_name(r, &name);
    std::snprintf(message, sizeof message, "cuInit failed: %s", name ? name : "?");
    d.failure = message;
    return;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    r = d.device_get(&device, i);
    if (r == CUDA_SUCCESS) r = d.primary_ctx_retain(&ctx, device);
    d.devices.push_back(device);
    d.contexts.push_back(r == CUDA_SUCCESS ? ctx : nullptr);
    d.context_results.push_back(r);
    d.granularities.push_back(r == CUDA_SUCCESS ? query_granularity(d, device) : 0);
    int numa = -1;
    if (r != CUDA_SUCCESS ||
        d.device_get_attribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS)
      numa = -1;
    d.host_numa.push_back(numa);
    int fd_handles = 0;
    if (r != CUDA_SUCCESS || d.mem_export == nullptr ||
        d.device_get_attribute(&fd_handles,
                               CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                               device) != CUDA_SUCCESS)
      fd_handles = 0;
    d.fd_handles.push_back(fd_handles != 0);
  }
  for (int i = 0; i < count; ++i) {
    std::vector<CUdevice> reach{d.devices[i]};
    for (int j = 0; j < count; ++j) {
      int can = 0;
      if (j != i && d.can_access_peer(&can, d.devices[j], d.devices[i]) == CUDA_SUCCESS && can) {
        reach.push_back(d.devices[j]);
      }
    }
    d.access.push_back(std::move(reach));
  }
  d.ready = true;
}

const Driver& driver() {
  static Driver* d = new Driver;  // never destroyed: used by late static destructors
  static std::once_flag once;
  std::call_once(once, [] { load(*d); });
  return *d;
}

}  // namespace

void* real_driver_function(const char* symbol) {
  void* fn = nullptr;
  const Driver& d = driver();
  (void)d;  // loads the driver
  if (g_get_proc_v2 == nullptr && g_get_proc_v1 == nullptr) return nullptr;
  return resolve(symbol, &fn) ? fn : nullptr;
}

namespace {

const char* error_name(CUresult r) {
  const char* name = nullptr;
  const Driver& d = driver();
  if (d.get_error_name != nullptr && d.get_error_name(r, &name) == CUDA_SUCCESS && name)
    return name;
  thread_local char buffer[32];
  std::snprintf(buffer, sizeof buffer, "CUresult %d", static_cast<int>(r));
  return buffer;
}

Status to_status(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return Status::ok;
    case CUDA_ERROR_OUT_OF_MEMORY: return Status::out_of_memory;
    case CUDA_ERROR_NOT_READY: return Status::not_ready;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE: return Status::invalid_value;
    case CUDA_ERROR_NOT_SUPPORTED: return Status::not_supported;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:  // the driver is shutting down (process exit)
    case CUDA_ERROR_STUB_LIBRARY: return Status::no_device;
    default: return Status::device_error;
  }
}

// The Status of a driver result; records the name of a failure for cuda_last_error_name().
Status check(CUresult r) {
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) t_last_error = error_name(r);
  return to_status(r);
}

// no_device unless the driver is loaded and has at least one device.
Status usable(const Driver& d) {
  if (!d.ready) {
    t_last_error = d.failure;
    return Status::no_device;
  }
  if (d.devices.empty()) {
    t_last_error = "CUDA_ERROR_NO_DEVICE";
    return Status::no_device;
  }
  return Status::ok;
}

// Makes the primary context of `dev` current for its lifetime, then restores the calling
// thread's previous context (possibly none). status() is not ok when `dev` is unusable.
class ContextGuard {
 public:
  explicit ContextGuard(int dev) : d_(driver()) {
    status_ = usable(d_);
    if (status_ != Status::ok) return;
    if (dev < 0 || dev >= static_cast<int>(d_.devices.size())) {
      status_ = Status::invalid_value;
      return;
    }
    CUcontext target = d_.contexts[dev];
    if (target == nullptr) {
      status_ = check(d_.context_results[dev]);
      return;
    }
    status_ = check(d_.ctx_get_current(&previous_));
    if (status_ != Status::ok || previous_ == target) return;
    status_ = check(d_.ctx_set_current(target));
    switched_ = status_ == Status::ok;
  }
  ~ContextGuard() {
    if (switched_) d_.ctx_set_current(previous_);
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

  Status status() const { return status_; }
  const Driver& driver_table() const { return d_; }

 private:
  const Driver& d_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  Status status_ = Status::ok;
};

CUevent as_event(EventHandle e) { return reinterpret_cast<CUevent>(e); }
CUstream as_stream(StreamHandle s) { return reinterpret_cast<CUstream>(s); }

// Read/write access from `device`.
CUmemAccessDesc read_write_access(CUdevice device) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

// Runs f(driver) with the primary context of `dev` current; the guard's failure otherwise.
template <class F>
Status with_context(int dev, F&& f) {
  ContextGuard g(dev);
  return g.status() == Status::ok ? f(g.driver_table()) : g.status();
}

// Runs f(driver) when the driver is usable (and, if `needs_vmm`, has VMM) without touching
// the current context.
template <class F>
Status without_context(bool needs_vmm, F&& f) {
  const Driver& d = driver();
  Status s = usable(d);
  if (s == Status::ok && needs_vmm && !d.vmm) s = Status::not_supported;
  return s == Status::ok ? f(d) : s;
}

}  // namespace

const char* cuda_last_error_name() { return t_last_error; }

const char* CudaDevice::last_failure() const { return cuda_last_error_name(); }

std::unique_ptr<Device> make_cuda_device() { return std::make_unique<CudaDevice>(); }

int CudaDevice::device_count() {
  const Driver& d = driver();
  return d.ready ? static_cast<int>(d.devices.size()) : 0;
}

Status CudaDevice::current_device(int* dev) {
  const Driver& d = driver();
  if (Status s = usable(d); s != Status::ok) return s;
  CUcontext ctx = nullptr;
  if (Status s = check(d.ctx_get_current(&ctx)); s != Status::ok) return s;
  if (ctx == nullptr) {
    *dev = 0;
    return Status::ok;
  }
  CUdevice device = 0;
  if (Status s = check(d.ctx_get_device(&device)); s != Status::ok) return s;
  for (std::size_t i = 0; i < d.devices.size(); ++i) {
    if (d.devices[i] == device) {
      *dev = static_cast<int>(i);
      return Status::ok;
    }
  }
  return Status::device_error;
}

Status CudaDevice::mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) {
  return with_context(dev, [&](const Driver& d) {
    std::size_t free_b = 0, total_b = 0;
    Status s = check(d.mem_get_info(&free_b, &total_b));
    if (s == Status::ok) {
      *free_bytes = free_b;
      *total_bytes = total_b;
    }
    return s;
  });
}

Status CudaDevice::malloc(int dev, std::size_t bytes, void** ptr) {
  return with_context(dev, [&](const Driver& d) {
    CUdeviceptr p = 0;
    // cuMemAlloc is legal while this thread's streams capture only in relaxed mode; the
    // memory is not freed before the graph is gone (core/private_pools.h), which is what
    // makes allocating during a capture safe.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (d.exchange_capture_mode != nullptr) d.exchange_capture_mode(&mode);
    Status s = check(d.mem_alloc(&p, bytes));
    if (d.exchange_capture_mode != nullptr) d.exchange_capture_mode(&mode);
    if (s == Status::ok) *ptr = reinterpret_cast<void*>(p);
    return s;
  });
}

Status CudaDevice::stream_capturing(int dev, StreamHandle stream, bool* capturing) {
  *capturing = false;
  return with_context(dev, [&](const Driver& d) {
    if (d.stream_is_capturing == nullptr) return Status::ok;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const Status s = check(d.stream_is_capturing(reinterpret_cast<CUstream>(stream), &status));
    *capturing = s == Status::ok && status != CU_STREAM_CAPTURE_STATUS_NONE;
    return s;
  });
}

Status CudaDevice::capture_id(int dev, StreamHandle stream, std::uint64_t* id) {
  *id = 0;
  return with_context(dev, [&](const Driver& d) {
    if (d.stream_capture_info == nullptr) return Status::not_supported;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t capture = 0;
    const Status s = check(d.stream_capture_info(reinterpret_cast<CUstream>(stream), &status,
                                                 &capture, nullptr, nullptr, nullptr));
    if (s == Status::ok && status == CU_STREAM_CAPTURE_STATUS_ACTIVE) *id = capture;
    return s;
  });
}

Status CudaDevice::ipc_handle(int dev, void* ptr, unsigned char* handle) {
  return with_context(dev, [&](const Driver& d) {
    if (d.ipc_get_mem_handle == nullptr) return Status::not_supported;
    CUipcMemHandle h;
    const Status s = check(d.ipc_get_mem_handle(&h, reinterpret_cast<CUdeviceptr>(ptr)));
    if (s == Status::ok) std::memcpy(handle, &h, sizeof h < kIpcHandleBytes ? sizeof h : kIpcHandleBytes);
    return s;
  });
}

Status CudaDevice::free(int dev, void* ptr) {
  return with_context(dev, [&](const Driver& d) {
    return check(d.mem_free(reinterpret_cast<CUdeviceptr>(ptr)));
  });
}

std::size_t CudaDevice::granularity(int dev) {
  const Driver& d = driver();
  if (usable(d) != Status::ok || dev < 0 || dev >= static_cast<int>(d.devices.size())) return 0;
  return d.granularities[dev];
}

Status CudaDevice::reserve(int dev, std::size_t bytes, std::uintptr_t* va) {
  return with_context(dev, [&](const Driver& d) {
    if (!d.vmm) return Status::not_supported;
    CUdeviceptr p = 0;
    Status s = check(d.mem_address_reserve(&p, bytes, 0, 0, 0));
    if (s == Status::ok) *va = static_cast<std::uintptr_t>(p);
    return s;
  });
}

Status CudaDevice::unreserve(std::uintptr_t va, std::size_t bytes) {
  return without_context(true, [&](const Driver& d) {
    return check(d.mem_address_free(static_cast<CUdeviceptr>(va), bytes));
  });
}

namespace {

// Whether device memory is still created shareable: cleared, for the life of the process,
// the first time the driver refuses a shareable creation for another reason than memory (a
// container or driver that cannot hand out file descriptors), as PyTorch's expandable
// segments do.
std::atomic<bool> g_create_shareable{true};

// Device memory on `dev`: shareable as a POSIX file descriptor where the device allows it
// (export_physical), plain where it does not.
CUresult create_device_memory(const Driver& d, int dev, std::size_t bytes,
                              CUmemGenericAllocationHandle* h) {
  CUmemAllocationProp prop = device_memory_prop(d.devices[dev]);
  if (d.fd_handles[dev] && g_create_shareable.load(std::memory_order_relaxed)) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult r = d.mem_create(h, bytes, &prop, 0);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY) return r;
    g_create_shareable.store(false, std::memory_order_relaxed);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  return d.mem_create(h, bytes, &prop, 0);
}

}  // namespace

Status CudaDevice::create_physical(int dev, std::size_t bytes, Location where,
                                   PhysicalHandle* handle) {
  return with_context(dev, [&](const Driver& d) {
    if (!d.vmm) return Status::not_supported;
    CUmemAllocationProp prop = device_memory_prop(d.devices[dev]);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = CUDA_SUCCESS;
    if (where == Location::device) {
      r = create_device_memory(d, dev, bytes, &h);
    } else {
      // The host node closest to the device where the driver knows it, else any host memory
      // (drivers before CUDA 12.2 know neither and fail: the caller falls back).
      r = CUDA_ERROR_NOT_SUPPORTED;
      if (d.host_numa[dev] >= 0) {
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = d.host_numa[dev];
        r = d.mem_create(&h, bytes, &prop, 0);
      }
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) {
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
        prop.location.id = 0;
        r = d.mem_create(&h, bytes, &prop, 0);
      }
    }
    Status s = check(r);
    if (s == Status::ok) *handle = static_cast<PhysicalHandle>(h);
    return s;
  });
}

Status CudaDevice::export_physical(PhysicalHandle handle, int* fd) {
  return without_context(true, [&](const Driver& d) {
    if (d.mem_export == nullptr) return Status::not_supported;
    int out = -1;
    const Status s = check(d.mem_export(&out, static_cast<CUmemGenericAllocationHandle>(handle),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (s == Status::ok) *fd = out;
    // Memory created without the handle type: CUDA_ERROR_INVALID_VALUE or NOT_SUPPORTED.
    return s == Status::invalid_value ? Status::not_supported : s;
  });
}

Status CudaDevice::import_physical(int fd, PhysicalHandle* handle) {
  return without_context(true, [&](const Driver& d) {
    if (d.mem_import == nullptr) return Status::not_supported;
    CUmemGenericAllocationHandle h = 0;
    const Status s = check(d.mem_import(&h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (s == Status::ok) *handle = static_cast<PhysicalHandle>(h);
    return s;
  });
}

Status CudaDevice::release_physical(PhysicalHandle handle) {
  return without_context(true, [&](const Driver& d) {
    return check(d.mem_release(static_cast<CUmemGenericAllocationHandle>(handle)));
  });
}

Status CudaDevice::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
                       std::size_t offset) {
  return without_context(true, [&](const Driver& d) {
    return check(d.mem_map(static_cast<CUdeviceptr>(va), bytes, offset,
                           static_cast<CUmemGenericAllocationHandle>(handle), 0));
  });
}

Status CudaDevice::unmap(std::uintptr_t va, std::size_t bytes) {
  return without_context(true, [&](const Driver& d) {
    return check(d.mem_unmap(static_cast<CUdeviceptr>(va), bytes));
  });
}

Status CudaDevice::set_access(int dev, std::uintptr_t va, std::size_t bytes) {
  return with_context(dev, [&](const Driver& d) {
    if (!d.vmm) return Status::not_supported;
    CUmemAccessDesc descs[64];
    std::size_t n = 0;
    for (CUdevice device : d.access[dev]) {
      if (n < std::size(descs)) descs[n++] = read_write_access(device);
    }
    if (n > 1 && d.mem_set_access(static_cast<CUdeviceptr>(va), bytes, descs, n) == CUDA_SUCCESS) {
      return Status::ok;
    }
    // The device itself is what matters; peers are a convenience.
    return check(d.mem_set_access(static_cast<CUdeviceptr>(va), bytes, descs, 1));
  });
}

Status CudaDevice::copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
                        StreamHandle stream) {
  return with_context(dev, [&](const Driver& d) {
    return check(d.memcpy_async(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src),
                                bytes, as_stream(stream)));
  });
}

Status CudaDevice::zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) {
  return with_context(dev, [&](const Driver& d) {
    return check(d.memset_d8_async(static_cast<CUdeviceptr>(dst), 0, bytes, as_stream(stream)));
  });
}

Status CudaDevice::host_alloc(int dev, std::size_t bytes, void** ptr) {
  return with_context(dev, [&](const Driver& d) {
    // Portable: usable from every context; device-mapped: kernels reach it at the same
    // address (unified addressing, which every 64-bit platform CUDA supports has).
    return check(d.mem_host_alloc(ptr, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  });
}

Status CudaDevice::host_free(void* ptr) {
  return without_context(false, [&](const Driver& d) { return check(d.mem_free_host(ptr)); });
}

Status CudaDevice::event_create(int dev, EventHandle* event) {
  return with_context(dev, [&](const Driver& d) {
    CUevent e = nullptr;
    Status s = check(d.event_create(&e, CU_EVENT_DISABLE_TIMING));
    if (s == Status::ok) *event = reinterpret_cast<EventHandle>(e);
    return s;
  });
}

Status CudaDevice::event_destroy(EventHandle event) {
  return without_context(false, [&](const Driver& d) {
    return check(d.event_destroy(as_event(event)));
  });
}

Status CudaDevice::event_record(int dev, EventHandle event, StreamHandle stream) {
  return with_context(dev, [&](const Driver& d) {
    return check(d.event_record(as_event(event), as_stream(stream)));
  });
}

Status CudaDevice::event_query(EventHandle event) {
  return without_context(false, [&](const Driver& d) {
    return check(d.event_query(as_event(event)));
  });
}

Status CudaDevice::event_synchronize(EventHandle event) {
  return without_context(false, [&](const Driver& d) {
    return check(d.event_synchronize(as_event(event)));
  });
}

Status CudaDevice::stream_wait_event(int dev, StreamHandle stream, EventHandle event) {
  return with_context(dev, [&](const Driver& d) {
    return check(d.stream_wait_event(as_stream(stream), as_event(event), 0));
  });
}

Status CudaDevice::synchronize(int dev) {
  return with_context(dev, [&](const Driver& d) { return check(d.ctx_synchronize()); });
}

}  // namespace cudalloc::device
