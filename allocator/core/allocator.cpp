#include "core/allocator.h"

namespace cudalloc {

Allocator::Allocator(device::Device& device, const Settings& settings)
    : device_(device), settings_(settings) {}

Allocator::~Allocator() {
  for (auto& slot : devices_) delete slot.load();
}

int Allocator::device_count() { return device_.device_count(); }

DeviceAllocator* Allocator::create_device(int dev, Error* err) {
  if (dev == -1) {  // the current device; any other negative number is invalid below
    if (device_.current_device(&dev) != device::Status::ok) dev = 0;
    if (dev >= 0 && dev < kMaxDevices) {
      if (DeviceAllocator* d = devices_[dev].load(std::memory_order_acquire)) return d;
    }
  }
  const int count = device_.device_count();
  if (count == 0) {
    *err = fail(Error::no_device, "no CUDA device: the driver (libcuda.so.1) is missing or "
                                  "reports no device; CUDALLOC_DEVICE=fake simulates one");
    return nullptr;
  }
  if (dev < 0 || dev >= count || dev >= kMaxDevices) {
    *err = fail(Error::invalid_value, "device %d does not exist (%d devices)", dev, count);
    return nullptr;
  }
  std::lock_guard lock(create_mutex_);
  DeviceAllocator* d = devices_[dev].load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new DeviceAllocator(device_, dev, settings_);
    devices_[dev].store(d, std::memory_order_release);
  }
  return d;
}

DeviceAllocator* Allocator::owner_of(const void* ptr) {
  for (auto& slot : devices_) {
    DeviceAllocator* d = slot.load(std::memory_order_acquire);
    if (d != nullptr && d->owns(ptr)) return d;
  }
  return nullptr;
}

Error Allocator::free_anywhere(void* ptr, DeviceAllocator::FreeOrder order,
                               const StreamHandle* used_on) {
  for (auto& slot : devices_) {
    DeviceAllocator* d = slot.load(std::memory_order_acquire);
    if (d == nullptr) continue;
    if (used_on != nullptr && d->record_stream(ptr, *used_on) == Error::invalid_pointer) continue;
    const Error err = d->deallocate(ptr, order);
    if (err != Error::invalid_pointer) return err;
  }
  return fail(Error::invalid_pointer, "free of %p: not a live allocation of cudalloc on any device",
              ptr);
}

void Allocator::lock_all() {
  create_mutex_.lock();
  for_each_device([](DeviceAllocator& d) { d.lock_for_fork(); });
}

void Allocator::unlock_all() {
  for_each_device([](DeviceAllocator& d) { d.unlock_after_fork(); });
  create_mutex_.unlock();
}

}  // namespace cudalloc
