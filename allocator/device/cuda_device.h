// CudaDevice: the device layer on the CUDA driver API.
//
// libcuda is never linked: the first call dlopen()s "libcuda.so.1", resolves cuGetProcAddress
// with dlsym and every other entry point through it (requesting CUDA 12.0 semantics, so the
// result does not depend on the toolkit the library was built with). Without a loadable driver
// or when cuInit fails, device_count() is 0 and every other method returns Status::no_device.
//
// Context rule: a method taking `dev` runs with the primary context of `dev` current on the
// calling thread and restores the thread's previous context before returning. Primary contexts
// are retained once, at initialisation, and never released (the device outlives static
// destructors). Methods without `dev` act on driver objects that carry their own context.
#pragma once

#include <memory>

#include "device/device.h"

namespace cudalloc::device {

class CudaDevice final : public Device {
 public:
  const char* name() const override { return "cuda"; }
  int device_count() override;
  Status current_device(int* dev) override;
  Status mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) override;

  Status malloc(int dev, std::size_t bytes, void** ptr) override;
  Status stream_capturing(int dev, StreamHandle stream, bool* capturing) override;
  Status ipc_handle(int dev, void* ptr, unsigned char* handle) override;
  Status capture_id(int dev, StreamHandle stream, std::uint64_t* id) override;
  Status free(int dev, void* ptr) override;

  std::size_t granularity(int dev) override;
  Status reserve(int dev, std::size_t bytes, std::uintptr_t* va) override;
  Status unreserve(std::uintptr_t va, std::size_t bytes) override;
  Status create_physical(int dev, std::size_t bytes, Location where,
                         PhysicalHandle* handle) override;
  Status release_physical(PhysicalHandle handle) override;
  Status export_physical(PhysicalHandle handle, int* fd) override;
  Status import_physical(int fd, PhysicalHandle* handle) override;
  Status map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
             std::size_t offset) override;
  Status unmap(std::uintptr_t va, std::size_t bytes) override;
  Status set_access(int dev, std::uintptr_t va, std::size_t bytes) override;

  Status zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) override;
  Status copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
              StreamHandle stream) override;
  Status host_alloc(int dev, std::size_t bytes, void** ptr) override;
  Status host_free(void* ptr) override;
  Status event_create(int dev, EventHandle* event) override;
  Status event_destroy(EventHandle event) override;
  Status event_record(int dev, EventHandle event, StreamHandle stream) override;
  Status event_query(EventHandle event) override;
  Status event_synchronize(EventHandle event) override;
  Status stream_wait_event(int dev, StreamHandle stream, EventHandle event) override;
  Status synchronize(int dev) override;
  const char* last_failure() const override;
};

// A new CudaDevice. Instances are stateless views of one process-wide driver table, so any
// number may exist; nothing is loaded until the first method call.
std::unique_ptr<Device> make_cuda_device();

// The driver's own entry point `symbol` (a base name such as "cuMemFree", at CUDA 12.0
// semantics), looked up through the real cuGetProcAddress: never an interposed wrapper.
// nullptr when there is no driver or no such entry point.
void* real_driver_function(const char* symbol);

// The name of the calling thread's last failed driver call ("CUDA_ERROR_OUT_OF_MEMORY", ...),
// or why the driver could not be loaded; "" when nothing has failed. event_query's
// CUDA_ERROR_NOT_READY is not a failure and is not recorded. Never null; valid for the life of
// the process.
const char* cuda_last_error_name();

}  // namespace cudalloc::device
