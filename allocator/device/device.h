// The device layer: the only code in cudalloc that talks to CUDA.
//
// Everything above this interface (pools, stream ordering, OOM handling, stats) is policy and
// is tested on the host through FakeDevice. Implementations:
//   CudaDevice - the driver API, opened at run time with dlopen("libcuda.so.1")
//   FakeDevice - host memory with simulated streams, events, virtual memory and faults
//
// Contracts common to every method:
//   - Methods never throw and return a Status; outputs are written only on Status::ok.
//   - Methods are thread-safe.
//   - `dev` is a device ordinal in [0, device_count()).
//   - Streams are opaque handles owned by the caller (cudaStream_t / CUstream values, 0 is the
//     legacy default stream). The device layer never creates or destroys streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cudalloc::device {

using StreamHandle = std::uintptr_t;
using EventHandle = std::uintptr_t;
using PhysicalHandle = std::uint64_t;

// Where physical memory lives: on the device, or in host memory that the device reaches over
// the bus (slower, but addressable by kernels like device memory once mapped).
enum class Location { device, host };

enum class Status {
  ok,
  out_of_memory,   // the device (or its simulated capacity) has no room
  invalid_value,   // bad argument: unknown pointer, handle, range or device
  not_ready,       // event_query only: the event has not completed yet
  not_supported,   // the capability is absent (no VMM, no driver)
  no_device,       // no driver or no device at all
  device_error,    // anything else the driver reported
};

const char* status_name(Status s);

// Which kinds of device call fault injection can target (FakeDevice) and stats can count.
enum class CallKind : int {
  malloc,
  free,
  reserve,
  unreserve,
  create_physical,
  release_physical,
  map,
  unmap,
  set_access,
  event_create,
  event_destroy,
  event_record,
  event_query,
  event_synchronize,
  stream_wait_event,
  synchronize,
  copy,
  host_alloc,
  host_free,
  export_physical,
  import_physical,
  zero,
  count_,
};
constexpr int kCallKinds = static_cast<int>(CallKind::count_);
const char* call_kind_name(CallKind k);

// Device calls and the time spent in them, by kind, as a TimedDevice counts them. Slot
// kCallKinds holds the calls that have no CallKind: queries (mem_info, granularity, the
// current device, capture state) and ipc_handle.
struct CallTimes {
  static constexpr int kSlots = kCallKinds + 1;
  std::uint64_t calls[kSlots] = {};
  std::uint64_t ns[kSlots] = {};
};
// The name of slot `slot` of CallTimes: call_kind_name, or "query" for the last.
const char* call_slot_name(int slot);

class Device {
 public:
  virtual ~Device() = default;

  // "cuda" or "fake"; stable, used in logs and snapshots.
  virtual const char* name() const = 0;
  virtual int device_count() = 0;
  // The calling thread's current device (the runtime's notion: the device of the current
  // context), or 0 when no context is current.
  virtual Status current_device(int* dev) = 0;
  virtual Status mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) = 0;

  // Plain device memory, as cuMemAlloc / cuMemFree. Pointers are at least 256-byte aligned.
  // free() of memory that queued work may still use is the caller's responsibility: callers
  // synchronize before freeing (see BlockPool::release_free_segments).
  virtual Status malloc(int dev, std::size_t bytes, void** ptr) = 0;
  virtual Status free(int dev, void* ptr) = 0;

  // Virtual memory. granularity() is the page size for create_physical/map (0 = no VMM).
  virtual std::size_t granularity(int dev) = 0;
  virtual Status reserve(int dev, std::size_t bytes, std::uintptr_t* va) = 0;
  virtual Status unreserve(std::uintptr_t va, std::size_t bytes) = 0;
  // Physical memory for mapping into `dev`'s address space. Location::host is memory on the
  // host node closest to `dev`; not_supported (or invalid_value) where the driver cannot
  // create it.
  virtual Status create_physical(int dev, std::size_t bytes, Location where,
                                 PhysicalHandle* handle) = 0;
  virtual Status release_physical(PhysicalHandle handle) = 0;
  // Sharing physical memory with another process. export_physical gives a new POSIX file
  // descriptor for `handle` (the caller closes it; while it is open the memory stays
  // shareable); not_supported for memory that cannot be shared (host-located, or a driver or
  // container without file-descriptor handles). import_physical makes a handle of this
  // process for the memory behind `fd` (an exported descriptor the caller took over, e.g.
  // with pidfd_getfd; not consumed): map and release it like one of create_physical.
  virtual Status export_physical(PhysicalHandle handle, int* fd) {
    (void)handle;
    (void)fd;
    return Status::not_supported;
  }
  virtual Status import_physical(int fd, PhysicalHandle* handle) {
    (void)fd;
    (void)handle;
    return Status::not_supported;
  }
  // Maps `bytes` of `handle` starting at `offset` at `va`; all three are page multiples. The
  // driver maps an allocation only whole: offset 0 and bytes its size (the H200's driver 580
  // refused a part, 2026-12-02), so a physical allocation moves between addresses only whole.
  virtual Status map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
                     std::size_t offset) = 0;
  virtual Status unmap(std::uintptr_t va, std::size_t bytes) = 0;
  // Grants read/write access from `dev` to a mapped range, and from the devices that can reach
  // `dev`'s memory peer-to-peer where the driver allows (copies and kernels of another GPU may
  // use the memory, as they may use cudaMalloc'd memory).
  virtual Status set_access(int dev, std::uintptr_t va, std::size_t bytes) = 0;

  // Queues a copy of `bytes` from `src` to `dst` (both addressable by `dev`: device memory or
  // mapped ranges of either location) on `stream`; it runs after the work queued there before.
  virtual Status copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
                      StreamHandle stream) = 0;
  // Queues writing `bytes` zero bytes at `dst` (as copy's dst) on `stream`.
  virtual Status zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) = 0;
  // Pinned host memory mapped for `dev` (unified addressing: the same pointer on both sides);
  // the host tier where host-located physical memory cannot be created. host_free waits for
  // the work that may still use the memory, as cuMemFreeHost does.
  virtual Status host_alloc(int dev, std::size_t bytes, void** ptr) = 0;
  virtual Status host_free(void* ptr) = 0;

  // Events mark a point in a stream's queue. event_query returns ok once every piece of work
  // queued on the stream before the record has finished, not_ready before that.
  virtual Status event_create(int dev, EventHandle* event) = 0;
  virtual Status event_destroy(EventHandle event) = 0;
  virtual Status event_record(int dev, EventHandle event, StreamHandle stream) = 0;
  virtual Status event_query(EventHandle event) = 0;
  virtual Status event_synchronize(EventHandle event) = 0;
  // Work queued on `stream` after this call starts only after `event` has completed.
  virtual Status stream_wait_event(int dev, StreamHandle stream, EventHandle event) = 0;
  // Waits for all work queued on the device.
  virtual Status synchronize(int dev) = 0;

  // The legacy IPC handle (cuIpcGetMemHandle) of memory from malloc(), whose base `ptr` is;
  // another process opens it with cudaIpcOpenMemHandle. Only memory of malloc() has one.
  static constexpr std::size_t kIpcHandleBytes = 64;
  virtual Status ipc_handle(int dev, void* ptr, unsigned char* handle) {
    (void)dev;
    (void)ptr;
    (void)handle;
    return Status::not_supported;
  }

  // Whether work queued on `stream` is being captured into a CUDA graph now. While it is,
  // nothing may synchronize the device, the stream or an event recorded on it, or make the
  // stream wait for an event recorded outside the capture: that would end the capture with an
  // error. Devices without graphs answer false.
  virtual Status stream_capturing(int dev, StreamHandle stream, bool* capturing) {
    (void)dev;
    (void)stream;
    *capturing = false;
    return Status::ok;
  }

  // The id of the capture `stream` is part of (the driver's, unique in the process), or 0 when
  // it is not being captured.
  virtual Status capture_id(int dev, StreamHandle stream, std::uint64_t* id) {
    (void)dev;
    (void)stream;
    *id = 0;
    return Status::ok;
  }

  // The calls made so far and their time, by kind, where this device counts them (a
  // TimedDevice); false otherwise.
  virtual bool call_times(CallTimes* out) const {
    (void)out;
    return false;
  }

  // The calling thread's last failure in the device's own words ("CUDA_ERROR_OUT_OF_MEMORY"),
  // for messages; "" when there is nothing more to say than the Status.
  virtual const char* last_failure() const { return ""; }
};

// The process-wide device chosen by CUDALLOC_DEVICE: "cuda" (default) or "fake[:CAPACITY]"
// (CAPACITY with K/M/G/T suffixes, default 80G, per simulated device; "fake:CAPACITY:N" gives
// N simulated devices). Created on first use; never destroyed, so that allocations outliving
// static destructors can still be returned.
Device& process_device();

}  // namespace cudalloc::device
