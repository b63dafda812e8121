// CUDA IPC of paged memory on the fake device: a paged allocation's pages shared as file
// descriptors (DeviceAllocator::share_pages) and opened again (ImportedPages), within one
// process, which is what the fake device can simulate (pidfd_getfd on this process).
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "../capi/pidfd_probe.h"
#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

using cudalloc::testing::pidfd_available;

struct Shared {
  std::size_t page_size = 0, offset = 0, count = 0;
  int fds[16] = {};
};

Shared share(Harness& h, const void* p) {
  Shared s;
  INFO(last_error_message());
  REQUIRE(h.alloc->share_pages(p, &s.page_size, &s.offset, s.fds, 16, &s.count) == Error::ok);
  return s;
}

void fill(void* p, std::size_t n, unsigned char seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(seed + i * 7);
}

}  // namespace

TEST_CASE("ipc: shared pages open at another address with the same bytes, both ways",
          "[ipc]") {
  if (!pidfd_available()) {
    WARN("pidfd_getfd is not available here: opening shared pages is not exercised");
    return;
  }
  Harness h;
  void* before = h.get(3 * MiB);  // so that p starts inside a page
  constexpr std::size_t kSize = 5 * MiB + 4096;
  void* p = h.get(kSize);
  fill(p, kSize, 3);
  const Shared s = share(h, p);
  CHECK(s.page_size == 8 * MiB);  // the default page
  // Pages lie on the segment's own grid, whose base need not be aligned to a whole page:
  // the offset is where p starts inside its first page, so never 0 here (3 MiB came before).
  CHECK(s.offset > 0);
  CHECK(s.offset < s.page_size);
  CHECK(s.count == (s.offset + kSize + s.page_size - 1) / s.page_size);
  for (std::size_t i = 0; i < s.count; ++i) CHECK(::fcntl(s.fds[i], F_GETFD) >= 0);
  const Shared again = share(h, p);  // the same descriptors: exported once per page
  CHECK(std::memcmp(again.fds, s.fds, sizeof s.fds) == 0);

  void* base = nullptr;
  INFO(last_error_message());
  REQUIRE(h.alloc->open_shared_pages(::getpid(), s.fds, s.count, s.page_size, &base) ==
          Error::ok);
  CHECK(base != nullptr);
  CHECK(h.alloc->owns_shared_pages(base));
  char* view = static_cast<char*>(base) + s.offset;
  CHECK(view != p);
  CHECK(std::memcmp(view, p, kSize) == 0);
  fill(view, kSize, 99);  // the other process writes: this one sees it
  std::vector<unsigned char> expect(kSize);
  fill(expect.data(), kSize, 99);
  CHECK(std::memcmp(p, expect.data(), kSize) == 0);
  h.check();
  REQUIRE(h.alloc->close_shared_pages(base) == Error::ok);
  CHECK_FALSE(h.alloc->owns_shared_pages(base));
  CHECK(h.alloc->close_shared_pages(base) == Error::invalid_pointer);
  h.put(p);
  h.put(before);
}

TEST_CASE("ipc: the importer's mapping keeps the memory after the exporter released it",
          "[ipc]") {
  if (!pidfd_available()) {
    WARN("pidfd_getfd is not available here: opening shared pages is not exercised");
    return;
  }
  Harness h;
  void* p = h.get(4 * MiB);
  fill(p, 4 * MiB, 1);
  const Shared s = share(h, p);
  void* base = nullptr;
  REQUIRE(h.alloc->open_shared_pages(::getpid(), s.fds, s.count, s.page_size, &base) ==
          Error::ok);
  h.put(p);
  REQUIRE(h.alloc->empty_cache() == Error::ok);
  CHECK(h.stats().reserved_bytes.current == 0);
  for (std::size_t i = 0; i < s.count; ++i) CHECK(::fcntl(s.fds[i], F_GETFD) == -1);  // closed
  std::vector<unsigned char> expect(4 * MiB);
  fill(expect.data(), 4 * MiB, 1);
  CHECK(std::memcmp(static_cast<char*>(base) + s.offset, expect.data(), 4 * MiB) == 0);
  const std::size_t used = h.fake.used_bytes(0);
  CHECK(used == s.count * s.page_size);  // held by the importer alone
  REQUIRE(h.alloc->close_shared_pages(base) == Error::ok);
  CHECK(h.fake.used_bytes(0) == 0);
}

TEST_CASE("ipc: shared memory does not move to the host tier", "[ipc][offload]") {
  Settings settings;
  settings.offload = Offload::host;
  Harness h(settings);
  void* p = h.get(8 * MiB);  // a page each: q's page is not shared
  void* q = h.get(8 * MiB);
  share(h, p);
  CHECK(h.alloc->offload(p, 0) == Error::not_supported);
  CHECK(std::strstr(last_error_message(), "shared with another process") != nullptr);
  std::size_t device_bytes = 0, host_bytes = 0;
  REQUIRE(h.alloc->residency(p, &device_bytes, &host_bytes) == Error::ok);
  CHECK(host_bytes == 0);
  CHECK(h.alloc->offload(q, 0) == Error::ok);  // unshared memory still moves
  h.check();
  h.put(p);
  h.put(q);
}

TEST_CASE("ipc: what cannot be shared or opened is refused, and nothing is left behind",
          "[ipc][errors]") {
  Harness plain(plain_settings());
  void* a = plain.get(1 * MiB);
  std::size_t page_size = 0, offset = 0, count = 0;
  int fds[4] = {-1, -1, -1, -1};
  CHECK(plain.alloc->share_pages(a, &page_size, &offset, fds, 4, &count) == Error::not_supported);
  CHECK(std::strstr(last_error_message(), "legacy IPC handle") != nullptr);
  plain.put(a);

  Harness h(granular_pages());  // 2 MiB pages: 6 MiB spans three
  void* p = h.get(6 * MiB);
  CHECK(h.alloc->share_pages(reinterpret_cast<char*>(p) + 1, &page_size, &offset, fds, 4,
                             &count) == Error::invalid_pointer);
  // Capacity 0: the count only, nothing exported.
  REQUIRE(h.alloc->share_pages(p, &page_size, &offset, fds, 0, &count) == Error::ok);
  CHECK(count == 3);
  CHECK(fds[0] == -1);
  CHECK(h.fake.calls(CallKind::export_physical) == 0);
  // An export the driver refuses leaves the page unshared.
  h.fake.fail_call(CallKind::export_physical, 1, device::Status::not_supported);
  CHECK(h.alloc->share_pages(p, &page_size, &offset, fds, 4, &count) == Error::not_supported);
  const Shared s = share(h, p);
  void* base = nullptr;
  CHECK(h.alloc->open_shared_pages(::getpid(), s.fds, s.count, s.page_size + 4096, &base) ==
        Error::invalid_value);
  CHECK(h.alloc->open_shared_pages(::getpid(), s.fds, 0, s.page_size, &base) ==
        Error::invalid_value);
  CHECK(h.alloc->open_shared_pages(-5, s.fds, s.count, s.page_size, &base) ==
        Error::invalid_value);
  if (pidfd_available()) {
    const int bad[] = {s.fds[0], 1 << 20};  // the second is open nowhere
    const std::size_t used = h.fake.used_bytes(0);
    CHECK(h.alloc->open_shared_pages(::getpid(), bad, 2, s.page_size, &base) ==
          Error::invalid_value);
    CHECK(std::strstr(last_error_message(), "descriptor") != nullptr);
    // The third page's import, then a map, fail: what was imported and mapped is undone.
    h.fake.fail_call(CallKind::import_physical, 3, device::Status::device_error);
    CHECK(h.alloc->open_shared_pages(::getpid(), s.fds, s.count, s.page_size, &base) ==
          Error::device_error);
    h.fake.fail_call(CallKind::map, 2, device::Status::device_error);
    CHECK(h.alloc->open_shared_pages(::getpid(), s.fds, s.count, s.page_size, &base) ==
          Error::device_error);
    h.put(p);
    REQUIRE(h.alloc->empty_cache() == Error::ok);
    CHECK(h.fake.used_bytes(0) == 0);  // no import outlived its failed open
    CHECK(used == s.count * s.page_size);
  } else {
    h.put(p);
  }
  h.check();
}
