// Fuzz target: the preload library's CUDA entry points on a simulated 256 MiB device.
//
// Each input decodes (byte_stream.h) to up to kMaxSteps calls of the runtime entry points
// (cudaMalloc, cudaFree, the async and per-thread flavours, cudaMallocPitch, cudaMemGetInfo,
// cudaGetLastError, cudaPeekAtLastError) and the driver entry points (cuMemAlloc, cuMemFree,
// cuMemAllocAsync, cuMemFreeAsync, cuMemAllocPitch, cuMemGetInfo), each driver one reached by
// one of its doors: dlsym, cuGetProcAddress (v2 and the four-parameter one, plain and
// per-thread), cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion. Arguments come
// from pointer_choice.h: NULL, live, freed, interior, host, heap and wild pointers, sizes from
// 0 to SIZE_MAX, pitches whose size wraps, bad element sizes.
//
// Every call must give CUDA's answer as recorded on an H200 (freeing NULL succeeds, a pointer
// that is not a live allocation is invalid value, too much memory is out of memory, a wrapped
// pitch is invalid value, cuMemAlloc of 0 bytes and cuMemAllocPitch of an empty area are
// invalid value while cudaMallocPitch of one is success with NULL and pitch 0), runtime failures must be
// reported by cudaPeekAtLastError and once by cudaGetLastError, and after each call
// cudalloc_validate(-1) holds and the allocated count is the model's. There is no CUDA
// runtime or driver. The library is opened with dlopen (RTLD_LOCAL) rather than linked or
// preloaded: its dlsym would otherwise serve the sanitizer runtime's own lookups, which run
// before any instrumented code may (the dlsym door calls the library's dlsym directly).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "allocator/api/cudalloc.h"
#include "pointer_choice.h"

namespace cudalloc::fuzz {
namespace {

constexpr std::size_t kMaxSteps = 200;
constexpr std::size_t kPitch = 512;

using GetProcV2 = int (*)(const char*, void**, int, std::uint64_t, int*);
using GetProc = int (*)(const char*, void**, int, std::uint64_t);
using EntryPoint = int (*)(const char*, void**, unsigned long long, int*);
using EntryPointByVersion = int (*)(const char*, void**, unsigned, unsigned long long, int*);

void* library() {
  static void* handle = dlopen(CUDALLOC_PRELOAD_PATH, RTLD_NOW | RTLD_LOCAL);
  return handle;
}

// The library's definition of `name` (the C library's dlsym, on the library's handle).
void* symbol(const char* name) {
  void* fn = dlsym(library(), name);
  if (fn == nullptr) probe_violation("fuzz_preload", name, -1);
  return fn;
}

// The entry points called directly, as a program linked against the runtime calls them. The
// types are the library's own (int results: cudaError_t and CUresult values), which UBSan's
// function-type check insists on.
struct Api {
#define CUDALLOC_API(name, type) \
  std::type_identity_t<type> name = reinterpret_cast<type>(symbol(#name));
  CUDALLOC_API(cudaMalloc, int (*)(void**, std::size_t))
  CUDALLOC_API(cudaFree, int (*)(void*))
  CUDALLOC_API(cudaMallocAsync, int (*)(void**, std::size_t, void*))
  CUDALLOC_API(cudaFreeAsync, int (*)(void*, void*))
  CUDALLOC_API(cudaMallocAsync_ptsz, int (*)(void**, std::size_t, void*))
  CUDALLOC_API(cudaFreeAsync_ptsz, int (*)(void*, void*))
  CUDALLOC_API(cudaMallocPitch, int (*)(void**, std::size_t*, std::size_t, std::size_t))
  CUDALLOC_API(cudaMemGetInfo, int (*)(std::size_t*, std::size_t*))
  CUDALLOC_API(cudaGetLastError, int (*)())
  CUDALLOC_API(cudaPeekAtLastError, int (*)())
  CUDALLOC_API(cudalloc_validate, decltype(&::cudalloc_validate))
  CUDALLOC_API(cudalloc_get_stats, decltype(&::cudalloc_get_stats))
  CUDALLOC_API(cudalloc_stat_name, decltype(&::cudalloc_stat_name))
  CUDALLOC_API(cudalloc_empty_cache, decltype(&::cudalloc_empty_cache))
  CUDALLOC_API(dlsym, void* (*)(void*, const char*))
#undef CUDALLOC_API
};

const Api& api() {
  static const Api loaded;
  return loaded;
}

// A driver entry point by door `door` (0-4); nullptr if that door does not hand it out.
void* driver_entry(const char* base, const char* exported, const char* per_thread, int door,
                   bool ptsz) {
  void* fn = nullptr;
  int status = 0;
  const std::uint64_t flags = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
  switch (door) {
    case 0: return api().dlsym(library(), ptsz && per_thread != nullptr ? per_thread : exported);
    case 1: reinterpret_cast<GetProcV2>(symbol("cuGetProcAddress_v2"))(base, &fn, 12000, flags, &status); break;
    case 2: reinterpret_cast<GetProc>(symbol("cuGetProcAddress"))(base, &fn, 11000, flags); break;
    case 3: reinterpret_cast<EntryPoint>(symbol("cudaGetDriverEntryPoint"))(base, &fn, flags, &status); break;
    default:
      reinterpret_cast<EntryPointByVersion>(symbol("cudaGetDriverEntryPointByVersion"))(
          base, &fn, 12000, flags, &status);
  }
  return fn;
}

int64_t allocated_count() {
  cudalloc_stats_t s;
  if (api().cudalloc_get_stats(-1, &s) != CUDALLOC_SUCCESS) return -1;
  for (int i = 0; i < s.count; ++i) {
    if (std::string(api().cudalloc_stat_name(i)) == "allocated_count") return s.values[i].current;
  }
  return -1;
}

class PreloadProbe {
 public:
  explicit PreloadProbe(ByteStream& in) : in_(in) {}

  void run() {
    for (step_ = 0; step_ < long(kMaxSteps) && !in_.done(); ++step_) {
      if (in_.below(2) == 0) {
        runtime_call();
      } else {
        driver_call();
      }
      expect(api().cudalloc_validate(-1) == CUDALLOC_SUCCESS, "validate after the call");
      expect(allocated_count() == int64_t(pointers_.live().size()), "allocated count");
    }
    clean_up();
  }

 private:
  void expect(bool ok, const char* what) {
    if (!ok) probe_violation("fuzz_preload", what, step_);
  }

  void* pick_stream() {
    static const std::uintptr_t kStreams[] = {0, 0x1, 0x2, 0x100};
    return reinterpret_cast<void*>(kStreams[in_.below(4)]);
  }

  // A runtime result: it is also what cudaGetLastError reports next, if it is an error.
  int runtime(int result) {
    if (result != cudaSuccess) pending_ = result;
    return result;
  }

  // The answer to an allocation of `size` that returned `result` and `ptr`.
  void allocated(int result, void* ptr, std::size_t size, bool zero_is_invalid) {
    if (size == 0) {
      return expect(zero_is_invalid ? result == cudaErrorInvalidValue
                                    : result == cudaSuccess && ptr == nullptr,
                    "allocation of 0 bytes");
    }
    expect(result == cudaSuccess || result == cudaErrorMemoryAllocation, "allocation result");
    if (result != cudaSuccess) return;
    expect(ptr != nullptr && reinterpret_cast<std::uintptr_t>(ptr) % 256 == 0, "aligned pointer");
    static_cast<unsigned char*>(ptr)[0] = 1;
    static_cast<unsigned char*>(ptr)[size - 1] = 1;
    pointers_.add(ptr, size, 0);
  }

  // The answer to a free of `pick` that returned `result`: CUDA's on a device it owns.
  void freed(int result, const Pointers::Pick& pick) {
    if (pick.kind == PtrKind::null) return expect(result == cudaSuccess, "free of NULL");
    if (pick.kind != PtrKind::live) return expect(result == cudaErrorInvalidValue, "bad free");
    expect(result == cudaSuccess, "free of a live allocation");
    pointers_.forget(pick.index);
  }

  void runtime_call() {
    switch (in_.below(7)) {
      case 0:
      case 1: {  // cudaMalloc, cudaMallocAsync or cudaMallocAsync_ptsz
        const std::size_t flavour = in_.below(3);
        const std::size_t size = pick_size(in_);
        const bool null_out = in_.below(8) == 0;
        void* p = reinterpret_cast<void*>(0x1);
        void** out = null_out ? nullptr : &p;
        const int r = runtime(
            flavour == 0 ? api().cudaMalloc(out, size)
            : flavour == 1 ? api().cudaMallocAsync(out, size, pick_stream())
                           : api().cudaMallocAsync_ptsz(out, size, pick_stream()));
        if (null_out) return expect(r == cudaErrorInvalidValue, "allocation with ptr NULL");
        return allocated(r, p, size, false);
      }
      case 2: {  // cudaFree, cudaFreeAsync or cudaFreeAsync_ptsz
        const std::size_t flavour = in_.below(3);
        const auto pick = pointers_.pick(in_);
        const int r = runtime(
            flavour == 0 ? api().cudaFree(pick.ptr)
            : flavour == 1 ? api().cudaFreeAsync(pick.ptr, pick_stream())
                           : api().cudaFreeAsync_ptsz(pick.ptr, pick_stream()));
        return freed(r, pick);
      }
      case 3: {
        const std::size_t width = pick_size(in_);
        const std::size_t height = in_.below(2) ? in_.below(64) : pick_size(in_);
        const bool null_out = in_.below(8) == 0;
        void* p = reinterpret_cast<void*>(0x1);
        std::size_t pitch = 0;
        const int r = runtime(api().cudaMallocPitch(null_out ? nullptr : &p, &pitch, width, height));
        if (null_out) return expect(r == cudaErrorInvalidValue, "pitch with ptr NULL");
        std::size_t bytes = 0;
        if (!pitched(width, height, &bytes)) {
          return expect(r == cudaErrorInvalidValue && pitch == 0 && p == nullptr, "wrapped pitch");
        }
        if (bytes == 0) return expect(r == cudaSuccess && pitch == 0 && p == nullptr, "empty pitch");
        expect(pitch == (width + kPitch - 1) / kPitch * kPitch, "the pitch");
        return allocated(r, p, bytes, false);
      }
      case 4: {
        std::size_t free_bytes = 0, total = 0;
        const bool with_free = in_.below(2), with_total = in_.below(2);
        const int r = runtime(api().cudaMemGetInfo(with_free ? &free_bytes : nullptr,
                                             with_total ? &total : nullptr));
        return expect(r == cudaSuccess && (!with_free || !with_total || free_bytes <= total),
                      "cudaMemGetInfo");
      }
      case 5:
        expect(api().cudaPeekAtLastError() == pending_, "cudaPeekAtLastError");
        return;
      default:
        expect(api().cudaGetLastError() == pending_, "cudaGetLastError");
        pending_ = cudaSuccess;
        return;
    }
  }

  static bool pitched(std::size_t width, std::size_t height, std::size_t* bytes) {
    if (width > SIZE_MAX - (kPitch - 1)) return false;
    const std::size_t pitch = (width + kPitch - 1) / kPitch * kPitch;
    if (height != 0 && pitch > SIZE_MAX / height) return false;
    *bytes = pitch * height;
    return true;
  }

  void driver_call() {
    const int door = int(in_.below(5));
    const bool ptsz = in_.below(4) == 0;
    switch (in_.below(6)) {
      case 0:
      case 1: {
        const bool async = in_.below(2);
        const std::size_t size = pick_size(in_);
        const bool null_out = in_.below(8) == 0;
        CUdeviceptr d = 1;
        CUdeviceptr* out = null_out ? nullptr : &d;
        int r = 0;
        if (async) {
          auto fn = reinterpret_cast<int (*)(CUdeviceptr*, std::size_t, void*)>(
              driver_entry("cuMemAllocAsync", "cuMemAllocAsync", "cuMemAllocAsync_ptsz", door, ptsz));
          expect(fn != nullptr, "cuMemAllocAsync is handed out");
          r = fn(out, size, pick_stream());
        } else {
          auto fn = reinterpret_cast<int (*)(CUdeviceptr*, std::size_t)>(
              driver_entry("cuMemAlloc", "cuMemAlloc_v2", nullptr, door, ptsz));
          expect(fn != nullptr, "cuMemAlloc is handed out");
          r = fn(out, size);
        }
        if (null_out) return expect(r == CUDA_ERROR_INVALID_VALUE, "cuMemAlloc* with NULL");
        return allocated(r, reinterpret_cast<void*>(d), size, !async);
      }
      case 2:
      case 3: {
        const bool async = in_.below(2);
        const auto pick = pointers_.pick(in_);
        const auto d = reinterpret_cast<CUdeviceptr>(pick.ptr);
        int r = 0;
        if (async) {
          auto fn = reinterpret_cast<int (*)(CUdeviceptr, void*)>(
              driver_entry("cuMemFreeAsync", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", door, ptsz));
          expect(fn != nullptr, "cuMemFreeAsync is handed out");
          r = fn(d, pick_stream());
        } else {
          auto fn = reinterpret_cast<int (*)(CUdeviceptr)>(
              driver_entry("cuMemFree", "cuMemFree_v2", nullptr, door, ptsz));
          expect(fn != nullptr, "cuMemFree is handed out");
          r = fn(d);
        }
        return freed(r, pick);
      }
      case 4: {
        auto fn = reinterpret_cast<int (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t,
                                           unsigned)>(
            driver_entry("cuMemAllocPitch", "cuMemAllocPitch_v2", nullptr, door, ptsz));
        expect(fn != nullptr, "cuMemAllocPitch is handed out");
        const std::size_t width = pick_size(in_);
        const std::size_t height = in_.below(2) ? in_.below(64) : pick_size(in_);
        const unsigned kElements[] = {4, 8, 16, 0, 1, 3, 32};
        const unsigned element = kElements[in_.below(std::size(kElements))];
        const bool null_out = in_.below(8) == 0;
        CUdeviceptr d = 1;
        std::size_t pitch = 0;
        const int r = fn(null_out ? nullptr : &d, &pitch, width, height, element);
        std::size_t bytes = 0;
        if (null_out || (element != 4 && element != 8 && element != 16) ||
            !pitched(width, height, &bytes) || bytes == 0) {
          return expect(r == CUDA_ERROR_INVALID_VALUE, "cuMemAllocPitch refusal");
        }
        return allocated(r, reinterpret_cast<void*>(d), bytes, false);
      }
      default: {
        auto fn = reinterpret_cast<int (*)(std::size_t*, std::size_t*)>(
            driver_entry("cuMemGetInfo", "cuMemGetInfo_v2", nullptr, door, ptsz));
        expect(fn != nullptr, "cuMemGetInfo is handed out");
        std::size_t free_bytes = 0, total = 0;
        return expect(fn(&free_bytes, &total) == CUDA_SUCCESS && free_bytes <= total,
                      "cuMemGetInfo");
      }
    }
  }

  void clean_up() {
    while (!pointers_.live().empty()) {
      expect(api().cudaFree(pointers_.live().back().ptr) == cudaSuccess, "freeing what is left");
      pointers_.forget(pointers_.live().size() - 1);
    }
    api().cudaGetLastError();
    expect(api().cudaGetLastError() == cudaSuccess, "nothing pending at the end");
    expect(api().cudalloc_empty_cache(-1) == CUDALLOC_SUCCESS && api().cudalloc_validate(-1) == CUDALLOC_SUCCESS,
           "empty and valid at the end");
  }

  ByteStream& in_;
  Pointers pointers_;
  int pending_ = cudaSuccess;
  long step_ = 0;
};

}  // namespace
}  // namespace cudalloc::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("CUDALLOC_DEVICE", "fake:256M", 1);
  cudalloc::fuzz::api();  // opens the library before fuzzing, so that its coverage counts
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cudalloc::fuzz::ByteStream in(data, size);
  cudalloc::fuzz::PreloadProbe(in).run();
  return 0;
}
