// A CUDA program (dynamically linked runtime) run under LD_PRELOAD=libcudalloc_preload.so with
// CUDALLOC_DEVICE=fake and CUDALLOC_CONF=limit:512M. It allocates, writes and frees through
// every path a program uses: the runtime API, dlsym on libcuda.so.1, cuGetProcAddress and
// cudaGetDriverEntryPoint. A stub libcuda.so.1 stands in for the driver.
//   preload_test serve     cudalloc serves everything
//   preload_test disabled  CUDALLOC_DISABLE=1: everything reaches the (stub) driver
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int failures = 0;

// CUDA used from static constructors and destructors: before main and after it returns.
struct StaticUser {
  void* early = nullptr;
  void* late = nullptr;
  StaticUser() { cudaMalloc(&early, 4096); }
  ~StaticUser() {
    // After main: a free of memory allocated before main and of memory allocated in main.
    if ((early != nullptr && cudaFree(early) != cudaSuccess) ||
        (late != nullptr && cudaFree(late) != cudaSuccess)) {
      _exit(5);
    }
  }
} g_static_user;

void check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  failures += ok ? 0 : 1;
}

bool writable(void* p, std::size_t n) {
  std::memset(p, 0x5a, n);
  return static_cast<unsigned char*>(p)[n - 1] == 0x5a;
}

// cudalloc's own C API, exported by the preload library.
struct Stat { long long current, peak, total; };
struct Stats { int count, device; Stat values[64]; };

long long cudalloc_stat(const char* name, bool total) {
  auto get = reinterpret_cast<int (*)(int, Stats*)>(dlsym(RTLD_DEFAULT, "cudalloc_get_stats"));
  auto names = reinterpret_cast<const char* (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_stat_name"));
  Stats s{};
  if (get == nullptr || names == nullptr || get(0, &s) != 0) return -1;
  for (int i = 0; i < s.count; ++i) {
    if (std::string(names(i)) == name) return total ? s.values[i].total : s.values[i].current;
  }
  return -1;
}

void runtime_paths() {
  void* p = nullptr;
  check(cudaMalloc(&p, 1000) == cudaSuccess && p != nullptr && writable(p, 1000), "cudaMalloc");
  check(cudaFree(p) == cudaSuccess, "cudaFree");
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  check(cudaMallocAsync(&p, 4096, nullptr) == cudaSuccess && writable(p, 4096), "cudaMallocAsync");
  check(cudaFreeAsync(p, nullptr) == cudaSuccess, "cudaFreeAsync");
  std::size_t pitch = 0;
  check(cudaMallocPitch(&p, &pitch, 1000, 10) == cudaSuccess && pitch == 1024 &&
            writable(p, pitch * 10), "cudaMallocPitch");
  cudaFree(p);
  std::size_t free_bytes = 0, total = 0;
  check(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && total == (512u << 20) &&
            free_bytes <= total, "cudaMemGetInfo reports the limit");
  void* big = nullptr;
  check(cudaMalloc(&big, 300u << 20) == cudaSuccess, "300 MiB under a 512 MiB limit");
  std::size_t free_after = 0;
  check(cudaMemGetInfo(&free_after, nullptr) == cudaSuccess &&
            free_after <= (512u << 20) - (300u << 20), "cudaMemGetInfo(NULL total) sees it");
  check(cudaMalloc(&p, 300u << 20) == cudaErrorMemoryAllocation, "past the limit: out of memory");
  cudaFree(big);
  check(cudaMalloc(&p, std::size_t(1) << 40) == cudaErrorMemoryAllocation, "1 TiB: out of memory");
  int on_host = 0;
  check(cudaFree(&on_host) != cudaSuccess, "a foreign pointer goes to the real cudaFree");
}

void driver_paths() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  check(lib != nullptr, "dlopen libcuda.so.1 (stub)");
  if (lib == nullptr) return;
  auto mem_alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(dlsym(lib, "cuMemAlloc_v2"));
  auto mem_free = reinterpret_cast<CUresult (*)(CUdeviceptr)>(dlsym(lib, "cuMemFree_v2"));
  CUdeviceptr d = 0;
  check(mem_alloc && mem_alloc(&d, 4096) == CUDA_SUCCESS &&
            writable(reinterpret_cast<void*>(d), 4096), "dlsym(libcuda, cuMemAlloc_v2)");
  check(mem_free && mem_free(d) == CUDA_SUCCESS, "dlsym(libcuda, cuMemFree_v2)");

  auto get_proc = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t,
                                                CUdriverProcAddressQueryResult*)>(
      dlsym(lib, "cuGetProcAddress_v2"));
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found{};
  check(get_proc && get_proc("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
            CUDA_SUCCESS && fn != nullptr, "cuGetProcAddress_v2(cuMemAlloc)");
  d = 0;
  check(fn && reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(fn)(&d, 8192) ==
            CUDA_SUCCESS && writable(reinterpret_cast<void*>(d), 8192),
        "cuMemAlloc through cuGetProcAddress");
  if (get_proc && get_proc("cuMemFree", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == 0) {
    check(reinterpret_cast<CUresult (*)(CUdeviceptr)>(fn)(d) == CUDA_SUCCESS,
          "cuMemFree through cuGetProcAddress");
  }
  std::size_t free_bytes = 0;
  if (get_proc && get_proc("cuMemGetInfo", &fn, 12000, 0, &found) == 0) {
    check(reinterpret_cast<CUresult (*)(std::size_t*, std::size_t*)>(fn)(&free_bytes, nullptr) ==
              CUDA_SUCCESS, "cuMemGetInfo with a NULL argument");
  }
}

void entry_point_paths() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &status) ==
            cudaSuccess && fn != nullptr, "cudaGetDriverEntryPointByVersion(cuMemAlloc)");
  CUdeviceptr d = 0;
  check(fn && reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(fn)(&d, 1 << 20) ==
            CUDA_SUCCESS && writable(reinterpret_cast<void*>(d), 1 << 20),
        "cuMemAlloc through cudaGetDriverEntryPoint");
  check(cudaFree(reinterpret_cast<void*>(d)) == cudaSuccess, "cudaFree of a driver allocation");
}

void fork_path() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = -1;
  waitpid(pid, &status, 0);
  void* p = nullptr;
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && cudaMalloc(&p, 64) == cudaSuccess &&
            cudaFree(p) == cudaSuccess, "fork: the child exits, the parent goes on");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "serve";
  if (mode == "disabled") {
    void* p = nullptr;
    check(cudaMalloc(&p, 1000) != cudaSuccess, "disabled: cudaMalloc reaches the real runtime");
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    auto mem_alloc = lib ? reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(
                               dlsym(lib, "cuMemAlloc_v2")) : nullptr;
    CUdeviceptr d = 0;
    check(mem_alloc && mem_alloc(&d, 64) == CUDA_ERROR_NO_DEVICE, "disabled: dlsym is the stub's");
    check(cudalloc_stat("allocated_count", true) == 0, "disabled: cudalloc served nothing");
  } else {
    check(g_static_user.early != nullptr, "cudaMalloc from a static constructor");
    check(cudaMalloc(&g_static_user.late, 512) == cudaSuccess, "memory for a static destructor");
    runtime_paths();
    driver_paths();
    entry_point_paths();
    fork_path();
    // Two for the static object, 1000 B, 4 KiB async, pitched, 300 MiB, two through
    // dlsym/cuGetProcAddress, one through cudaGetDriverEntryPoint and one after fork.
    check(cudalloc_stat("allocated_count", true) == 10, "cudalloc served the allocations");
    check(cudalloc_stat("allocated_count", false) == 2, "all but the static object's were freed");
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  }
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
