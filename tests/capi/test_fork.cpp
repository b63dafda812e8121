// fork() while other threads allocate, through libcudalloc.so itself (a program using the C
// API or PyTorch without the preload library): the shared library registers the fork
// handlers, so every child can allocate.
#include <catch2/catch.hpp>

#include "cudalloc.h"
#include "fork_while_allocating.h"

TEST_CASE("children forked while threads allocate can allocate", "[capi][fork]") {
  const int failed = cudalloc::testing::fork_while_allocating(
      30,
      [](void** p, size_t n) { return cudalloc_allocate(p, n, -1, nullptr) == CUDALLOC_SUCCESS; },
      [](void* p) { return cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS; });
  CHECK(failed == 0);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);
}

TEST_CASE("a child's writes and frees never change the parent's memory", "[capi][fork]") {
  void* p = nullptr;
  const size_t n = size_t(4) << 20;  // pages of their own (vmm)
  REQUIRE(cudalloc_allocate(&p, n, 0, nullptr) == CUDALLOC_SUCCESS);
  std::memset(p, 7, n);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::memset(p, 9, n);
    const bool ok = cudalloc_deallocate(p, 0) == CUDALLOC_SUCCESS &&
                    cudalloc_empty_cache(-1) == CUDALLOC_SUCCESS;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const auto* bytes = static_cast<const unsigned char*>(p);
  CHECK(bytes[0] == 7);
  CHECK(bytes[n / 2] == 7);
  CHECK(bytes[n - 1] == 7);
  CHECK(cudalloc_deallocate(p, 0) == CUDALLOC_SUCCESS);
}
