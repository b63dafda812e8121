// The C API through libcudalloc.so on a simulated device of 1 GiB (CUDALLOC_DEVICE=fake:1G).
#include <catch2/catch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include "cudalloc.h"

namespace {

int64_t stat(const char* name, int which = 0) {
  cudalloc_stats_t s;
  REQUIRE(cudalloc_get_stats(-1, &s) == CUDALLOC_SUCCESS);
  for (int i = 0; i < s.count; ++i) {
    if (std::string(cudalloc_stat_name(i)) == name) {
      return which == 0 ? s.values[i].current : which == 1 ? s.values[i].peak : s.values[i].total;
    }
  }
  FAIL("no stat " << name);
  return -1;
}

cudaStream_t stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

}  // namespace

TEST_CASE("allocate, write, free through the C API", "[capi]") {
  REQUIRE(cudalloc_device_count() == 1);
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, 1000, 0, stream(0)) == CUDALLOC_SUCCESS);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  std::memset(p, 0x5a, 1000);
  CHECK(stat("allocated_count") == 1);
  CHECK(cudalloc_record_stream(p, stream(9)) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);
  CHECK(stat("allocated_count") == 0);
}

TEST_CASE("the PyTorch entry points follow the pluggable ABI", "[capi][torch]") {
  cudalloc_torch_init(1);
  void* p = cudalloc_malloc(4 << 20, 0, stream(0));
  REQUIRE(p != nullptr);
  cudalloc_torch_record_stream(p, stream(3));
  cudalloc_free(p, 4 << 20, 0, stream(0));
  cudalloc_torch_memory_fraction(0.5, 0);
  // Over half of 1 GiB: PyTorch needs an exception, not NULL.
  try {
    cudalloc_malloc(size_t(600) << 20, 0, stream(0));
    FAIL("cudalloc_malloc returned instead of throwing");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate 600.00 MiB", 0) == 0);
    CHECK(std::string(e.what()).find("cap 512.00 MiB") != std::string::npos);
  }
  CHECK_THROWS_WITH(cudalloc_malloc(16, 7, stream(0)), Catch::Contains("cudaErrorInvalidValue"));
  cudalloc_torch_memory_fraction(1.0, 0);
  cudalloc_torch_reset();
  CHECK(stat("reserved_bytes") == 0);
}

TEST_CASE("errors come back as CUDA error codes with a message", "[capi][errors]") {
  int on_host = 0;
  CHECK(cudalloc_deallocate(&on_host, -1) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(std::string(cudalloc_last_error_string()).find("not a live allocation") !=
        std::string::npos);
  CHECK(cudalloc_deallocate(&on_host, 0) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_deallocate(nullptr, 0) == CUDALLOC_SUCCESS);
  void* p = &on_host;
  CHECK(cudalloc_allocate(&p, size_t(-1), 0, stream(0)) == CUDALLOC_ERROR_MEMORY_ALLOCATION);
  CHECK(p == nullptr);
  CHECK(cudalloc_allocate(nullptr, 16, 0, stream(0)) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_allocate(&p, 16, -5, stream(0)) == CUDALLOC_ERROR_INVALID_VALUE);  // only -1
  CHECK(p == nullptr);
  CHECK(cudalloc_set_memory_fraction(2.0, 0) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_get_stats(0, nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(std::string(cudalloc_error_name(CUDALLOC_ERROR_MEMORY_ALLOCATION)) ==
        "cudaErrorMemoryAllocation");
  CHECK(cudalloc_allocate(&p, 16, 5, stream(0)) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_allocate(&p, 0, 0, stream(0)) == CUDALLOC_SUCCESS);
  CHECK(p == nullptr);  // success leaves the last failure's message in place
  CHECK(std::string(cudalloc_last_error_string()).find("device 5") != std::string::npos);
}

TEST_CASE("limits and stats through the C API", "[capi][stats]") {
  REQUIRE(cudalloc_set_memory_limit(64 << 20, 0) == CUDALLOC_SUCCESS);
  void* p = nullptr;
  CHECK(cudalloc_allocate(&p, 100 << 20, 0, stream(0)) == CUDALLOC_ERROR_MEMORY_ALLOCATION);
  REQUIRE(cudalloc_set_memory_limit(0, 0) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_allocate(&p, 100 << 20, 0, stream(0)) == CUDALLOC_SUCCESS);
  CHECK(stat("allocated_bytes", 1) >= (100 << 20));
  REQUIRE(cudalloc_deallocate(p, 0) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_reset_peak_stats(0) == CUDALLOC_SUCCESS);
  CHECK(stat("allocated_bytes", 1) == stat("allocated_bytes"));
  CHECK(cudalloc_stat_count() <= CUDALLOC_MAX_STATS);
  CHECK(cudalloc_stat_name(cudalloc_stat_count()) == nullptr);
  CHECK(cudalloc_version() == 100);
  CHECK(std::string(cudalloc_version_string()) == "0.1.0");
}
