// Allocator: one DeviceAllocator per device, created on first use of that device.
//
// Lookups of an existing device are a single atomic load: devices never share a lock, and the
// creation lock is taken only the first time a device is used.
#pragma once

#include <atomic>
#include <mutex>

#include "core/device_allocator.h"

namespace cudalloc {

class Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  Allocator(device::Device& device, const Settings& settings);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The allocator of device `dev` (-1: the calling thread's current device), or nullptr
  // with the reason in *err.
  DeviceAllocator* device(int dev, Error* err) {
    if (dev >= 0 && dev < kMaxDevices) {
      if (DeviceAllocator* d = devices_[dev].load(std::memory_order_acquire)) return d;
    }
    return create_device(dev, err);
  }
  // Whether device `dev` has its allocator already (one atomic load: the cached path).
  bool initialised(int dev) const { return in_use(dev) != nullptr; }
  // The allocator of device `dev` if it has one already, else nullptr (-1 included): one
  // atomic load, nothing created, no driver query.
  DeviceAllocator* in_use(int dev) const {
    return dev >= 0 && dev < kMaxDevices ? devices_[dev].load(std::memory_order_acquire)
                                         : nullptr;
  }
  // The initialised device that has `ptr` live, or nullptr.
  DeviceAllocator* owner_of(const void* ptr);
  // Frees `ptr` on whichever initialised device has it live, looking it up once per device
  // (not once to find the owner and again to free). With `used_on`, the memory first waits
  // for that stream too (record_stream). invalid_pointer when no device has it.
  Error free_anywhere(void* ptr, DeviceAllocator::FreeOrder order,
                      const StreamHandle* used_on = nullptr);
  // Calls f(DeviceAllocator&) for every initialised device.
  template <typename F>
  void for_each_device(F&& f) {
    for (auto& slot : devices_) {
      if (DeviceAllocator* d = slot.load(std::memory_order_acquire)) f(*d);
    }
  }
  int device_count();
  // Every lock of every device, for fork() (see interpose/shim.cpp).
  void lock_all();
  void unlock_all();
  const Settings& settings() const { return settings_; }
  device::Device& backend() { return device_; }

 private:
  DeviceAllocator* create_device(int dev, Error* err);

  device::Device& device_;
  const Settings settings_;
  std::atomic<DeviceAllocator*> devices_[kMaxDevices] = {};
  std::mutex create_mutex_;
};

}  // namespace cudalloc
