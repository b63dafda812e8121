// ImportedPages: memory another process shared (CUDA IPC of paged memory), mapped here.
//
// The exporter's DeviceAllocator::share_pages hands out, for a live allocation, one POSIX file
// descriptor per physical page it covers, open in the exporting process. open() takes each
// over with pidfd_getfd (the kernel's permission to ptrace the exporter is needed, as for
// PyTorch's expandable segments; the exporter grants it, see share_pages), imports it,
// and maps the pages in order at a new range of this process with read/write access. The
// importer's mapping keeps the physical memory alive on its own: the exporter may free and
// reuse its allocation (the importer then sees whatever the exporter writes there), exactly
// as with a legacy IPC handle of memory that was freed.
//
// Thread-safe (its own mutex); it touches no allocator state, only the device's address
// space, so it never takes the device allocator's lock. Every failure unwinds what was done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/errors.h"
#include "device/device.h"

namespace cudalloc {

class ImportedPages {
 public:
  ImportedPages(device::Device& device, int ordinal) : device_(device), ordinal_(ordinal) {}
  ~ImportedPages();  // closes what is still open
  ImportedPages(const ImportedPages&) = delete;
  ImportedPages& operator=(const ImportedPages&) = delete;

  // Maps the `count` pages of `page_size` bytes that process `pid` shared as the
  // descriptors `fds` (numbers in that process), in order; *base is the start of the range.
  Error open(int pid, const int* fds, std::size_t count, std::size_t page_size,
             std::uintptr_t* base);
  // Unmaps and releases a range open() returned. invalid_pointer for any other address.
  Error close(std::uintptr_t base);
  bool owns(std::uintptr_t base) const;
  std::size_t open_ranges() const;

 private:
  struct Range {
    std::size_t page_size = 0;
    std::vector<device::PhysicalHandle> handles;  // mapped in order from the base
  };
  // Imports the descriptor `fd` of the process behind `pidfd`.
  Error import_one(int pidfd, int fd, device::PhysicalHandle* handle);
  // Unmaps the first `mapped` pages of `range` at `base`, releases all its handles and, when
  // `reserved`, the address range.
  void undo(std::uintptr_t base, const Range& range, std::size_t mapped, bool reserved);

  device::Device& device_;
  const int ordinal_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Range> ranges_;
};

}  // namespace cudalloc
