#include "core/imported_pages.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.h"

namespace cudalloc {
namespace {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

// A descriptor, or -1 with errno set.
int pidfd_open(int pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_getfd(int pidfd, int fd) { return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

// What a failed system call means for the user.
const char* os_reason(int err) {
  switch (err) {
    case ENOSYS: return "the kernel lacks pidfd_open/pidfd_getfd (Linux 5.6)";
    case EPERM: return "no permission to take the exporter's descriptors (ptrace access: "
                       "kernel.yama.ptrace_scope, or another user)";
    case ESRCH: return "the exporting process is gone";
    case EBADF: return "the exporter's descriptor is not open (its memory was released)";
    default: return std::strerror(err);
  }
}

}  // namespace

ImportedPages::~ImportedPages() {
  std::lock_guard lock(mutex_);
  for (const auto& [base, range] : ranges_) undo(base, range, range.handles.size(), true);
  ranges_.clear();
}

Error ImportedPages::import_one(int pidfd, int fd, device::PhysicalHandle* handle) {
  const int mine = pidfd_getfd(pidfd, fd);
  if (mine < 0) {
    const int err = errno;
    return fail(Error::invalid_value, "device %d: opening shared memory: descriptor %d: %s",
                ordinal_, fd, os_reason(err));
  }
  const auto status = device_.import_physical(mine, handle);
  ::close(mine);
  if (status != device::Status::ok) {
    return fail(status == device::Status::not_supported ? Error::not_supported
                                                        : Error::device_error,
                "device %d: importing shared memory failed: %s %s", ordinal_,
                device::status_name(status), device_.last_failure());
  }
  return Error::ok;
}

Error ImportedPages::open(int pid, const int* fds, std::size_t count, std::size_t page_size,
                          std::uintptr_t* base) {
  const std::size_t granularity = device_.granularity(ordinal_);
  if (fds == nullptr || base == nullptr || count == 0 || granularity == 0 || page_size == 0 ||
      page_size % granularity != 0 || count > (std::size_t{1} << 40) / page_size) {
    return fail(Error::invalid_value,
                "device %d: opening shared memory: %zu pages of %zu bytes (page size must be a "
                "multiple of %zu)", ordinal_, count, page_size, granularity);
  }
  const int pidfd = pidfd_open(pid);
  if (pidfd < 0) {
    const int err = errno;
    return fail(Error::invalid_value, "device %d: opening shared memory of process %d: %s",
                ordinal_, pid, os_reason(err));
  }
  Range range;
  range.page_size = page_size;
  range.handles.reserve(count);
  Error err = Error::ok;
  for (std::size_t i = 0; err == Error::ok && i < count; ++i) {
    device::PhysicalHandle h = 0;
    err = import_one(pidfd, fds[i], &h);
    if (err == Error::ok) range.handles.push_back(h);
  }
  ::close(pidfd);
  if (err != Error::ok) {
    undo(0, range, 0, false);
    return err;
  }
  std::uintptr_t va = 0;
  if (const auto s = device_.reserve(ordinal_, count * page_size, &va); s != device::Status::ok) {
    undo(0, range, 0, false);
    return fail(Error::out_of_memory, "device %d: no address range for shared memory: %s",
                ordinal_, device_.last_failure());
  }
  std::size_t mapped = 0;
  while (mapped < count &&
         device_.map(va + mapped * page_size, page_size, range.handles[mapped], 0) ==
             device::Status::ok) {
    ++mapped;
  }
  if (mapped < count || device_.set_access(ordinal_, va, count * page_size) != device::Status::ok) {
    char why[96];
    std::snprintf(why, sizeof why, "%s", device_.last_failure());
    undo(va, range, mapped, true);
    return fail(Error::device_error, "device %d: mapping shared memory failed: %s", ordinal_, why);
  }
  std::lock_guard lock(mutex_);
  ranges_.emplace(va, std::move(range));
  *base = va;
  return Error::ok;
}

void ImportedPages::undo(std::uintptr_t base, const Range& range, std::size_t mapped,
                         bool reserved) {
  if (mapped > 0) device_.unmap(base, mapped * range.page_size);
  for (device::PhysicalHandle h : range.handles) device_.release_physical(h);
  if (reserved) device_.unreserve(base, range.handles.size() * range.page_size);
}

Error ImportedPages::close(std::uintptr_t base) {
  std::lock_guard lock(mutex_);
  auto it = ranges_.find(base);
  if (it == ranges_.end()) {
    return fail(Error::invalid_pointer, "device %d: %#zx is no shared memory opened here",
                ordinal_, static_cast<std::size_t>(base));
  }
  // Work this process queued may still use the memory: it finishes before the unmap.
  if (device_.synchronize(ordinal_) != device::Status::ok) {
    log().warn("device {}: synchronizing before closing shared memory failed: {}", ordinal_,
               device_.last_failure());
  }
  undo(base, it->second, it->second.handles.size(), true);
  ranges_.erase(it);
  return Error::ok;
}

bool ImportedPages::owns(std::uintptr_t base) const {
  std::lock_guard lock(mutex_);
  return ranges_.count(base) == 1;
}

std::size_t ImportedPages::open_ranges() const {
  std::lock_guard lock(mutex_);
  return ranges_.size();
}

}  // namespace cudalloc
