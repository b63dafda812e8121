#include "device/timed_device.h"

#include <algorithm>
#include <chrono>

namespace cudalloc::device {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  using std::chrono::nanoseconds;
  return static_cast<std::uint64_t>(std::chrono::duration_cast<nanoseconds>(b - a).count());
}

constexpr int of(CallKind kind) { return static_cast<int>(kind); }

}  // namespace

template <typename F>
auto TimedDevice::timed(int slot, F&& f) {
  const Clock::time_point start = Clock::now();
  auto result = f();
  slot_ns_[slot].fetch_add(ns_between(start, Clock::now()), std::memory_order_relaxed);
  slot_calls_[slot].fetch_add(1, std::memory_order_relaxed);
  return result;
}

std::uint64_t TimedDevice::call_ns() const {
  std::uint64_t sum = 0;
  for (const auto& ns : slot_ns_) sum += ns.load(std::memory_order_relaxed);
  return sum;
}

std::uint64_t TimedDevice::calls() const {
  std::uint64_t sum = 0;
  for (const auto& n : slot_calls_) sum += n.load(std::memory_order_relaxed);
  return sum;
}

bool TimedDevice::call_times(CallTimes* out) const {
  for (int i = 0; i < CallTimes::kSlots; ++i) {
    out->calls[i] = slot_calls_[i].load(std::memory_order_relaxed);
    out->ns[i] = slot_ns_[i].load(std::memory_order_relaxed);
  }
  return true;
}

TimedDevice::TimedDevice(Device& inner) : inner_(inner) {
  // The wrapper's own cost that call_ns does not hold (the clock read on entry up to its
  // sample, the one on return after it, the counters' atomic adds): a wrapped call of
  // nothing, timed whole; the smallest of several rounds, so that a preemption meanwhile
  // does not inflate it.
  constexpr int kRounds = 5, kCalls = 2000;
  for (int round = 0; round < kRounds; ++round) {
    slot_ns_[kQuery].store(0);
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kCalls; ++i) timed(kQuery, [] { return 0; });
    const double whole = double(ns_between(start, Clock::now()));
    const double outside = std::max(0.0, (whole - double(slot_ns_[kQuery].load())) / kCalls);
    timer_outside_ns_ = round == 0 ? outside : std::min(timer_outside_ns_, outside);
  }
  slot_ns_[kQuery].store(0);
  slot_calls_[kQuery].store(0);  // the calibration's calls are not the caller's
}

int TimedDevice::device_count() {
  return timed(kQuery, [&] { return inner_.device_count(); });
}
Status TimedDevice::current_device(int* dev) {
  return timed(kQuery, [&] { return inner_.current_device(dev); });
}
Status TimedDevice::mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) {
  return timed(kQuery, [&] { return inner_.mem_info(dev, free_bytes, total_bytes); });
}
Status TimedDevice::malloc(int dev, std::size_t bytes, void** ptr) {
  return timed(of(CallKind::malloc), [&] { return inner_.malloc(dev, bytes, ptr); });
}
Status TimedDevice::free(int dev, void* ptr) {
  return timed(of(CallKind::free), [&] { return inner_.free(dev, ptr); });
}
std::size_t TimedDevice::granularity(int dev) {
  return timed(kQuery, [&] { return inner_.granularity(dev); });
}
Status TimedDevice::reserve(int dev, std::size_t bytes, std::uintptr_t* va) {
  return timed(of(CallKind::reserve), [&] { return inner_.reserve(dev, bytes, va); });
}
Status TimedDevice::unreserve(std::uintptr_t va, std::size_t bytes) {
  return timed(of(CallKind::unreserve), [&] { return inner_.unreserve(va, bytes); });
}
Status TimedDevice::create_physical(int dev, std::size_t bytes, Location where,
                                    PhysicalHandle* handle) {
  return timed(of(CallKind::create_physical),
               [&] { return inner_.create_physical(dev, bytes, where, handle); });
}
Status TimedDevice::release_physical(PhysicalHandle handle) {
  return timed(of(CallKind::release_physical), [&] { return inner_.release_physical(handle); });
}
Status TimedDevice::export_physical(PhysicalHandle handle, int* fd) {
  return timed(of(CallKind::export_physical), [&] { return inner_.export_physical(handle, fd); });
}
Status TimedDevice::import_physical(int fd, PhysicalHandle* handle) {
  return timed(of(CallKind::import_physical), [&] { return inner_.import_physical(fd, handle); });
}
Status TimedDevice::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
                        std::size_t offset) {
  return timed(of(CallKind::map), [&] { return inner_.map(va, bytes, handle, offset); });
}
Status TimedDevice::unmap(std::uintptr_t va, std::size_t bytes) {
  return timed(of(CallKind::unmap), [&] { return inner_.unmap(va, bytes); });
}
Status TimedDevice::set_access(int dev, std::uintptr_t va, std::size_t bytes) {
  return timed(of(CallKind::set_access), [&] { return inner_.set_access(dev, va, bytes); });
}
Status TimedDevice::copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
                         StreamHandle stream) {
  return timed(of(CallKind::copy), [&] { return inner_.copy(dev, dst, src, bytes, stream); });
}
Status TimedDevice::zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) {
  return timed(of(CallKind::zero), [&] { return inner_.zero(dev, dst, bytes, stream); });
}
Status TimedDevice::host_alloc(int dev, std::size_t bytes, void** ptr) {
  return timed(of(CallKind::host_alloc), [&] { return inner_.host_alloc(dev, bytes, ptr); });
}
Status TimedDevice::host_free(void* ptr) {
  return timed(of(CallKind::host_free), [&] { return inner_.host_free(ptr); });
}
Status TimedDevice::event_create(int dev, EventHandle* event) {
  return timed(of(CallKind::event_create), [&] { return inner_.event_create(dev, event); });
}
Status TimedDevice::event_destroy(EventHandle event) {
  return timed(of(CallKind::event_destroy), [&] { return inner_.event_destroy(event); });
}
Status TimedDevice::event_record(int dev, EventHandle event, StreamHandle stream) {
  return timed(of(CallKind::event_record), [&] { return inner_.event_record(dev, event, stream); });
}
Status TimedDevice::event_query(EventHandle event) {
  return timed(of(CallKind::event_query), [&] { return inner_.event_query(event); });
}
Status TimedDevice::event_synchronize(EventHandle event) {
  return timed(of(CallKind::event_synchronize), [&] { return inner_.event_synchronize(event); });
}
Status TimedDevice::stream_wait_event(int dev, StreamHandle stream, EventHandle event) {
  return timed(of(CallKind::stream_wait_event),
               [&] { return inner_.stream_wait_event(dev, stream, event); });
}
Status TimedDevice::synchronize(int dev) {
  return timed(of(CallKind::synchronize), [&] { return inner_.synchronize(dev); });
}
Status TimedDevice::ipc_handle(int dev, void* ptr, unsigned char* handle) {
  return timed(kQuery, [&] { return inner_.ipc_handle(dev, ptr, handle); });
}
Status TimedDevice::stream_capturing(int dev, StreamHandle stream, bool* capturing) {
  return timed(kQuery, [&] { return inner_.stream_capturing(dev, stream, capturing); });
}
Status TimedDevice::capture_id(int dev, StreamHandle stream, std::uint64_t* id) {
  return timed(kQuery, [&] { return inner_.capture_id(dev, stream, id); });
}

}  // namespace cudalloc::device
