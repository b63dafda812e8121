// The C API of regions (cudalloc.h, "Regions"; core/regions.h): tags per thread, pause and
// resume on every device that holds memory of the region.
#include <cstring>

#include "api/capi_support.h"
#include "api/cudalloc.h"
#include "api/runtime.h"
#include "core/region_tags.h"

using namespace cudalloc;
using namespace cudalloc::capi;

namespace {

// The id of a region some device holds memory of; invalid_value for a bad or unused tag.
Error known_region(const char* what, const char* tag, RegionId* id) {
  if (tag == nullptr) return fail(Error::invalid_value, "%s: tag is NULL", what);
  *id = RegionTags::find(tag);
  bool known = false;
  if (*id != kNoRegion) {
    process_allocator().for_each_device(
        [&](DeviceAllocator& d) { known = known || d.knows_region(*id); });
  }
  if (!known) {
    return fail(Error::invalid_value, "%s: no memory was ever allocated in region \"%s\"",
                what, tag);
  }
  return Error::ok;
}

}  // namespace

extern "C" {

cudalloc_error_t cudalloc_region_begin(const char* tag) {
  return guarded([&]() -> Error {
    if (tag == nullptr) return fail(Error::invalid_value, "region_begin: tag is NULL");
    RegionId id = kNoRegion;
    if (const Error err = RegionTags::intern(tag, &id); err != Error::ok) return err;
    return RegionTags::begin(id);
  });
}

cudalloc_error_t cudalloc_region_end(void) {
  return guarded([]() -> Error { return RegionTags::end(); });
}

cudalloc_error_t cudalloc_pause(const char* tag, int keep_contents) {
  return guarded([&]() -> Error {
    RegionId id = kNoRegion;
    if (const Error err = known_region("pause", tag, &id); err != Error::ok) return err;
    const bool streams_known = !interposing();
    Error result = Error::ok;
    bool any_active = false;
    process_allocator().for_each_device([&](DeviceAllocator& d) {
      // Devices paused by an earlier call that failed on a later device are left as they
      // are, so that the call can be repeated; devices after a failure are not touched.
      if (result != Error::ok || !d.knows_region(id) || d.region_paused(id)) return;
      any_active = true;
      result = d.pause_region(id, keep_contents != 0, streams_known);
    });
    if (result == Error::ok && !any_active) {
      return fail(Error::invalid_value, "pause of region \"%s\": it is paused already", tag);
    }
    return result;
  });
}

cudalloc_error_t cudalloc_prepare_pause(const char* tag) {
  return guarded([&]() -> Error {
    RegionId id = kNoRegion;
    if (const Error err = known_region("prepare_pause", tag, &id); err != Error::ok) return err;
    Error result = Error::ok;
    process_allocator().for_each_device([&](DeviceAllocator& d) {
      if (result == Error::ok && d.knows_region(id)) result = d.prepare_pause(id);
    });
    return result;
  });
}

cudalloc_error_t cudalloc_resume(const char* tag) {
  return guarded([&]() -> Error {
    RegionId id = kNoRegion;
    if (const Error err = known_region("resume", tag, &id); err != Error::ok) return err;
    Error result = Error::ok;
    process_allocator().for_each_device([&](DeviceAllocator& d) {
      if (const Error e = d.resume_region(id); e != Error::ok) result = e;
    });
    return result;
  });
}

cudalloc_error_t cudalloc_region_residency(const char* tag, size_t* device_bytes,
                                           size_t* host_bytes) {
  return guarded([&]() -> Error {
    if (device_bytes == nullptr || host_bytes == nullptr) {
      return fail(Error::invalid_value, "region_residency: an output pointer is NULL");
    }
    *device_bytes = *host_bytes = 0;
    RegionId id = kNoRegion;
    if (const Error err = known_region("region_residency", tag, &id); err != Error::ok) {
      return err;
    }
    process_allocator().for_each_device([&](DeviceAllocator& d) {
      std::size_t dev = 0, host = 0;
      d.region_residency(id, &dev, &host);
      *device_bytes += dev;
      *host_bytes += host;
    });
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_region_paused(const char* tag, int* paused) {
  return guarded([&]() -> Error {
    if (paused == nullptr) return fail(Error::invalid_value, "region_paused: paused is NULL");
    *paused = 0;
    RegionId id = kNoRegion;
    if (const Error err = known_region("region_paused", tag, &id); err != Error::ok) return err;
    process_allocator().for_each_device(
        [&](DeviceAllocator& d) { *paused = *paused || d.region_paused(id) ? 1 : 0; });
    return Error::ok;
  });
}

}  // extern "C"
