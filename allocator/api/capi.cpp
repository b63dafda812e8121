// The C API (cudalloc.h) over the process-wide allocator. Every entry point catches
// everything: nothing is thrown into C callers.
#include <new>
#include <stdexcept>
#include <string>

#include "api/cudalloc.h"
#include "api/hooks.h"
#include "api/runtime.h"
#include "core/log.h"
#include "util/units.h"

using namespace cudalloc;

namespace {

cudalloc_error_t to_code(Error e) {
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
cudalloc_error_t guarded(Body&& body) noexcept {
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

StreamHandle handle(cudaStream_t stream) { return reinterpret_cast<StreamHandle>(stream); }

// The device argument of every C API function (documented in cudalloc.h): -1 is the current
// device, or every initialised device where the function says "all"; 0..count-1 is a device;
// anything else is CUDALLOC_ERROR_INVALID_DEVICE, as cudaSetDevice answers a bad ordinal. It
// is checked before any other argument. Without any device (no driver) the core answers
// instead, with CUDALLOC_ERROR_NO_DEVICE.
enum class MinusOne { current, all };

cudalloc_error_t check_device(int device) noexcept {
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

// Runs f(DeviceAllocator&) on `device` (checked as above), or on every initialised device
// when it is -1 and -1 means all.
template <typename F>
cudalloc_error_t on_device(int device, MinusOne minus_one, F&& f) {
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
cudalloc_error_t on_owner(const void* ptr, const char* what, F&& f) {
  return guarded([&]() -> Error {
    DeviceAllocator* d = ptr != nullptr ? process_allocator().owner_of(ptr) : nullptr;
    if (d == nullptr) return fail(Error::invalid_pointer, "%s of %p: not a live allocation", what, ptr);
    return f(*d);
  });
}

}  // namespace

extern "C" {

int cudalloc_version(void) {
  return CUDALLOC_VERSION_MAJOR * 10000 + CUDALLOC_VERSION_MINOR * 100 + CUDALLOC_VERSION_PATCH;
}

const char* cudalloc_version_string(void) { return "0.1.0"; }

const char* cudalloc_last_error_string(void) { return last_error_message(); }

const char* cudalloc_error_name(cudalloc_error_t error) {
  switch (error) {
    case CUDALLOC_SUCCESS: return "cudaSuccess";
    case CUDALLOC_ERROR_INVALID_VALUE: return "cudaErrorInvalidValue";
    case CUDALLOC_ERROR_MEMORY_ALLOCATION: return "cudaErrorMemoryAllocation";
    case CUDALLOC_ERROR_INITIALIZATION: return "cudaErrorInitializationError";
    case CUDALLOC_ERROR_INVALID_DEVICE_POINTER: return "cudaErrorInvalidDevicePointer";
    case CUDALLOC_ERROR_NO_DEVICE: return "cudaErrorNoDevice";
    case CUDALLOC_ERROR_INVALID_DEVICE: return "cudaErrorInvalidDevice";
    case CUDALLOC_ERROR_NOT_SUPPORTED: return "cudaErrorNotSupported";
    case CUDALLOC_ERROR_UNKNOWN: return "cudaErrorUnknown";
  }
  return "unknown";
}

cudalloc_error_t cudalloc_allocate(void** ptr, size_t size, int device, cudaStream_t stream) {
  if (ptr != nullptr) *ptr = nullptr;
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (ptr == nullptr) return fail(Error::invalid_value, "allocate: ptr is NULL");
    const Error err = d.allocate(size, handle(stream), ptr);
    if (err == Error::out_of_memory && !d.settings().snapshot_on_oom.empty()) {
      if (OutOfMemoryHook hook = out_of_memory_hook()) hook(d.ordinal());
    }
    return err;
  });
}

cudalloc_error_t cudalloc_deallocate(void* ptr, int device) {
  if (const cudalloc_error_t e = check_device(device); e != CUDALLOC_SUCCESS) return e;
  if (ptr == nullptr) return CUDALLOC_SUCCESS;  // as cudaFree(NULL)
  return guarded([&]() -> Error {
    Allocator& a = process_allocator();
    if (device == -1) return a.free_anywhere(ptr, DeviceAllocator::FreeOrder::stream);
    Error err = Error::ok;
    DeviceAllocator* d = a.device(device, &err);
    return d == nullptr ? err : d->deallocate(ptr);
  });
}

cudalloc_error_t cudalloc_record_stream(void* ptr, cudaStream_t stream) {
  // PyTorch records a zero-element tensor, whose data pointer is NULL: nothing to order.
  if (ptr == nullptr) return CUDALLOC_SUCCESS;
  return on_owner(ptr, "record_stream",
                  [&](DeviceAllocator& d) { return d.record_stream(ptr, handle(stream)); });
}

cudalloc_error_t cudalloc_offload(void* ptr, cudaStream_t stream) {
  return on_owner(ptr, "offload", [&](DeviceAllocator& d) { return d.offload(ptr, handle(stream)); });
}

cudalloc_error_t cudalloc_prefetch(void* ptr, cudaStream_t stream) {
  return on_owner(ptr, "prefetch",
                  [&](DeviceAllocator& d) { return d.prefetch(ptr, handle(stream)); });
}

cudalloc_error_t cudalloc_promote(int device) {
  return on_device(device, MinusOne::all, [](DeviceAllocator& d) { return d.promote(); });
}

cudalloc_error_t cudalloc_residency(const void* ptr, size_t* device_bytes, size_t* host_bytes) {
  if (device_bytes == nullptr || host_bytes == nullptr) {
    return to_code(fail(Error::invalid_value, "residency: an output pointer is NULL"));
  }
  return on_owner(ptr, "residency", [&](DeviceAllocator& d) {
    return d.residency(ptr, device_bytes, host_bytes);
  });
}

cudalloc_error_t cudalloc_empty_cache(int device) {
  return on_device(device, MinusOne::all, [](DeviceAllocator& d) { return d.empty_cache(); });
}

cudalloc_error_t cudalloc_set_memory_fraction(double fraction, int device) {
  return on_device(device, MinusOne::current,
                   [&](DeviceAllocator& d) { return d.set_memory_fraction(fraction); });
}

cudalloc_error_t cudalloc_set_memory_limit(size_t bytes, int device) {
  return on_device(device, MinusOne::current,
                   [&](DeviceAllocator& d) { return d.set_memory_limit(bytes); });
}

void* cudalloc_malloc(size_t size, int device, cudaStream_t stream) {
  void* ptr = nullptr;
  const cudalloc_error_t err = cudalloc_allocate(&ptr, size, device, stream);
  if (err == CUDALLOC_SUCCESS) return ptr;
  // PyTorch does not check for NULL (it would hand out a tensor without memory); an
  // exception is what turns into a Python error. The message starts as PyTorch's own OOM
  // message does, which tools that retry with smaller batches look for.
  const std::string message =
      err == CUDALLOC_ERROR_MEMORY_ALLOCATION
          ? "CUDA out of memory. Tried to allocate " + format_bytes(size) + ". cudalloc: " +
                last_error_message()
          : std::string("cudalloc: ") + cudalloc_error_name(err) + ": " + last_error_message();
  throw std::runtime_error(message);
}

void cudalloc_free(void* ptr, size_t /*size*/, int device, cudaStream_t /*stream*/) {
  // The block remembers its allocation stream; PyTorch passes that same stream here.
  if (cudalloc_deallocate(ptr, device) != CUDALLOC_SUCCESS) {
    log().error("cudalloc_free({}): {}", ptr, last_error_message());
  }
}

void cudalloc_torch_init(int /*device_count*/) {
  guarded([] {
    process_allocator();
    return Error::ok;
  });
}

void cudalloc_torch_reset(void) { cudalloc_empty_cache(-1); }

void cudalloc_torch_memory_fraction(double fraction, int device) {
  if (cudalloc_set_memory_fraction(fraction, device) != CUDALLOC_SUCCESS) {
    log().error("set_memory_fraction: {}", last_error_message());
  }
}

void cudalloc_torch_record_stream(void* ptr, cudaStream_t stream) {
  if (cudalloc_record_stream(ptr, stream) != CUDALLOC_SUCCESS) {
    log().error("record_stream: {}", last_error_message());
  }
}

int cudalloc_stat_count(void) { return stat_field_count(); }

const char* cudalloc_stat_name(int index) { return stat_field_name(index); }

cudalloc_error_t cudalloc_get_stats(int device, cudalloc_stats_t* out) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (out == nullptr) return fail(Error::invalid_value, "get_stats: out is NULL");
    const Stats stats = d.stats();
    out->count = 0;
    out->device = d.ordinal();
    stats.for_each([&](std::string_view, std::string_view, const Stat& s) {
      out->values[out->count++] = cudalloc_stat_t{s.current, s.peak, s.total};
    });
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_reset_peak_stats(int device) {
  return on_device(device, MinusOne::current, [](DeviceAllocator& d) {
    d.reset_peak_stats();
    return Error::ok;
  });
}

int cudalloc_device_count(void) {
  try {
    return process_allocator().device_count();
  } catch (...) {
    return 0;
  }
}

cudalloc_error_t cudalloc_validate(int device) {
  return on_device(device, MinusOne::all, [](DeviceAllocator& d) {
    const std::string problem = d.validate();
    if (problem.empty()) return Error::ok;
    return fail(Error::internal, "device %d: %s", d.ordinal(), problem.c_str());
  });
}

}  // extern "C"

static_assert(stat_field_count() <= CUDALLOC_MAX_STATS, "cudalloc_stats_t is too small");
