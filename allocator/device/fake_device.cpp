#include "device/fake_device.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
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

// Every live FakeDevice, for the fork handlers. Leaked: a fork may come during static
// destruction. Lock order: fakes_mutex() before any device's mutex_.
std::mutex& fakes_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<FakeDevice*>& live_fakes() {
  static auto* fakes = new std::set<FakeDevice*>;
  return *fakes;
}

// Copies the data of `from` (holes stay holes) into `to`, which is as large and empty.
bool copy_file_data(int from, int to, off_t size) {
  for (off_t at = 0; at < size;) {
    const off_t data = ::lseek(from, at, SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // no data past `at`
    const off_t hole = ::lseek(from, data, SEEK_HOLE);
    if (hole < 0) return false;
    for (off_t in = data, out = data; in < hole;) {
      const ssize_t n = ::copy_file_range(from, &in, to, &out, static_cast<std::size_t>(hole - in), 0);
      if (n <= 0) return false;
    }
    at = hole;
  }
  return true;
}

}  // namespace

void FakeDevice::register_fork_handlers() {
  static const bool registered = [] {
    pthread_atfork(&lock_all_for_fork, &unlock_all_in_parent, &copy_all_in_child);
    return true;
  }();
  (void)registered;
}

void FakeDevice::lock_all_for_fork() {
  fakes_mutex().lock();
  for (FakeDevice* f : live_fakes()) f->mutex_.lock();
}

void FakeDevice::unlock_all_in_parent() {
  for (FakeDevice* f : live_fakes()) f->mutex_.unlock();
  fakes_mutex().unlock();
}

// The child is single-threaded here, so remapping under the program's feet is safe: no other
// thread can be using the memory.
void FakeDevice::copy_all_in_child() {
  for (FakeDevice* f : live_fakes()) {
    bool copied = f->copy_memory_file(kHost);
    for (int dev = 0; dev < f->options_.devices; ++dev) copied = f->copy_memory_file(dev) && copied;
    if (!copied) {
      static const char kMessage[] =
          "cudalloc: fake device: the child of fork() could not get its own copy of the "
          "simulated memory; it shares the parent's\n";
      [[maybe_unused]] const ssize_t n = ::write(2, kMessage, sizeof kMessage - 1);
    }
    f->mutex_.unlock();
  }
  fakes_mutex().unlock();
}

bool FakeDevice::copy_memory_file(int dev) {
  DeviceMemory& m = memory_of(dev);
  if (m.file < 0) return true;
  const auto size = static_cast<off_t>(capacity_of(dev));
  const int copy = ::memfd_create("cudalloc-fake-device", MFD_CLOEXEC);
  if (copy < 0) return false;
  if (::ftruncate(copy, size) != 0 || !copy_file_data(m.file, copy, size)) {
    ::close(copy);
    return false;
  }
  for (const auto& [va, mapping] : mappings_) {
    const Physical& p = physicals_.at(mapping.handle);
    if ((p.host ? kHost : p.dev) != dev) continue;
    const int prot = mapping.accessible ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (::mmap(reinterpret_cast<void*>(va), mapping.bytes, prot, MAP_SHARED | MAP_FIXED, copy,
               static_cast<off_t>(p.offset + mapping.offset)) == MAP_FAILED) {
      return false;  // mappings done so far use the copy, the rest the shared file
    }
  }
  ::close(m.file);
  m.file = copy;
  return true;
}

FakeDevice::FakeDevice(Options options) : options_(options), memory_(options.devices) {
  register_fork_handlers();
  std::lock_guard lock(fakes_mutex());
  live_fakes().insert(this);
}

FakeDevice::~FakeDevice() {
  {
    std::lock_guard lock(fakes_mutex());
    live_fakes().erase(this);
  }
  for (auto& [ptr, info] : allocations_) free_bytes(ptr, info.second);
  if (options_.backing) {
    for (auto& [va, info] : reservations_) ::munmap(reinterpret_cast<void*>(va), info.second);
  }
  for (auto& [ptr, bytes] : host_allocations_) free_bytes(ptr, bytes);
  for (auto& m : memory_) {
    if (m.file >= 0) ::close(m.file);
  }
  if (host_memory_.file >= 0) ::close(host_memory_.file);
}

std::uintptr_t FakeDevice::take_address_space(std::size_t bytes, std::size_t align) {
  const std::uintptr_t at = round_up(next_address_, align);
  next_address_ = at + round_up(bytes, align);
  return at;
}

void* FakeDevice::allocate_bytes(std::size_t bytes) {
  if (!options_.backing) {
    return reinterpret_cast<void*>(take_address_space(bytes, std::size_t{2} << 20));
  }
  return map_lazy(bytes, PROT_READ | PROT_WRITE);
}

void FakeDevice::free_bytes(void* ptr, std::size_t bytes) {
  if (options_.backing) ::munmap(ptr, bytes);
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
  void* p = allocate_bytes(bytes);
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
  free_bytes(ptr, it->second.second);
  memory_[dev].used -= it->second.second;
  allocations_.erase(it);
  return Status::ok;
}

Status FakeDevice::ipc_handle(int dev, void* ptr, unsigned char* handle) {
  std::lock_guard lock(mutex_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.first != dev) return Status::invalid_value;
  std::memset(handle, 0, kIpcHandleBytes);
  std::memcpy(handle, "fake-ipc:", 9);
  std::memcpy(handle + 16, &ptr, sizeof ptr);
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
  if (!options_.backing) {
    *va = take_address_space(bytes, g);
    reservations_[*va] = {dev, bytes};
    return Status::ok;
  }
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
  if (options_.backing) ::munmap(reinterpret_cast<void*>(va), bytes);
  reservations_.erase(it);
  return Status::ok;
}

Status FakeDevice::take_file_range(int dev, std::size_t bytes, std::size_t* offset) {
  DeviceMemory& m = memory_of(dev);
  if (!options_.backing) {  // capacity is counted by the caller; no file, no offsets
    *offset = 0;
    return Status::ok;
  }
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
  if (!options_.backing) return;
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
  physicals_[h] = Physical{dev, host, offset, bytes, 0, false, 1};
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
  if (--it->second.holders == 0) it->second.released = true;
  free_physical_if_unused(handle);
  return Status::ok;
}

namespace {
// What an exported descriptor of the fake device holds.
struct ExportedPhysical {
  char magic[8];
  const void* device;
  PhysicalHandle handle;
};
constexpr char kExportMagic[8] = {'c', 'u', 'd', 'a', 'f', 'a', 'k', 'e'};
}  // namespace

Status FakeDevice::export_physical(PhysicalHandle handle, int* fd) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::export_physical); s != Status::ok) return s;
  auto it = physicals_.find(handle);
  if (it == physicals_.end() || it->second.released) return Status::invalid_value;
  if (it->second.host) return Status::not_supported;  // as host-located memory on a GPU
  ExportedPhysical record{};
  std::memcpy(record.magic, kExportMagic, sizeof record.magic);
  record.device = this;
  record.handle = handle;
  const int out = ::memfd_create("cudalloc-fake-physical", MFD_CLOEXEC);
  if (out < 0) return Status::device_error;
  if (::pwrite(out, &record, sizeof record, 0) != static_cast<ssize_t>(sizeof record)) {
    ::close(out);
    return Status::device_error;
  }
  *fd = out;
  return Status::ok;
}

Status FakeDevice::import_physical(int fd, PhysicalHandle* handle) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::import_physical); s != Status::ok) return s;
  ExportedPhysical record{};
  if (::pread(fd, &record, sizeof record, 0) != static_cast<ssize_t>(sizeof record) ||
      std::memcmp(record.magic, kExportMagic, sizeof record.magic) != 0 || record.device != this) {
    return Status::invalid_value;
  }
  auto it = physicals_.find(record.handle);
  if (it == physicals_.end() || it->second.released) return Status::invalid_value;
  ++it->second.holders;
  *handle = record.handle;
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
  // The driver maps an allocation whole: a part of one (a smaller size, or an offset) is
  // refused (measured on the H200, driver 580, 2026-12-02: page-move-bench), so the fake
  // refuses it too.
  if (it == physicals_.end() || it->second.released || bytes == 0 || va % g ||
      offset != 0 || bytes != it->second.bytes || !range_reserved(va, bytes) ||
      !range_unmapped(va, bytes)) {
    return Status::invalid_value;
  }
  if (options_.backing) {
    DeviceMemory& m = memory_of(it->second.host ? kHost : it->second.dev);
    void* p = ::mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED,
                     m.file, static_cast<off_t>(it->second.offset + offset));
    if (p == MAP_FAILED) return Status::device_error;
  }
  mappings_[va] = Mapping{bytes, handle, offset};
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
    if (options_.backing) {
      ::mmap(reinterpret_cast<void*>(it->first), it->second.bytes, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    }
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
  if (options_.backing &&
      ::mprotect(reinterpret_cast<void*>(va), bytes, PROT_READ | PROT_WRITE) != 0) {
    return Status::device_error;
  }
  for (auto it = mappings_.find(va); it != mappings_.end() && it->first < va + bytes; ++it) {
    it->second.accessible = true;
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
  void* p = allocate_bytes(bytes);
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
  free_bytes(ptr, it->second);
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
