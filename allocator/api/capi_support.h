// What every C API translation unit shares: error codes, the exception guard and the
// device-argument rule. Internal to the library (not installed).
#pragma once

#include <new>
#include <stdexcept>

#include "api/cudalloc.h"
#include "api/hooks.h"
#include "api/runtime.h"
#include "core/log.h"

namespace cudalloc::capi {

using cudalloc::Error;
using cudalloc::fail;
using cudalloc::StreamHandle;
using cudalloc::DeviceAllocator;
using cudalloc::Allocator;
using cudalloc::process_allocator;

inline cudalloc_error_t to_code(Error e) {
  switch (e) {
    case Error::ok: return CUDALLOC_SUCCESS;
    case Error::invalid_value: return CUDALLOC_ERROR_INVALID_VALUE;
    case Error::invalid_pointer: return CUDALLOC_ERROR_INVALID_DEVICE_POINTER;
    case Error::out_of_memory: return CUDALLOC_ERROR_MEMORY_ALLOCATION;
    case Error::no_device: return CUDALLOC_ERROR_NO_DEVICE;
    case Error::not_supported: return CUDALLOC_ERROR_NOT_SUPPORTED;
    case Error::device_error:
    case Error::internal: return CUDALLOC_ERROR_UNKNOWN;
  }
  return CUDALLOC_ERROR_UNKNOWN;
}

// Runs `body` (returning Error) with exceptions caught. The last error message is left alone
// on success (like errno), which keeps thread-local storage off the hot path.
template <typename Body>
inline cudalloc_error_t guarded(Body&& body) noexcept {
  try {
    return to_code(body());
  } catch (const std::bad_alloc&) {
    return to_code(fail(Error::out_of_memory, "host memory exhausted (allocator metadata)"));
  } catch (const std::exception& e) {
    return to_code(fail(Error::internal, "unexpected exception: %s", e.what()));
  } catch (...) {
    return to_code(fail(Error::internal, "unexpected exception"));
  }
}

inline StreamHandle handle(cudaStream_t stream) { return reinterpret_cast<StreamHandle>(stream); }

// The device argument of every C API function (documented in cudalloc.h): -1 is the current
// device, or every initialised device where the function says "all"; 0..count-1 is a device;
// anything else is CUDALLOC_ERROR_INVALID_DEVICE, as cudaSetDevice answers a bad ordinal. It
// is checked before any other argument. Without any device (no driver) the core answers
// instead, with CUDALLOC_ERROR_NO_DEVICE.
enum class MinusOne { current, all };

inline cudalloc_error_t check_device(int device) noexcept {
  if (device == -1) return CUDALLOC_SUCCESS;
  int count = 0;
  try {
    // A device already in use is valid: no driver query on the cached path.
    if (process_allocator().initialised(device)) return CUDALLOC_SUCCESS;
    count = process_allocator().device_count();
  } catch (...) {
    return to_code(fail(Error::internal, "the allocator could not be created"));
  }
  if (device >= 0 && (count == 0 || device < count)) return CUDALLOC_SUCCESS;
  fail(Error::invalid_value, "device %d does not exist (%d devices; -1 means the current one)",
       device, count);
  return CUDALLOC_ERROR_INVALID_DEVICE;
}

// The allocator of `device` when the process allocator exists and that device is in use
// already (the cached path of every call that names its device): two atomic loads.
inline DeviceAllocator* device_in_use(int device) noexcept {
  Allocator* a = cudalloc::process_allocator_if_created();
  return a != nullptr ? a->in_use(device) : nullptr;
}

// Runs f(DeviceAllocator&) on `device` (checked as above), or on every initialised device
// when it is -1 and -1 means all.
template <typename F>
inline cudalloc_error_t on_device(int device, MinusOne minus_one, F&& f) {
  if (DeviceAllocator* d = device_in_use(device)) return guarded([&] { return f(*d); });
  if (const cudalloc_error_t e = check_device(device); e != CUDALLOC_SUCCESS) return e;
  return guarded([&]() -> Error {
    Allocator& a = process_allocator();
    if (device == -1 && minus_one == MinusOne::all) {
      Error result = Error::ok;
      a.for_each_device([&](DeviceAllocator& d) {
        if (Error e = f(d); e != Error::ok) result = e;
      });
      return result;
    }
    Error err = Error::ok;
    DeviceAllocator* d = a.device(device, &err);
    return d == nullptr ? err : f(*d);
  });
}

// Runs f(DeviceAllocator&) on the device that has `ptr` live. NULL is never live (as CUDA
// answers an offload or query of NULL: an invalid pointer).
template <typename F>
inline cudalloc_error_t on_owner(const void* ptr, const char* what, F&& f) {
  return guarded([&]() -> Error {
    DeviceAllocator* d = ptr != nullptr ? process_allocator().owner_of(ptr) : nullptr;
    if (d == nullptr) return fail(Error::invalid_pointer, "%s of %p: not a live allocation", what, ptr);
    return f(*d);
  });
}

// Passes `err`, the answer to a request of `size` bytes on `stream`, through; after an
// out-of-memory failure, reports the request first (hooks.h: the snapshot_on_oom hook). Every
// allocating entry point calls this, outside the device's lock.
inline Error after_out_of_memory(DeviceAllocator& d, std::size_t size, cudaStream_t stream,
                                 Error err) {
  if (err == Error::out_of_memory) {
    cudalloc::report_out_of_memory(d, size, reinterpret_cast<std::uintptr_t>(stream));
  }
  return err;
}

}  // namespace cudalloc::capi
