// TimedDevice: a Device that forwards every call to another and counts the time spent in it
// (an adaptor over the one interface, as RMM's resource adaptors are).
//
// The replay runs the allocator on an unbacked FakeDevice, whose bookkeeping (maps of
// mappings, handles and streams behind one mutex) costs about as much per page map as the
// allocator's own work. A replay that reports the allocator's cost subtracts what this adaptor
// measured: call_ns(), the time between a clock read on entry and one on return, summed over
// calls, plus calls() x timer_outside_ns(), the wrapper's own cost that falls outside that
// interval (calibrated once at construction on wrapped calls of nothing), so that timing the
// calls does not add to the allocator's figure either.
//
// It also keeps the calls and their time by kind (call_times), which the runtime reads when
// CUDALLOC_CONF has time_device_calls: the debug log of pause and resume then says where their
// time went.
//
// Thread-safe (relaxed atomic counters); the inner device keeps its own contracts.
#pragma once

#include <atomic>
#include <cstdint>

#include "device/device.h"

namespace cudalloc::device {

class TimedDevice final : public Device {
 public:
  explicit TimedDevice(Device& inner);

  // Nanoseconds spent inside the inner device's calls, and how many calls were made: the sums
  // over call_times()' slots.
  std::uint64_t call_ns() const;
  std::uint64_t calls() const;
  // The timer's own cost per call that call_ns() does not hold (see above).
  double timer_outside_ns() const { return timer_outside_ns_; }
  // What the calls cost the caller in all: call_ns() + calls() x timer_outside_ns().
  double charged_ns() const { return double(call_ns()) + double(calls()) * timer_outside_ns_; }

  const char* name() const override { return inner_.name(); }
  int device_count() override;
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
  Status export_physical(PhysicalHandle handle, int* fd) override;
  Status import_physical(int fd, PhysicalHandle* handle) override;
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
  Status ipc_handle(int dev, void* ptr, unsigned char* handle) override;
  Status stream_capturing(int dev, StreamHandle stream, bool* capturing) override;
  Status capture_id(int dev, StreamHandle stream, std::uint64_t* id) override;
  bool call_times(CallTimes* out) const override;
  const char* last_failure() const override { return inner_.last_failure(); }

 private:
  static constexpr int kQuery = kCallKinds;  // CallTimes' slot of the calls without a kind

  // Runs f(), adding its duration and one call to slot `slot`'s counters.
  template <typename F>
  auto timed(int slot, F&& f);

  Device& inner_;
  std::atomic<std::uint64_t> slot_ns_[CallTimes::kSlots] = {};
  std::atomic<std::uint64_t> slot_calls_[CallTimes::kSlots] = {};
  double timer_outside_ns_ = 0;
};

}  // namespace cudalloc::device
