// The C API (cudalloc.h) over the process-wide allocator. Every entry point catches
// everything: nothing is thrown into C callers.
#include <new>
#include <stdexcept>
#include <string>

#include "api/capi_support.h"
#include "api/cudalloc.h"
#include "api/hooks.h"
#include "api/runtime.h"
#include "core/log.h"
#include "util/units.h"

using namespace cudalloc;
using namespace cudalloc::capi;


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
    return after_out_of_memory(d, size, stream, d.allocate(size, handle(stream), ptr));
  });
}

cudalloc_error_t cudalloc_deallocate(void* ptr, int device) {
  if (DeviceAllocator* d = device_in_use(device); d != nullptr && ptr != nullptr) {
    return guarded([&] { return d->deallocate(ptr); });
  }
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
  // PyTorch's pluggable interface makes no pool calls for CUDA graphs: allocations on a
  // capturing stream go to that capture's own pool (DeviceAllocator::allocate_owned_by_capture).
  const cudalloc_error_t err = on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    return after_out_of_memory(d, size, stream,
                               d.allocate_owned_by_capture(size, handle(stream), &ptr));
  });
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

const char* cudalloc_stat_torch_name(int index, int* is_gauge) {
  return stat_field_torch_name(index, is_gauge);
}

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
