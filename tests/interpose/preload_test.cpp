// A CUDA program (dynamically linked runtime) run under LD_PRELOAD=libcudalloc_preload.so with
// CUDALLOC_DEVICE=fake and CUDALLOC_CONF=limit:512M. It allocates, writes and frees through
// every path a program uses: the runtime API, dlsym on libcuda.so.1, cuGetProcAddress and
// cudaGetDriverEntryPoint. A stub libcuda.so.1 stands in for the driver.
//   preload_test serve     cudalloc serves everything
//   preload_test disabled  CUDALLOC_DISABLE=1: everything reaches the (stub) driver
//   preload_test answers   NULL, 0, foreign and huge arguments get the answers CUDA gives on
//                          an H200, and failures are left for cudaGetLastError
//   preload_test fork      fork() while threads allocate: every child can allocate
//   preload_test oom PATH  two allocations past the limit fail (runtime and driver), and
//                          snapshot_on_oom wrote PATH and PATH with .2 before .json for them
//   preload_test ipc       CUDA IPC of paged memory through the runtime and the driver
//   preload_test hidden_runtime  a runtime linked into the program is noticed
//   preload_test regions   cudaMalloc inside a region of the preloaded C API: pause keeps or
//                          drops the bytes at the same address, resume brings them back
//   preload_test capture   stream-ordered calls on a stream being captured reach the driver
//                          (graph memory nodes); memory of cudalloc freed in a capture stays
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "capi/fork_while_allocating.h"
#include "capi/pidfd_probe.h"

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

// The answers CUDA gives on an H200 (recorded), on every path to each entry point.
// What the runtime's own last error is with nothing of cudalloc's pending: cudaSuccess on a
// GPU; with the stub driver the real runtime reports its failed initialisation every time.
cudaError_t g_quiet = cudaSuccess;

void null_and_bad_answers() {
  g_quiet = cudaGetLastError();
  void* p = &failures;
  check(cudaMalloc(&p, 0) == cudaSuccess && p == nullptr, "cudaMalloc(0): success, NULL");
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  check(cudaFreeAsync(nullptr, nullptr) == cudaSuccess, "cudaFreeAsync(NULL)");
  check(cudaMalloc(nullptr, 64) == cudaErrorInvalidValue, "cudaMalloc(NULL ptr)");
  check(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == g_quiet,
        "cudaMalloc(NULL ptr) is reported once by cudaGetLastError");

  check(cudaMalloc(&p, std::size_t(1) << 50) == cudaErrorMemoryAllocation && p == nullptr,
        "2^50 bytes: cudaErrorMemoryAllocation");
  check(cudaPeekAtLastError() == cudaErrorMemoryAllocation &&
            cudaPeekAtLastError() == cudaErrorMemoryAllocation,
        "cudaPeekAtLastError reports it and keeps it");
  check(cudaMalloc(&p, 64) == cudaSuccess && cudaFree(p) == cudaSuccess &&
            cudaGetLastError() == cudaErrorMemoryAllocation,
        "success does not clear it; cudaGetLastError returns it");
  check(cudaGetLastError() == g_quiet && cudaPeekAtLastError() == g_quiet,
        "cudaGetLastError cleared it");

  int on_stack = 0;
  void* on_heap = std::malloc(64);
  void* live = nullptr;
  cudaMalloc(&live, 4096);
  void* freed = nullptr;
  cudaMalloc(&freed, 4096);
  cudaFree(freed);
  const struct { const char* what; void* ptr; } foreign[] = {
      {"cudaFree(interior pointer)", static_cast<char*>(live) + 256},
      {"cudaFree(double free)", freed},
      {"cudaFree(stack pointer)", &on_stack},
      {"cudaFree(malloc pointer)", on_heap}};
  for (const auto& f : foreign) {
    check(cudaFree(f.ptr) == cudaErrorInvalidValue && cudaGetLastError() == cudaErrorInvalidValue,
          f.what);
  }
  check(cudaFreeAsync(&on_stack, nullptr) == cudaErrorInvalidValue, "cudaFreeAsync(stack)");
  check(cudaGetLastError() == cudaErrorInvalidValue, "and cudaGetLastError says so");
  check(cudaFree(live) == cudaSuccess, "the live allocation is still live");
  std::free(on_heap);

  std::size_t pitch = 0;
  p = &failures;
  check(cudaMallocPitch(&p, &pitch, SIZE_MAX, 1) == cudaErrorInvalidValue && p == nullptr,
        "cudaMallocPitch(width SIZE_MAX)");
  check(cudaMallocPitch(&p, &pitch, SIZE_MAX / 4, 8) == cudaErrorInvalidValue,
        "cudaMallocPitch(width * height overflows)");
  check(cudaGetLastError() == cudaErrorInvalidValue, "cudaMallocPitch's error is the last");
  check(cudaMallocPitch(&p, nullptr, 64, 1) == cudaErrorInvalidValue, "cudaMallocPitch(NULL pitch)");
  pitch = 7;
  p = &failures;
  check(cudaMallocPitch(&p, &pitch, 1000, 0) == cudaSuccess && p == nullptr && pitch == 0 &&
            cudaMallocPitch(&p, &pitch, 0, 5) == cudaSuccess && p == nullptr && pitch == 0,
        "cudaMallocPitch of an empty area: success, NULL, pitch 0");
  cudaGetLastError();
}

// Driver entry points by every door: dlsym on libcuda, cuGetProcAddress (plain and
// per-thread), cudaGetDriverEntryPoint.
template <typename Fn>
Fn driver_fn(const char* exported, const char* base, int door) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (door == 0) return lib ? reinterpret_cast<Fn>(dlsym(lib, exported)) : nullptr;
  void* fn = nullptr;
  if (door == 3) {
    cudaDriverEntryPointQueryResult status{};
    cudaGetDriverEntryPointByVersion(base, &fn, 12000, cudaEnableDefault, &status);
    return reinterpret_cast<Fn>(fn);
  }
  auto get_proc = lib ? reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t,
                                                      CUdriverProcAddressQueryResult*)>(
                            dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  CUdriverProcAddressQueryResult found{};
  const cuuint64_t flags = door == 2 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
  if (get_proc) get_proc(base, &fn, 12000, flags, &found);
  return reinterpret_cast<Fn>(fn);
}

void driver_null_and_bad_answers() {
  const char* doors[] = {"dlsym", "cuGetProcAddress", "cuGetProcAddress per-thread",
                         "cudaGetDriverEntryPoint"};
  for (int door = 0; door < 4; ++door) {
    const std::string by = std::string(" via ") + doors[door];
    using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
    auto free_async = driver_fn<FreeAsync>("cuMemFreeAsync", "cuMemFreeAsync", door);
    check(free_async && free_async(0, nullptr) == CUDA_SUCCESS, ("cuMemFreeAsync(0)" + by).c_str());
    auto free_ptsz = driver_fn<FreeAsync>("cuMemFreeAsync_ptsz", "cuMemFreeAsync", 2);
    check(free_ptsz && free_ptsz(0, nullptr) == CUDA_SUCCESS, "cuMemFreeAsync_ptsz(0)");
    auto mem_free = driver_fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2", "cuMemFree", door);
    check(mem_free && mem_free(0) == CUDA_SUCCESS, ("cuMemFree(0)" + by).c_str());
    int on_stack = 0;
    check(mem_free && mem_free(reinterpret_cast<CUdeviceptr>(&on_stack)) == CUDA_ERROR_INVALID_VALUE,
          ("cuMemFree(stack pointer)" + by).c_str());
    auto alloc = driver_fn<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2", "cuMemAlloc", door);
    check(alloc && alloc(nullptr, 64) == CUDA_ERROR_INVALID_VALUE, ("cuMemAlloc(NULL)" + by).c_str());
    CUdeviceptr d = 0;
    check(alloc && alloc(&d, 0) == CUDA_ERROR_INVALID_VALUE, ("cuMemAlloc(0 bytes)" + by).c_str());
    auto alloc_async = driver_fn<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(
        "cuMemAllocAsync", "cuMemAllocAsync", door);
    check(alloc_async && alloc_async(nullptr, 64, nullptr) == CUDA_ERROR_INVALID_VALUE,
          ("cuMemAllocAsync(NULL)" + by).c_str());
    auto pitch_alloc = driver_fn<CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t,
                                              std::size_t, unsigned)>(
        "cuMemAllocPitch_v2", "cuMemAllocPitch", door);
    std::size_t pitch = 0;
    check(pitch_alloc && pitch_alloc(&d, &pitch, SIZE_MAX, 1, 4) == CUDA_ERROR_INVALID_VALUE &&
              pitch_alloc(&d, &pitch, SIZE_MAX / 4, 8, 4) == CUDA_ERROR_INVALID_VALUE &&
              pitch_alloc(nullptr, &pitch, 64, 1, 4) == CUDA_ERROR_INVALID_VALUE &&
              pitch_alloc(&d, nullptr, 64, 1, 4) == CUDA_ERROR_INVALID_VALUE &&
              pitch_alloc(&d, &pitch, 0, 1, 4) == CUDA_ERROR_INVALID_VALUE &&
              pitch_alloc(&d, &pitch, 64, 0, 4) == CUDA_ERROR_INVALID_VALUE,
          ("cuMemAllocPitch overflow and NULL" + by).c_str());
  }
  check(cudaGetLastError() == g_quiet, "driver failures are not the runtime's last error");
}

template <typename GetProc>
void capture_and_fences(GetProc get);

// The stub driver reports this stream as capturing and answers 801 to allocations on it.
CUstream const kCapturing = reinterpret_cast<CUstream>(0xca97);
constexpr int kStubGraphNode = 801;

void capture_paths() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto get = lib ? reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t,
                                                  CUdriverProcAddressQueryResult*)>(
                       dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  void* fn = nullptr;
  check(get && get("cuMemAllocAsync", &fn, 12000, 0, nullptr) == CUDA_SUCCESS && fn,
        "capture: cuMemAllocAsync through cuGetProcAddress");
  auto alloc_async = reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(fn);
  get("cuMemFreeAsync", &fn, 12000, 0, nullptr);
  auto free_async = reinterpret_cast<CUresult (*)(CUdeviceptr, CUstream)>(fn);
  const long long before = cudalloc_stat("allocated_count", true);
  CUdeviceptr d = 0;
  check(alloc_async && static_cast<int>(alloc_async(&d, 4096, kCapturing)) == kStubGraphNode,
        "capture: an allocation on a capturing stream goes to the driver (a graph node)");
  check(cudalloc_stat("allocated_count", true) == before, "capture: cudalloc served nothing");
  // Memory of cudalloc, allocated before the capture, freed inside it: kept.
  CUdeviceptr mine = 0;
  const long long live = cudalloc_stat("allocated_count", false);
  check(alloc_async(&mine, 4096, nullptr) == CUDA_SUCCESS && mine != 0,
        "capture: an allocation outside the capture is cudalloc's");
  check(free_async && free_async(mine, kCapturing) == CUDA_SUCCESS,
        "capture: freeing cudalloc's memory in a capture succeeds");
  check(cudalloc_stat("allocated_count", false) == live + 1,
        "capture: and the memory stays allocated (the graph may use it at every replay)");
  check(static_cast<int>(free_async(0x1234000, kCapturing)) == kStubGraphNode,
        "capture: a free of foreign memory in a capture goes to the driver");
  CUdeviceptr other = 0;
  check(alloc_async(&other, 4096, nullptr) == CUDA_SUCCESS && other != mine,
        "capture: the kept memory is not handed out again");
  check(free_async(other, nullptr) == CUDA_SUCCESS, "capture: ordinary free afterwards");
  capture_and_fences(get);
}

// While a capture is underway nothing fences device-ordered frees (a fence would end the
// capture); after it ends the next allocation that needs the memory fences as usual.
template <typename GetProc>
void capture_and_fences(GetProc get) {
  auto proc = [&](const char* name) {
    void* fn = nullptr;
    return get(name, &fn, 12000, 0, nullptr) == CUDA_SUCCESS ? fn : nullptr;
  };
  auto stream_create = reinterpret_cast<CUresult (*)(CUstream*, unsigned)>(proc("cuStreamCreate"));
  auto begin = reinterpret_cast<CUresult (*)(CUstream, int)>(proc("cuStreamBeginCapture"));
  auto end = reinterpret_cast<CUresult (*)(CUstream, void**)>(proc("cuStreamEndCapture"));
  auto mem_alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(proc("cuMemAlloc"));
  auto mem_free = reinterpret_cast<CUresult (*)(CUdeviceptr)>(proc("cuMemFree"));
  CUstream created = nullptr;
  check(stream_create && begin && end && mem_alloc && mem_free &&
            stream_create(&created, 0) == CUDA_SUCCESS,
        "capture: stream and capture entry points through cuGetProcAddress");
  constexpr std::size_t kBig = std::size_t{64} << 20;
  CUdeviceptr a = 0, b = 0, c = 0;
  check(mem_alloc(&a, kBig) == CUDA_SUCCESS, "capture: cuMemAlloc");
  check(mem_free(a) == CUDA_SUCCESS, "capture: cuMemFree (device-ordered)");
  const long long fences = cudalloc_stat("fences", true);
  check(begin(created, 0) == CUDA_SUCCESS, "capture: cuStreamBeginCapture");
  check(mem_alloc(&b, kBig) == CUDA_SUCCESS && b != a,
        "capture: during a capture the freed memory waits (new memory instead)");
  check(cudalloc_stat("fences", true) == fences, "capture: no fence while a capture is underway");
  void* graph = nullptr;
  check(end(created, &graph) == CUDA_SUCCESS, "capture: cuStreamEndCapture");
  check(mem_free(b) == CUDA_SUCCESS, "capture: free after the capture");
  check(mem_alloc(&c, kBig) == CUDA_SUCCESS && cudalloc_stat("fences", true) > fences,
        "capture: after it, the next allocation fences and reuses");
  // A capture into an existing graph is counted the same way.
  auto begin_to_graph = reinterpret_cast<CUresult (*)(CUstream, void*, const void*, const void*,
                                                      std::size_t, int)>(
      proc("cuStreamBeginCaptureToGraph"));
  check(begin_to_graph && begin_to_graph(created, reinterpret_cast<void*>(0x6000), nullptr,
                                         nullptr, 0, 0) == CUDA_SUCCESS,
        "capture: cuStreamBeginCaptureToGraph through cuGetProcAddress");
  const long long fences_to_graph = cudalloc_stat("fences", true);
  CUdeviceptr d = 0, e = 0;
  check(mem_free(c) == CUDA_SUCCESS && mem_alloc(&d, kBig) == CUDA_SUCCESS && d != c &&
            cudalloc_stat("fences", true) == fences_to_graph,
        "capture: no fence while a capture into a graph is underway");
  check(end(created, &graph) == CUDA_SUCCESS, "capture: cuStreamEndCapture of it");
  check(mem_free(d) == CUDA_SUCCESS && mem_alloc(&e, kBig) == CUDA_SUCCESS &&
            cudalloc_stat("fences", true) > fences_to_graph,
        "capture: after it ends, fences again");
  mem_free(e);
}

// A CUDA runtime linked into this program shows itself by looking up the driver's private
// interface: from then on device-ordered frees wait for a device synchronization (past the
// slack) instead of being reusable at once behind an event on the legacy stream.
void hidden_runtime() {
  constexpr std::size_t kSize = std::size_t{8} << 20;  // below the slack
  void* p = nullptr;
  void* q = nullptr;
  check(cudaMalloc(&p, kSize) == cudaSuccess && cudaFree(p) == cudaSuccess &&
            cudaMalloc(&q, kSize) == cudaSuccess && q == p,
        "hidden runtime: before it, a freed block is reused at once");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  check(lib != nullptr && dlsym(lib, "cuGetExportTable") != nullptr,
        "hidden runtime: the private interface is looked up from the program");
  void* r = nullptr;
  check(cudaFree(q) == cudaSuccess && cudaMalloc(&r, kSize) == cudaSuccess && r != q,
        "hidden runtime: after it, the freed block waits (new memory below the slack)");
  cudaFree(r);
}

// CUDA IPC of cudalloc's paged memory, exported and opened in this one process (what the
// simulated device can share): the runtime's and the driver's doors.
int ipc_paths() {
  if (!cudalloc::testing::pidfd_available()) {
    std::printf("SKIP: pidfd_getfd is not available\n");
    return 77;
  }
  constexpr std::size_t kSize = std::size_t{5} << 20;
  void* p = nullptr;
  check(cudaMalloc(&p, kSize) == cudaSuccess, "ipc: cudaMalloc");
  std::memset(p, 0x3c, kSize);  // simulated device memory is host memory
  cudaIpcMemHandle_t h{};
  check(cudaIpcGetMemHandle(&h, p) == cudaSuccess, "ipc: cudaIpcGetMemHandle of cudalloc's memory");
  check(std::memcmp(h.reserved, "cudalloc", 8) == 0, "ipc: the handle is cudalloc's");
  void* q = nullptr;
  check(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess && q != nullptr &&
            q != p,
        "ipc: cudaIpcOpenMemHandle maps it at another address");
  check(q != nullptr && std::memcmp(q, p, kSize) == 0, "ipc: with the same bytes");
  void* again = nullptr;
  check(cudaIpcOpenMemHandle(&again, h, 0) == cudaSuccess && again == q,
        "ipc: opened twice, the same address");
  if (q != nullptr) std::memset(q, 0x7e, 4096);
  check(static_cast<unsigned char*>(p)[4095] == 0x7e, "ipc: writes through it reach the owner");
  check(cudaIpcCloseMemHandle(q) == cudaSuccess && cudaIpcCloseMemHandle(q) == cudaSuccess,
        "ipc: each open is closed");
  // The driver's door, as a statically linked runtime takes it.
  auto get = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t,
                                           CUdriverProcAddressQueryResult*)>(
      dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"));
  auto proc = [&](const char* name) {
    void* fn = nullptr;
    return get && get(name, &fn, 12000, 0, nullptr) == CUDA_SUCCESS ? fn : nullptr;
  };
  auto get_handle = reinterpret_cast<CUresult (*)(CUipcMemHandle*, CUdeviceptr)>(
      proc("cuIpcGetMemHandle"));
  auto open_handle = reinterpret_cast<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>(
      proc("cuIpcOpenMemHandle"));
  auto close_handle = reinterpret_cast<CUresult (*)(CUdeviceptr)>(proc("cuIpcCloseMemHandle"));
  CUipcMemHandle dh{};
  CUdeviceptr dq = 0;
  check(get_handle && open_handle && close_handle &&
            get_handle(&dh, reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
            open_handle(&dq, dh, 0) == CUDA_SUCCESS &&
            std::memcmp(reinterpret_cast<void*>(dq), p, kSize) == 0 &&
            close_handle(dq) == CUDA_SUCCESS,
        "ipc: the driver's doors export, open and close");
  check(cudaFree(p) == cudaSuccess, "ipc: free the shared memory");
  void* stale = nullptr;
  check(cudaIpcOpenMemHandle(&stale, h, 0) != cudaSuccess && stale == nullptr,
        "ipc: a handle of freed memory does not open");
  (void)cudaGetLastError();
  return 0;
}

template <typename F>
F preloaded(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

// Beneath a program's own allocator (what PyTorch's caching allocator does under LD_PRELOAD):
// the segments it takes with cudaMalloc inside a region sleep and wake with it.
void region_paths() {
  auto begin = preloaded<int (*)(const char*)>("cudalloc_region_begin");
  auto end = preloaded<int (*)()>("cudalloc_region_end");
  auto pause = preloaded<int (*)(const char*, int)>("cudalloc_pause");
  auto resume = preloaded<int (*)(const char*)>("cudalloc_resume");
  auto prepare = preloaded<int (*)(const char*)>("cudalloc_prepare_pause");
  auto residency =
      preloaded<int (*)(const char*, std::size_t*, std::size_t*)>("cudalloc_region_residency");
  if (!begin || !end || !pause || !resume || !prepare || !residency) {
    check(false, "regions: the preload library exports the region calls");
    return;
  }
  const std::size_t n = 20u << 20;
  void* weights = nullptr;
  void* cache = nullptr;
  void* outside = nullptr;
  check(begin("weights") == 0 && cudaMalloc(&weights, n) == cudaSuccess && end() == 0,
        "regions: cudaMalloc inside region weights");
  check(begin("cache") == 0 && cudaMalloc(&cache, n) == cudaSuccess && end() == 0,
        "regions: cudaMalloc inside region cache");
  check(cudaMalloc(&outside, n) == cudaSuccess, "regions: cudaMalloc outside");
  std::memset(weights, 0x11, n);
  std::memset(cache, 0x22, n);
  std::memset(outside, 0x33, n);
  std::size_t dev = 0, host = 0;
  check(prepare("weights") == 0 && residency("weights", &dev, &host) == 0 && dev >= n &&
            host == 0, "regions: prepare_pause pins host memory and moves nothing");
  check(pause("weights", 1) == 0 && residency("weights", &dev, &host) == 0 && dev == 0 &&
            host >= n, "regions: paused with keep, the bytes are on the host");
  check(static_cast<unsigned char*>(weights)[n - 1] == 0x11, "regions: readable while paused");
  check(pause("cache", 0) == 0 && residency("cache", &dev, &host) == 0 && dev == 0 && host == 0,
        "regions: paused without keep, nothing is resident");
  check(static_cast<unsigned char*>(outside)[n / 2] == 0x33, "regions: other memory untouched");
  check(resume("weights") == 0 && resume("cache") == 0, "regions: resume");
  check(static_cast<unsigned char*>(weights)[0] == 0x11 &&
            static_cast<unsigned char*>(weights)[n - 1] == 0x11,
        "regions: kept bytes back at the same address");
  check(static_cast<unsigned char*>(cache)[0] == 0 && static_cast<unsigned char*>(cache)[n - 1] == 0,
        "regions: dropped memory comes back zeroed");
  check(pause("never-used", 1) != 0, "regions: an unknown tag is an error");
  check(cudaFree(weights) == cudaSuccess && cudaFree(cache) == cudaSuccess &&
            cudaFree(outside) == cudaSuccess, "regions: frees");
}

// The request recorded in the snapshot at `path` ("oom" in its cudalloc section).
nlohmann::json recorded_request(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (!doc.is_object() || !doc.contains("cudalloc")) return {};
  return doc["cudalloc"].value("oom", nlohmann::json());
}

// Two allocations past the limit, through the runtime and through the driver: snapshot_on_oom
// writes PATH (ending in .json) for the first and PATH with .2 before .json for the second,
// each recording its request.
void oom_snapshots(const std::string& path) {
  const std::string second = path.substr(0, path.size() - 5) + ".2.json";
  std::remove(path.c_str());
  std::remove(second.c_str());
  void* p = nullptr;
  check(cudaMalloc(&p, std::size_t{1} << 30) == cudaErrorMemoryAllocation,
        "oom: an allocation past the limit fails");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto mem_alloc = lib ? reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(
                             dlsym(lib, "cuMemAlloc_v2")) : nullptr;
  CUdeviceptr d = 0;
  check(mem_alloc && mem_alloc(&d, std::size_t{768} << 20) == CUDA_ERROR_OUT_OF_MEMORY,
        "oom: a driver allocation past the limit fails");
  const nlohmann::json first = recorded_request(path);
  check(first.is_object() && first.value("sequence", 0) == 1 &&
            first.value("size", std::size_t{0}) == std::size_t{1} << 30,
        "oom: snapshot_on_oom wrote the first snapshot, with its request, under LD_PRELOAD");
  const nlohmann::json next = recorded_request(second);
  check(next.is_object() && next.value("sequence", 0) == 2 &&
            next.value("size", std::size_t{0}) == std::size_t{768} << 20,
        "oom: the second error wrote a second file, with its own request");
  std::remove(path.c_str());
  std::remove(second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "serve";
  if (mode == "answers") {
    null_and_bad_answers();
    driver_null_and_bad_answers();
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  } else if (mode == "fork") {
    const int failed = cudalloc::testing::fork_while_allocating(
        30, [](void** p, std::size_t n) { return cudaMalloc(p, n) == cudaSuccess; },
        [](void* p) { return cudaFree(p) == cudaSuccess; });
    check(failed == 0, "every child forked while threads allocate can allocate");
  } else if (mode == "oom" && argc > 2) {
    oom_snapshots(argv[2]);
  } else if (mode == "hidden_runtime") {
    hidden_runtime();
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  } else if (mode == "ipc") {
    if (ipc_paths() == 77) return 77;
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  } else if (mode == "regions") {
    region_paths();
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  } else if (mode == "capture") {
    capture_paths();
    auto validate = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cudalloc_validate"));
    check(validate && validate(-1) == 0, "invariants hold");
  } else if (mode == "disabled") {
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
