// DeviceAllocator: memory shared with other processes (CUDA IPC). Plain segments carry a
// legacy IPC handle; the pages of paged segments are shared as POSIX file descriptors
// (PhysicalPages::share), which another process opens with ImportedPages.
#include <sys/prctl.h>

#include <mutex>

#include "core/device_allocator.h"
#include "core/log.h"

namespace cudalloc {

namespace {

// Lets processes of the same user take this process's descriptors over (pidfd_getfd needs
// the permission to ptrace it): under Yama's default (ptrace_scope 1) only ancestors could,
// and the usual importer is a child (torch.multiprocessing, a forked worker). Done once, at
// the first share; it widens nothing where Yama is off (scope 0: already allowed).
void allow_importers() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef PR_SET_PTRACER
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  });
}

}  // namespace

Error DeviceAllocator::ipc_handle(const void* ptr, unsigned char* handle,
                                  std::size_t* offset) const {
  std::lock_guard lock(lock_);
  AllocationSpan span;
  if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
  const Segment& seg = *span.segment;
  if (seg.kind != Segment::Kind::plain) {
    return fail(Error::not_supported,
                "device %d: %p lies in %s memory, which cannot carry a CUDA IPC handle "
                "(paged memory is shared by its pages, cudalloc_ipc_share_pages; CUDALLOC_CONF=vmm:0 "
                "makes every allocation plain)", ordinal_, ptr,
                seg.paged() ? "paged" : "pinned host");
  }
  const auto status = device_.ipc_handle(ordinal_, reinterpret_cast<void*>(seg.base), handle);
  if (status != device::Status::ok) {
    return fail(status == device::Status::not_supported ? Error::not_supported
                                                        : Error::device_error,
                "device %d: no IPC handle for %p: %s %s", ordinal_, ptr,
                device::status_name(status), device_.last_failure());
  }
  allow_importers();  // the preload library's importer reads its record (process_vm_readv)
  *offset = span.addr - seg.base;
  return Error::ok;
}

Error DeviceAllocator::share_pages(const void* ptr, std::size_t* page_size,
                                   std::size_t* offset, int* fds, std::size_t capacity,
                                   std::size_t* count) {
  std::lock_guard lock(lock_);
  AllocationSpan span;
  if (const Error err = span_of(ptr, &span); err != Error::ok) return err;
  Segment& seg = *span.segment;
  if (!seg.paged()) {
    return fail(Error::not_supported,
                "device %d: %p lies in %s memory: share it through its legacy IPC handle",
                ordinal_, ptr, seg.pinned_host() ? "pinned host" : "plain");
  }
  const auto [first, last] = seg.pages_under(span.addr, span.size, page_size_);
  const std::size_t pages = last - first + 1;
  for (std::size_t i = 0; i < pages && i < capacity; ++i) {
    PhysicalPage* phys = seg.pages[first + i].phys;
    if (phys == nullptr) {
      return fail(Error::internal, "device %d: a page under the live %p has no memory",
                  ordinal_, ptr);
    }
    if (const Error err = physical_.share(*phys, &fds[i]); err != Error::ok) return err;
  }
  if (capacity > 0) allow_importers();
  *page_size = page_size_;
  *offset = span.addr - (seg.base + first * page_size_);
  *count = pages;
  return Error::ok;
}

Error DeviceAllocator::open_shared_pages(int pid, const int* fds, std::size_t count,
                                         std::size_t page_size, void** base) {
  std::uintptr_t va = 0;
  const Error err = imported_.open(pid, fds, count, page_size, &va);
  if (err == Error::ok) *base = reinterpret_cast<void*>(va);
  return err;
}

Error DeviceAllocator::close_shared_pages(void* base) {
  return imported_.close(reinterpret_cast<std::uintptr_t>(base));
}

}  // namespace cudalloc
