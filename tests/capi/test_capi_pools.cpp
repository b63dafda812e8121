// Private pools, IPC handles and inspection through libcudalloc.so (fake device, paged).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <vector>

#include "cudalloc.h"

namespace {

cudaStream_t stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

struct Segments {
  std::vector<cudalloc_segment_info_t> segments;
  std::vector<cudalloc_block_info_t> blocks;
};

Segments read_segments() {
  Segments s;
  size_t ns = 0, nb = 0;
  CHECK(cudalloc_get_segments(0, nullptr, 0, &ns, nullptr, 0, &nb) ==
        CUDALLOC_ERROR_INVALID_VALUE);  // sizes only
  s.segments.resize(ns);
  s.blocks.resize(nb);
  REQUIRE(cudalloc_get_segments(0, s.segments.data(), ns, &ns, s.blocks.data(), nb, &nb) ==
          CUDALLOC_SUCCESS);
  return s;
}

}  // namespace

TEST_CASE("C API: a private pool keeps its memory and reports its allocations", "[capi]") {
  const cudalloc_pool_t pool = 41;
  REQUIRE(cudalloc_pool_create(pool, 0) == CUDALLOC_SUCCESS);
  int users = 0;
  REQUIRE(cudalloc_pool_use_count(pool, 0, &users) == CUDALLOC_SUCCESS);
  CHECK(users == 1);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudalloc_allocate_in_pool(&a, 3 << 20, 0, stream(5), pool) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_allocate_in_pool(&b, 1000, 0, stream(5), pool) == CUDALLOC_SUCCESS);
  size_t count = 0;
  void* live[4] = {};
  REQUIRE(cudalloc_pool_allocations(pool, 0, live, 4, &count) == CUDALLOC_SUCCESS);
  REQUIRE(count == 2);
  CHECK(((live[0] == a && live[1] == b) || (live[0] == b && live[1] == a)));
  // The segments say which pool they belong to; pool memory is plain, never paged.
  const Segments s = read_segments();
  bool found = false;
  for (const auto& seg : s.segments) {
    const auto base = seg.address;
    if (reinterpret_cast<uintptr_t>(a) >= base && reinterpret_cast<uintptr_t>(a) < base + seg.size) {
      found = true;
      CHECK(seg.pool == pool);
      CHECK(seg.paged == 0);
      CHECK(seg.first_block + seg.block_count <= s.blocks.size());
    }
  }
  CHECK(found);
  // Plain memory carries an IPC handle; the offset is from the segment's base.
  unsigned char handle[CUDALLOC_IPC_HANDLE_BYTES];
  size_t offset = 99;
  REQUIRE(cudalloc_ipc_handle(b, handle, &offset) == CUDALLOC_SUCCESS);
  CHECK(std::memcmp(handle, "fake-ipc:", 9) == 0);
  void* base = nullptr;
  std::memcpy(&base, handle + 16, sizeof base);
  CHECK(static_cast<char*>(base) + offset == b);
  CHECK(cudalloc_deallocate(a, -1) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_deallocate(b, -1) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_pool_release(pool, 0) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_pool_release(pool, 0) == CUDALLOC_ERROR_INVALID_VALUE);
  void* c = nullptr;
  CHECK(cudalloc_allocate_in_pool(&c, 1000, 0, stream(5), pool) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(c == nullptr);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);
}

TEST_CASE("C API: paged memory has no IPC handle, and says why", "[capi]") {
  // A released private pool's plain segments join the shared pools (private_pools.cpp): with
  // the cache emptied first, the allocation below is paged whatever ran before in the process.
  REQUIRE(cudalloc_empty_cache(-1) == CUDALLOC_SUCCESS);
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, 4 << 20, 0, stream(0)) == CUDALLOC_SUCCESS);
  unsigned char handle[CUDALLOC_IPC_HANDLE_BYTES];
  size_t offset = 0;
  CHECK(cudalloc_ipc_handle(p, handle, &offset) == CUDALLOC_ERROR_NOT_SUPPORTED);
  CHECK(std::strstr(cudalloc_last_error_string(), "vmm:0") != nullptr);
  CHECK(cudalloc_ipc_handle(nullptr, handle, &offset) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_ipc_handle(p, nullptr, &offset) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
}

TEST_CASE("C API: paged memory is shared by its pages and opened again", "[capi][ipc]") {
  // A released private pool's plain segments join the shared pools (private_pools.cpp): with
  // the cache emptied first, the allocation below is paged whatever ran before in the process.
  REQUIRE(cudalloc_empty_cache(-1) == CUDALLOC_SUCCESS);
  constexpr size_t kBytes = 12 << 20;  // more than one page (8 MiB, the default page_size)
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, kBytes, 0, stream(0)) == CUDALLOC_SUCCESS);
  std::memset(p, 0x5a, kBytes);
  size_t page_size = 0, offset = 0, count = 0;
  REQUIRE(cudalloc_ipc_share_pages(p, &page_size, &offset, nullptr, 0, &count) ==
          CUDALLOC_SUCCESS);
  REQUIRE(count >= 2);
  std::vector<int> fds(count, -1);
  REQUIRE(cudalloc_ipc_share_pages(p, &page_size, &offset, fds.data(), fds.size(), &count) ==
          CUDALLOC_SUCCESS);
  CHECK(cudalloc_ipc_share_pages(p, nullptr, &offset, fds.data(), fds.size(), &count) ==
        CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_ipc_share_pages(p, &page_size, &offset, nullptr, 2, &count) ==
        CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_ipc_share_pages(nullptr, &page_size, &offset, fds.data(), 2, &count) ==
        CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  void* base = nullptr;
  const cudalloc_error_t opened =
      cudalloc_ipc_open_pages(getpid(), fds.data(), count, page_size, -1, &base);
  if (opened == CUDALLOC_SUCCESS) {
    CHECK(std::memcmp(static_cast<char*>(base) + offset, p, kBytes) == 0);
    CHECK(cudalloc_ipc_close_pages(base) == CUDALLOC_SUCCESS);
  } else {  // a kernel without pidfd_getfd: refused with a reason
    CHECK(std::strstr(cudalloc_last_error_string(), "pidfd") != nullptr);
  }
  CHECK(cudalloc_ipc_close_pages(base) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_ipc_close_pages(nullptr) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_ipc_open_pages(getpid(), fds.data(), count, page_size, -1, nullptr) ==
        CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_ipc_open_pages(getpid(), fds.data(), count, page_size, 7, &base) ==
        CUDALLOC_ERROR_INVALID_DEVICE);
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);
}

TEST_CASE("C API: largest free block, memory info and fraction", "[capi]") {
  size_t largest = 0, free_bytes = 0, total = 0;
  double fraction = 0;
  REQUIRE(cudalloc_memory_info(0, &free_bytes, &total) == CUDALLOC_SUCCESS);
  CHECK(total == size_t{1} << 30);
  REQUIRE(cudalloc_get_memory_fraction(0, &fraction) == CUDALLOC_SUCCESS);
  CHECK(fraction == 1.0);
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, 8 << 20, 0, stream(0)) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_largest_free_block(0, &largest) == CUDALLOC_SUCCESS);
  CHECK(largest >= size_t{8} << 20);  // its idle pages serve the freed block again
  CHECK(cudalloc_largest_free_block(0, nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_largest_free_block(7, &largest) == CUDALLOC_ERROR_INVALID_DEVICE);
}
