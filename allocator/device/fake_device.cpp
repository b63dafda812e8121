#include "device/fake_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "util/units.h"

namespace cudalloc::device {
namespace {

// Anonymous memory that costs nothing until touched, so that a simulated device of many GiB
// can be replayed on a small host.
void* map_lazy(std::size_t bytes, int prot) {
  void* p = ::mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

FakeDevice::FakeDevice(Options options) : options_(options), memory_(options.devices) {}

FakeDevice::~FakeDevice() {
  for (auto& [ptr, info] : allocations_) ::munmap(ptr, info.second);
  for (auto& [va, info] : reservations_) ::munmap(reinterpret_cast<void*>(va), info.second);
  for (auto& [ptr, bytes] : host_allocations_) ::munmap(ptr, bytes);
  for (auto& m : memory_) {
    if (m.file >= 0) ::close(m.file);
  }
  if (host_memory_.file >= 0) ::close(host_memory_.file);
}

Status FakeDevice::check_fault(CallKind kind) {
  const int k = static_cast<int>(kind);
  ++calls_[k];
  if (fault_at_[k] != 0 && calls_[k] == fault_at_[k]) {
    fault_at_[k] = --fault_count_[k] > 0 ? fault_at_[k] + 1 : 0;
    return fault_status_[k];
  }
  return Status::ok;
}

Status FakeDevice::mem_info(int dev, std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(mutex_);
  if (!valid_device(dev)) return Status::invalid_value;
  *total_bytes = options_.capacity;
  *free_bytes = options_.capacity - memory_[dev].used;
  return Status::ok;
}

Status FakeDevice::malloc(int dev, std::size_t bytes, void** ptr) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::malloc); s != Status::ok) return s;
  if (!valid_device(dev) || bytes == 0) return Status::invalid_value;
  if (bytes > options_.capacity - memory_[dev].used) return Status::out_of_memory;
  void* p = map_lazy(bytes, PROT_READ | PROT_WRITE);
  if (p == nullptr) return Status::out_of_memory;
  allocations_[p] = {dev, bytes};
  memory_[dev].used += bytes;
  *ptr = p;
  return Status::ok;
}

Status FakeDevice::free(int dev, void* ptr) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::free); s != Status::ok) return s;
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.first != dev) return Status::invalid_value;
  ::munmap(ptr, it->second.second);
  memory_[dev].used -= it->second.second;
  allocations_.erase(it);
  return Status::ok;
}

std::size_t FakeDevice::granularity(int dev) {
  return valid_device(dev) ? options_.granularity : 0;
}

Status FakeDevice::reserve(int dev, std::size_t bytes, std::uintptr_t* va) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::reserve); s != Status::ok) return s;
  const std::size_t g = options_.granularity;
  if (!valid_device(dev) || bytes == 0 || bytes % g != 0) return Status::invalid_value;
  // Over-reserve by one page so the range can start on a page boundary, then trim.
  auto* raw = static_cast<char*>(map_lazy(bytes + g, PROT_NONE));
  if (raw == nullptr) return Status::out_of_memory;
  const auto start = round_up(reinterpret_cast<std::uintptr_t>(raw), g);
  const std::size_t head = start - reinterpret_cast<std::uintptr_t>(raw);
  if (head > 0) ::munmap(raw, head);
  if (g - head > 0) ::munmap(reinterpret_cast<void*>(start + bytes), g - head);
  reservations_[start] = {dev, bytes};
  *va = start;
  return Status::ok;
}

Status FakeDevice::unreserve(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::unreserve); s != Status::ok) return s;
  auto it = reservations_.find(va);
  if (it == reservations_.end() || it->second.second != bytes) return Status::invalid_value;
  if (!range_unmapped(va, bytes)) return Status::invalid_value;  // CUDA requires unmapping first
  ::munmap(reinterpret_cast<void*>(va), bytes);
  reservations_.erase(it);
  return Status::ok;
}

Status FakeDevice::take_file_range(int dev, std::size_t bytes, std::size_t* offset) {
  DeviceMemory& m = memory_of(dev);
  if (m.file < 0) {
    m.file = ::memfd_create("cudalloc-fake-device", MFD_CLOEXEC);
    if (m.file < 0 || ::ftruncate(m.file, static_cast<off_t>(capacity_of(dev))) != 0) {
      return Status::device_error;
    }
    m.holes[0] = capacity_of(dev);
  }
  for (auto it = m.holes.begin(); it != m.holes.end(); ++it) {
    if (it->second < bytes) continue;
    *offset = it->first;
    const std::size_t rest = it->second - bytes;
    m.holes.erase(it);
    if (rest > 0) m.holes[*offset + bytes] = rest;
    return Status::ok;
  }
  return Status::out_of_memory;
}

void FakeDevice::return_file_range(int dev, std::size_t offset, std::size_t bytes) {
  DeviceMemory& m = memory_of(dev);
  // Give the pages back to the host, then merge the hole with its neighbours.
  ::fallocate(m.file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
              static_cast<off_t>(bytes));
  auto next = m.holes.lower_bound(offset);
  if (next != m.holes.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = m.holes.erase(next);
  }
  if (next != m.holes.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  m.holes[offset] = bytes;
}

Status FakeDevice::create_physical(int dev, std::size_t bytes, Location where,
                                   PhysicalHandle* handle) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::create_physical); s != Status::ok) return s;
  if (!valid_device(dev) || bytes == 0 || bytes % options_.granularity != 0) {
    return Status::invalid_value;
  }
  const bool host = where == Location::host;
  if (host && !options_.host_physical) return Status::not_supported;
  const int file = host ? kHost : dev;
  if (bytes > capacity_of(file) - memory_of(file).used) return Status::out_of_memory;
  std::size_t offset = 0;
  if (Status s = take_file_range(file, bytes, &offset); s != Status::ok) return s;
  memory_of(file).used += bytes;
  const PhysicalHandle h = next_physical_++;
  physicals_[h] = Physical{dev, host, offset, bytes, 0, false};
  *handle = h;
  return Status::ok;
}

void FakeDevice::free_physical_if_unused(PhysicalHandle handle) {
  auto it = physicals_.find(handle);
  if (it == physicals_.end() || !it->second.released || it->second.mappings > 0) return;
  const int file = it->second.host ? kHost : it->second.dev;
  return_file_range(file, it->second.offset, it->second.bytes);
  memory_of(file).used -= it->second.bytes;
  physicals_.erase(it);
}

Status FakeDevice::release_physical(PhysicalHandle handle) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::release_physical); s != Status::ok) return s;
  auto it = physicals_.find(handle);
  if (it == physicals_.end() || it->second.released) return Status::invalid_value;
  // As in CUDA, the memory itself goes away once its last mapping is unmapped.
  it->second.released = true;
  free_physical_if_unused(handle);
  return Status::ok;
}

bool FakeDevice::range_reserved(std::uintptr_t va, std::size_t bytes) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return false;
  --it;
  return va + bytes <= it->first + it->second.second;
}

bool FakeDevice::range_unmapped(std::uintptr_t va, std::size_t bytes) const {
  auto it = mappings_.lower_bound(va);
  if (it != mappings_.end() && it->first < va + bytes) return false;
  if (it == mappings_.begin()) return true;
  --it;
  return it->first + it->second.bytes <= va;
}

Status FakeDevice::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle,
                       std::size_t offset) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::map); s != Status::ok) return s;
  const std::size_t g = options_.granularity;
  auto it = physicals_.find(handle);
  if (it == physicals_.end() || it->second.released || bytes == 0 || va % g || bytes % g ||
      offset % g || offset + bytes > it->second.bytes || !range_reserved(va, bytes) ||
      !range_unmapped(va, bytes)) {
    return Status::invalid_value;
  }
  DeviceMemory& m = memory_of(it->second.host ? kHost : it->second.dev);
  void* p = ::mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, m.file,
                   static_cast<off_t>(it->second.offset + offset));
  if (p == MAP_FAILED) return Status::device_error;
  mappings_[va] = Mapping{bytes, handle};
  ++it->second.mappings;
  return Status::ok;
}

Status FakeDevice::unmap(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::unmap); s != Status::ok) return s;
  // CUDA unmaps whole mappings; the range must start at one and cover whole ones.
  std::uintptr_t at = va;
  for (auto it = mappings_.find(va); it != mappings_.end() && at < va + bytes; ++it) {
    if (it->first != at) return Status::invalid_value;
    at += it->second.bytes;
  }
  if (at != va + bytes) return Status::invalid_value;
  auto it = mappings_.find(va);
  while (it != mappings_.end() && it->first < va + bytes) {
    ::mmap(reinterpret_cast<void*>(it->first), it->second.bytes, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    const PhysicalHandle h = it->second.handle;
    --physicals_[h].mappings;
    it = mappings_.erase(it);
    free_physical_if_unused(h);
  }
  return Status::ok;
}

Status FakeDevice::set_access(int dev, std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::set_access); s != Status::ok) return s;
  if (!valid_device(dev)) return Status::invalid_value;
  std::uintptr_t at = va;
  for (auto it = mappings_.find(va); it != mappings_.end() && at < va + bytes; ++it) {
    if (it->first != at) break;
    at += it->second.bytes;
  }
  if (at < va + bytes) return Status::invalid_value;  // part of the range is not mapped
  if (::mprotect(reinterpret_cast<void*>(va), bytes, PROT_READ | PROT_WRITE) != 0) {
    return Status::device_error;
  }
  return Status::ok;
}

}  // namespace cudalloc::device

namespace cudalloc::device {

Status FakeDevice::host_alloc(int dev, std::size_t bytes, void** ptr) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::host_alloc); s != Status::ok) return s;
  if (!valid_device(dev) || bytes == 0) return Status::invalid_value;
  if (bytes > options_.host_capacity - host_memory_.used) return Status::out_of_memory;
  void* p = map_lazy(bytes, PROT_READ | PROT_WRITE);
  if (p == nullptr) return Status::out_of_memory;
  host_allocations_[p] = bytes;
  host_memory_.used += bytes;
  *ptr = p;
  return Status::ok;
}

Status FakeDevice::host_free(void* ptr) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::host_free); s != Status::ok) return s;
  auto it = host_allocations_.find(ptr);
  if (it == host_allocations_.end()) return Status::invalid_value;
  ::munmap(ptr, it->second);
  host_memory_.used -= it->second;
  host_allocations_.erase(it);
  return Status::ok;
}

bool FakeDevice::range_backed(std::uintptr_t va, std::size_t bytes) const {
  auto within = [&](const void* ptr, std::size_t size) {
    const auto base = reinterpret_cast<std::uintptr_t>(ptr);
    return va >= base && va + bytes <= base + size;
  };
  for (const auto& [ptr, info] : allocations_) {
    if (within(ptr, info.second)) return true;
  }
  for (const auto& [ptr, size] : host_allocations_) {
    if (within(ptr, size)) return true;
  }
  // Mapped ranges: consecutive mappings must cover [va, va + bytes) without a gap.
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin()) return false;
  std::uintptr_t at = va;
  for (--it; it != mappings_.end() && at < va + bytes; ++it) {
    if (it->first > at || it->first + it->second.bytes <= at) return false;
    at = it->first + it->second.bytes;
  }
  return at >= va + bytes;
}

std::size_t FakeDevice::host_used_bytes() const {
  std::lock_guard lock(mutex_);
  return host_memory_.used;
}

std::uint64_t FakeDevice::bad_copies() const {
  std::lock_guard lock(mutex_);
  return bad_copies_;
}

bool FakeDevice::location_of(std::uintptr_t va, Location* where) const {
  std::lock_guard lock(mutex_);
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin()) return false;
  --it;
  if (va >= it->first + it->second.bytes) return false;
  *where = physicals_.at(it->second.handle).host ? Location::host : Location::device;
  return true;
}

}  // namespace cudalloc::device
