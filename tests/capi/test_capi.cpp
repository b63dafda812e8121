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
  CHECK_THROWS_WITH(cudalloc_malloc(16, 7, stream(0)), Catch::Contains("cudaErrorInvalidDevice"));
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
  CHECK(cudalloc_allocate(&p, 16, -5, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE);  // only -1
  CHECK(p == nullptr);
  CHECK(cudalloc_set_memory_fraction(2.0, 0) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_get_stats(0, nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(std::string(cudalloc_error_name(CUDALLOC_ERROR_MEMORY_ALLOCATION)) ==
        "cudaErrorMemoryAllocation");
  CHECK(cudalloc_allocate(&p, 16, 5, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE);
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

TEST_CASE("every pointer-taking entry point answers NULL as CUDA and PyTorch do", "[capi][null]") {
  size_t on_device = 1, on_host = 1;
  // A zero-element tensor's record_stream (PyTorch passes its NULL data pointer).
  CHECK(cudalloc_record_stream(nullptr, stream(3)) == CUDALLOC_SUCCESS);
  cudalloc_torch_record_stream(nullptr, stream(3));
  CHECK(cudalloc_deallocate(nullptr, -1) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_deallocate(nullptr, 0) == CUDALLOC_SUCCESS);
  cudalloc_free(nullptr, 0, 0, stream(0));
  CHECK(cudalloc_malloc(0, 0, stream(0)) == nullptr);  // size 0: NULL, no exception
  CHECK(cudalloc_offload(nullptr, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_prefetch(nullptr, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_residency(nullptr, &on_device, &on_host) ==
        CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_residency(nullptr, nullptr, &on_host) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_allocate(nullptr, 16, -1, stream(0)) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_get_stats(-1, nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_snapshot(nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(cudalloc_snapshot_json(nullptr, 0, nullptr) == CUDALLOC_ERROR_INVALID_VALUE);
  size_t length = 0;
  CHECK(cudalloc_snapshot_json(nullptr, 0, &length) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(length > 0);
  CHECK(cudalloc_error_name(static_cast<cudalloc_error_t>(12345)) != nullptr);
  CHECK(cudalloc_stat_name(-1) == nullptr);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);

  // With live allocations around, NULL still matches none of them (it once matched an empty
  // slot of the live map and crashed).
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, 4096, 0, stream(0)) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_record_stream(nullptr, stream(5)) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_offload(nullptr, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_residency(nullptr, &on_device, &on_host) ==
        CUDALLOC_ERROR_INVALID_DEVICE_POINTER);
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_validate(-1) == CUDALLOC_SUCCESS);
}

TEST_CASE("every device-taking entry point refuses a bad device alike", "[capi][device]") {
  // -1 is the current device (or all); -2, -5, INT_MIN and 1 (of 1 device) are no device.
  for (const int bad : {-2, -5, -2147483647 - 1, 1, 64, 2147483647}) {
    INFO("device " << bad);
    void* p = reinterpret_cast<void*>(0x1);
    cudalloc_stats_t stats;
    CHECK(cudalloc_allocate(&p, 16, bad, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(p == nullptr);
    CHECK(cudalloc_allocate(nullptr, 16, bad, stream(0)) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(std::string(cudalloc_last_error_string()).find("does not exist") != std::string::npos);
    CHECK(cudalloc_deallocate(nullptr, bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_empty_cache(bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_promote(bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_validate(bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_set_memory_fraction(0.5, bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_set_memory_limit(1 << 20, bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_get_stats(bad, &stats) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_get_stats(bad, nullptr) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK(cudalloc_reset_peak_stats(bad) == CUDALLOC_ERROR_INVALID_DEVICE);
    CHECK_THROWS_WITH(cudalloc_malloc(16, bad, stream(0)), Catch::Contains("cudaErrorInvalidDevice"));
  }
  // A live allocation freed naming a bad device stays live.
  void* p = nullptr;
  REQUIRE(cudalloc_allocate(&p, 4096, -1, stream(0)) == CUDALLOC_SUCCESS);
  CHECK(cudalloc_deallocate(p, -3) == CUDALLOC_ERROR_INVALID_DEVICE);
  CHECK(stat("allocated_count") == 1);
  CHECK(cudalloc_deallocate(p, -1) == CUDALLOC_SUCCESS);
  for (const int good : {-1, 0}) {
    CHECK(cudalloc_empty_cache(good) == CUDALLOC_SUCCESS);
    CHECK(cudalloc_promote(good) == CUDALLOC_SUCCESS);
    CHECK(cudalloc_validate(good) == CUDALLOC_SUCCESS);
    CHECK(cudalloc_reset_peak_stats(good) == CUDALLOC_SUCCESS);
  }
}
