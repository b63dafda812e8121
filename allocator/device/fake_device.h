// FakeDevice: a simulated CUDA device in host memory, so that every allocator policy runs and
// is tested without a GPU.
//
// - Memory: malloc() returns host memory (reserved lazily, so a simulated 80 GiB device costs
//   nothing until written). Pointers are real and writable, also under LD_PRELOAD.
// - Capacity: each simulated device has `capacity` bytes; malloc and create_physical fail with
//   out_of_memory past it.
// - Virtual memory: reserve() takes address space, create_physical() takes capacity from a
//   per-device memory file, map() places it at a virtual address (two mappings of one physical
//   range see the same bytes), set_access() makes it readable and writable, unmap() removes it.
//   As with the driver, map() takes an allocation whole (offset 0, its size) and unmap() whole
//   mappings (a range may cover several).
//   Granularity is 2 MiB by default. Physical memory of Location::host comes from a separate
//   host capacity (`host_capacity`); with `host_physical` off, creating it is not_supported,
//   as on a driver without host-located virtual memory. host_alloc() gives pinned host memory
//   from the same host capacity.
// - Copies: copy() is queued work on its stream; the bytes move when that work completes (at
//   once without manual streams). A copy from or to memory that is not mapped or allocated by
//   then is not performed and is counted by bad_copies().
// - Streams and events: every stream has a count of queued and of completed work items. With
//   `manual_streams` off (the default) work completes as soon as it is queued. With it on, work
//   queued by enqueue_work() stays pending until complete_work()/complete_all(); an event
//   completes when the work queued on its stream before the record has completed.
//   stream_wait_event() is logged (waits()) and completing a stream first completes what it
//   waits on. Streams declared blocking (set_blocking: a per-thread default stream, a stream
//   created without cudaStreamNonBlocking) are ordered with the legacy default stream
//   (handle 0) as in CUDA: an operation on the legacy stream (work, a copy, an event record)
//   runs after the work queued so far on every blocking stream, and work queued later on a
//   blocking stream runs after it. Blocking streams do not order each other. Without a
//   declared blocking stream, the legacy stream orders nothing.
// - fork(): the child gets its own copy of the simulated memory (the memory files would
//   otherwise be shared: the child's writes and frees would change the parent's buffers), as
//   a child never shares device memory with its parent in CUDA.
// - Faults: fail_call(kind, nth, status, count) makes `count` calls of that kind fail, from the
//   nth from now on.
// - Without `backing` (the replay), the device keeps every record above (address space,
//   physical memory and its capacity, mappings and access, streams, events, faults) but no
//   bytes: addresses come from a private range and are never readable, malloc, map, unmap
//   and set_access make no system call, and copies complete without moving bytes. What the
//   allocator costs is then measured without the simulation's own system calls.
#pragma once

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/device.h"

namespace cudalloc::device {

class FakeDevice final : public Device {
 public:
  struct Options {
    std::size_t capacity = std::size_t{80} << 30;  // per simulated device
    int devices = 1;
    std::size_t granularity = std::size_t{2} << 20;
    bool manual_streams = false;
    std::size_t host_capacity = std::size_t{256} << 30;
    bool host_physical = true;
    bool backing = true;  // false: records only, no bytes (see above)
  };
  explicit FakeDevice(Options options);
  FakeDevice() : FakeDevice(Options{}) {}
  ~FakeDevice() override;
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  const char* name() const override { return "fake"; }
  int device_count() override { return options_.devices; }
  Status current_device(int* dev) override;
  Status mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) override;
  Status malloc(int dev, std::size_t bytes, void** ptr) override;
  Status free(int dev, void* ptr) override;
  std::size_t granularity(int dev) override;
  Status reserve(int dev, std::size_t bytes, std::uintptr_t* va) override;
  Status unreserve(std::uintptr_t va, std::size_t bytes) override;
  Status create_physical(int dev, std::size_t bytes, Location where,
                         PhysicalHandle* handle) override;
  Status release_physical(PhysicalHandle handle) override;
  Status map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
             std::size_t offset) override;
  Status unmap(std::uintptr_t va, std::size_t bytes) override;
  Status set_access(int dev, std::uintptr_t va, std::size_t bytes) override;
  Status copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
              StreamHandle stream) override;
  Status zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) override;
  Status host_alloc(int dev, std::size_t bytes, void** ptr) override;
  Status host_free(void* ptr) override;
  Status event_create(int dev, EventHandle* event) override;
  Status event_destroy(EventHandle event) override;
  Status event_record(int dev, EventHandle event, StreamHandle stream) override;
  Status event_query(EventHandle event) override;
  Status event_synchronize(EventHandle event) override;
  Status stream_wait_event(int dev, StreamHandle stream, EventHandle event) override;
  Status synchronize(int dev) override;
  Status stream_capturing(int dev, StreamHandle stream, bool* capturing) override;
  Status capture_id(int dev, StreamHandle stream, std::uint64_t* id) override;
  // Sharing within this process only (the simulated memory is private to it): the exported
  // descriptor is a memfd naming this device and the handle; importing it gives the same
  // handle once more, released separately (the memory goes when every holder released it
  // and nothing maps it).
  Status export_physical(PhysicalHandle handle, int* fd) override;
  Status import_physical(int fd, PhysicalHandle* handle) override;
  // A fake handle: the bytes of "fake-ipc:" and the pointer (tests check what is exported).
  Status ipc_handle(int dev, void* ptr, unsigned char* handle) override;

  // ---- Simulation controls (tests and replay) ----
  void set_current_device(int dev);  // for the calling thread
  void set_manual_streams(bool manual);
  // Queues one work item (a "kernel") on `stream` of `dev`.
  void enqueue_work(int dev, StreamHandle stream);
  // Completes the work queued so far on `stream` (and what it waits on).
  void complete_work(int dev, StreamHandle stream);
  void complete_all();
  bool stream_idle(int dev, StreamHandle stream);
  // Declares `stream` of `dev` blocking: ordered with the legacy default stream (see above).
  void set_blocking(int dev, StreamHandle stream);

  // The nth (1 = next) call of `kind` from now fails with `status`.
  void fail_call(CallKind kind, int nth, Status status = Status::out_of_memory, int count = 1);
  void clear_faults();
  // Stream capture: while `stream` of `dev` captures, a device synchronization, a wait for
  // one of its events, or a wait of it on an event fails (device_error) and counts as a
  // capture violation, as it would end a real capture with an error.
  void set_capturing(int dev, StreamHandle stream, bool capturing);
  std::uint64_t capture_violations() const;
  std::uint64_t calls(CallKind kind) const;
  std::size_t used_bytes(int dev) const;  // device memory taken (malloc + physical)
  std::size_t host_used_bytes() const;    // host memory taken (host physical + host_alloc)
  std::uint64_t bad_copies() const;
  // Where the physical memory mapped at `va` lives; false when nothing is mapped there.
  bool location_of(std::uintptr_t va, Location* where) const;
  std::size_t live_events() const;

  struct Wait {
    int dev;
    StreamHandle waiter;  // the stream made to wait
    StreamHandle on;      // the stream of the event
    std::uint64_t until;  // work items of `on` that must complete first
    int on_dev;           // the device of `on`
  };
  std::vector<Wait> waits() const;

 private:
  struct StreamKey {
    int dev;
    StreamHandle stream;
    bool operator<(const StreamKey& o) const {
      return dev != o.dev ? dev < o.dev : stream < o.stream;
    }
  };
  struct StreamState {
    std::uint64_t queued = 0;
    std::uint64_t completed = 0;
    struct Dependency {
      std::uint64_t after;  // applies to work queued after this many items
      StreamKey on;
      std::uint64_t until;  // work items of `on` that must complete first
    };
    std::vector<Dependency> waits_on;
  };
  bool capture_violated(const StreamKey* stream);  // mutex_ held
  std::uint64_t capture_of(const StreamKey& stream) const;  // mutex_ held; 0: none
  struct Capture {
    StreamKey stream;
    std::uint64_t id;  // each set_capturing(true) starts a new capture
  };
  std::vector<Capture> capturing_;
  std::uint64_t last_capture_id_ = 0;
  std::uint64_t capture_violations_ = 0;
  struct EventState {
    int dev = 0;
    bool recorded = false;
    StreamKey stream{};
    std::uint64_t seq = 0;
  };
  struct Physical {
    int dev = 0;
    bool host = false;
    std::size_t offset = 0;  // in the device's memory file
    std::size_t bytes = 0;
    int mappings = 0;
    bool released = false;
    int holders = 1;  // create_physical and each import_physical; release_physical drops one
  };
  struct Mapping {
    std::size_t bytes;
    PhysicalHandle handle;
    std::size_t offset;       // into the physical allocation
    bool accessible = false;  // set_access made it readable and writable
  };
  struct DeviceMemory {
    std::size_t used = 0;
    int file = -1;                               // memory file backing physical allocations
    std::map<std::size_t, std::size_t> holes;    // free ranges of the file: offset -> bytes
  };

  Status check_fault(CallKind kind);  // counts the call; requires mutex_ held
  bool valid_device(int dev) const { return dev >= 0 && dev < options_.devices; }
  StreamState& stream_state(int dev, StreamHandle stream);
  void complete_stream(const StreamKey& key, std::uint64_t upto);
  // Queues one operation on `key` with the legacy stream's implicit ordering; returns its
  // number (completed at once without manual streams).
  std::uint64_t queue_operation(const StreamKey& key);
  bool orders_with_legacy(const StreamKey& key) const;  // the legacy stream or a blocking one
  bool event_done(const EventState& e);
  struct PendingCopy {
    StreamKey stream;
    std::uint64_t seq;  // the work item of `stream` that performs it
    std::uintptr_t dst, src;
    std::size_t bytes;
  };

  // The memory file of a device, or of the host (dev == kHost).
  static constexpr int kHost = -1;
  DeviceMemory& memory_of(int dev) { return dev == kHost ? host_memory_ : memory_[dev]; }
  std::size_t capacity_of(int dev) const {
    return dev == kHost ? options_.host_capacity : options_.capacity;
  }
  Status take_file_range(int dev, std::size_t bytes, std::size_t* offset);
  void return_file_range(int dev, std::size_t offset, std::size_t bytes);
  bool range_backed(std::uintptr_t va, std::size_t bytes) const;
  void run_completed_copies();
  void free_physical_if_unused(PhysicalHandle handle);
  bool range_reserved(std::uintptr_t va, std::size_t bytes) const;
  bool range_unmapped(std::uintptr_t va, std::size_t bytes) const;
  // Without backing: `bytes` of address space aligned to `align`, never readable.
  std::uintptr_t take_address_space(std::size_t bytes, std::size_t align);
  void* allocate_bytes(std::size_t bytes);  // malloc and host_alloc; nullptr when exhausted
  void free_bytes(void* ptr, std::size_t bytes);

  // fork(): every live FakeDevice is locked around it; the child copies its memory files.
  static void register_fork_handlers();
  static void lock_all_for_fork();
  static void unlock_all_in_parent();
  static void copy_all_in_child();
  bool copy_memory_file(int dev);  // this process's own copy of one file; requires mutex_

  Options options_;
  mutable std::mutex mutex_;
  std::vector<DeviceMemory> memory_;
  DeviceMemory host_memory_;
  std::unordered_map<void*, std::size_t> host_allocations_;  // ptr -> bytes
  std::vector<PendingCopy> copies_;
  std::uint64_t bad_copies_ = 0;
  std::unordered_map<void*, std::pair<int, std::size_t>> allocations_;  // ptr -> dev, bytes
  std::map<std::uintptr_t, std::pair<int, std::size_t>> reservations_;  // va -> dev, bytes
  std::unordered_map<PhysicalHandle, Physical> physicals_;
  std::map<std::uintptr_t, Mapping> mappings_;                          // va -> mapping
  PhysicalHandle next_physical_ = 1;
  std::uintptr_t next_address_ = kUnbackedBase;  // without backing
  // Above every user-space address of the host (x86-64 and AArch64 use at most 48 bits and
  // more is not canonical), so an unbacked address never collides with real memory.
  static constexpr std::uintptr_t kUnbackedBase = std::uintptr_t{1} << 52;
  std::map<StreamKey, StreamState> streams_;
  std::vector<StreamKey> blocking_;  // set_blocking
  std::unordered_map<EventHandle, EventState> events_;
  EventHandle next_event_ = 1;
  std::vector<Wait> waits_;
  std::uint64_t calls_[kCallKinds] = {};
  std::uint64_t fault_at_[kCallKinds] = {};  // absolute call number that fails, 0 = none
  Status fault_status_[kCallKinds] = {};
  int fault_count_[kCallKinds] = {};  // consecutive calls that fail from fault_at_ on
};

// Parses "fake[:CAPACITY[:DEVICES]]" (the part after "fake" of CUDALLOC_DEVICE).
bool parse_fake_spec(const char* spec, FakeDevice::Options* options);

}  // namespace cudalloc::device
