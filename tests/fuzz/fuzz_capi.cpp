// Fuzz target: the C API's argument space on a simulated pair of 64 MiB devices.
//
// Each input decodes (byte_stream.h) to up to kMaxSteps calls of every C API function that
// takes a pointer or a device, with NULL, live, freed, interior, host, heap and wild pointers
// (pointer_choice.h), sizes from 0 to SIZE_MAX, devices -1, 0, 1 and ones that do not exist
// (2, -2, -5, INT_MIN, INT_MAX), fractions and limits in and out of range.
//
// Every call must give the answer cudalloc.h documents (which follows CUDA's): a bad device is
// CUDALLOC_ERROR_INVALID_DEVICE whatever the other arguments, NULL output pointers are
// invalid values, freeing and recording NULL succeed, anything that is not a live
// allocation is an invalid device pointer; and cudalloc_validate(-1) must hold after each
// call. The process-wide allocator outlives inputs: each input frees what it allocated and
// puts the caps back.
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "cudalloc.h"
#include "pointer_choice.h"

namespace cudalloc::fuzz {
namespace {

constexpr int kDevices = 2;
constexpr std::size_t kMaxSteps = 200;
constexpr int kBadDevices[] = {2, -2, -5, INT_MIN, INT_MAX, 64};

cudaStream_t pick_stream(ByteStream& in) {
  static const std::uintptr_t kStreams[] = {0, 0x2, 0x100, 0x200};
  return reinterpret_cast<cudaStream_t>(kStreams[in.below(4)]);
}

class CapiProbe {
 public:
  explicit CapiProbe(ByteStream& in) : in_(in) {}

  void run() {
    for (step_ = 0; step_ < long(kMaxSteps) && !in_.done(); ++step_) {
      one_call();
      expect(cudalloc_validate(-1) == CUDALLOC_SUCCESS, "validate after the call");
    }
    clean_up();
  }

 private:
  void expect(bool ok, const char* what) {
    if (!ok) probe_violation("fuzz_capi", what, step_);
  }

  // -1, an existing device, or one that does not exist (bad == true).
  int pick_device(bool* bad) {
    const std::size_t choice = in_.below(4);
    *bad = choice == 3;
    if (*bad) return kBadDevices[in_.below(std::size(kBadDevices))];
    return choice == 0 ? -1 : int(choice - 1);
  }

  void one_call() {
    bool bad = false;
    switch (in_.below(10)) {
      case 0: return allocate();
      case 1: return deallocate();
      case 2: {
        const auto pick = pointers_.pick(in_);
        const cudalloc_error_t e = cudalloc_record_stream(pick.ptr, pick_stream(in_));
        expect(pick.kind == PtrKind::null || pick.kind == PtrKind::live
                   ? e == CUDALLOC_SUCCESS : e == CUDALLOC_ERROR_INVALID_DEVICE_POINTER,
               "record_stream");
        return;
      }
      case 3: return move_or_query();
      case 4: {
        const int device = pick_device(&bad);
        const std::size_t which = in_.below(3);
        const cudalloc_error_t e = which == 0   ? cudalloc_empty_cache(device)
                                   : which == 1 ? cudalloc_promote(device)
                                                : cudalloc_validate(device);
        expect(e == (bad ? CUDALLOC_ERROR_INVALID_DEVICE : CUDALLOC_SUCCESS),
               "empty_cache/promote/validate");
        return;
      }
      case 5: {
        const int device = pick_device(&bad);
        const double kFractions[] = {0.0, -1.0, 0.5, 1.0, 1.5, NAN, INFINITY, 1e-9};
        const double f = kFractions[in_.below(std::size(kFractions))];
        const cudalloc_error_t e = cudalloc_set_memory_fraction(f, device);
        const bool valid = f > 0.0 && f <= 1.0;
        expect(e == (bad ? CUDALLOC_ERROR_INVALID_DEVICE
                         : valid ? CUDALLOC_SUCCESS : CUDALLOC_ERROR_INVALID_VALUE),
               "set_memory_fraction");
        return;
      }
      case 6: {
        const int device = pick_device(&bad);
        const std::size_t bytes = in_.below(2) ? 0 : pick_size(in_);
        expect(cudalloc_set_memory_limit(bytes, device) ==
                   (bad ? CUDALLOC_ERROR_INVALID_DEVICE : CUDALLOC_SUCCESS),
               "set_memory_limit");
        return;
      }
      case 7: {
        const int device = pick_device(&bad);
        cudalloc_stats_t stats;
        const bool null_out = in_.below(4) == 0;
        const cudalloc_error_t e = cudalloc_get_stats(device, null_out ? nullptr : &stats);
        expect(e == (bad ? CUDALLOC_ERROR_INVALID_DEVICE
                         : null_out ? CUDALLOC_ERROR_INVALID_VALUE : CUDALLOC_SUCCESS),
               "get_stats");
        expect(bad || null_out || stats.count == cudalloc_stat_count(), "get_stats count");
        return;
      }
      case 8: {
        const int device = pick_device(&bad);
        expect(cudalloc_reset_peak_stats(device) ==
                   (bad ? CUDALLOC_ERROR_INVALID_DEVICE : CUDALLOC_SUCCESS),
               "reset_peak_stats");
        return;
      }
      default: {
        const auto pick = pointers_.pick(in_);
        cudalloc_torch_record_stream(pick.ptr, pick_stream(in_));  // never fails loudly
        return;
      }
    }
  }

  void allocate() {
    bool bad = false;
    const int device = pick_device(&bad);
    const std::size_t size = pick_size(in_);
    const bool null_out = in_.below(8) == 0;
    void* p = reinterpret_cast<void*>(0x1);
    const cudalloc_error_t e =
        cudalloc_allocate(null_out ? nullptr : &p, size, device, pick_stream(in_));
    if (bad) return expect(e == CUDALLOC_ERROR_INVALID_DEVICE && (null_out || p == nullptr),
                           "allocate on a bad device");
    if (null_out) return expect(e == CUDALLOC_ERROR_INVALID_VALUE, "allocate with ptr NULL");
    expect(e == CUDALLOC_SUCCESS || e == CUDALLOC_ERROR_MEMORY_ALLOCATION, "allocate result");
    expect(e == CUDALLOC_SUCCESS || p == nullptr, "a failed allocate gives NULL");
    if (e != CUDALLOC_SUCCESS || size == 0) return expect(p == nullptr, "size 0 gives NULL");
    expect(p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 256 == 0, "aligned pointer");
    static_cast<unsigned char*>(p)[0] = 1;
    static_cast<unsigned char*>(p)[size - 1] = 1;
    pointers_.add(p, size, device == -1 ? 0 : device);
  }

  void deallocate() {
    bool bad = false;
    const int device = pick_device(&bad);
    const auto pick = pointers_.pick(in_);
    const cudalloc_error_t e = cudalloc_deallocate(pick.ptr, device);
    if (bad) return expect(e == CUDALLOC_ERROR_INVALID_DEVICE, "deallocate on a bad device");
    if (pick.kind == PtrKind::null) return expect(e == CUDALLOC_SUCCESS, "deallocate NULL");
    if (pick.kind != PtrKind::live) {
      return expect(e == CUDALLOC_ERROR_INVALID_DEVICE_POINTER, "deallocate a non-live pointer");
    }
    const bool owner = device == -1 || device == pointers_.live()[pick.index].device;
    expect(e == (owner ? CUDALLOC_SUCCESS : CUDALLOC_ERROR_INVALID_DEVICE_POINTER),
           "deallocate a live pointer");
    if (owner) pointers_.forget(pick.index);
  }

  void move_or_query() {
    const auto pick = pointers_.pick(in_);
    const std::size_t which = in_.below(3);
    std::size_t on_device = 0, on_host = 0;
    const bool null_out = which == 2 && in_.below(4) == 0;
    const cudalloc_error_t e =
        which == 0 ? cudalloc_offload(pick.ptr, pick_stream(in_))
        : which == 1 ? cudalloc_prefetch(pick.ptr, pick_stream(in_))
                     : cudalloc_residency(pick.ptr, null_out ? nullptr : &on_device, &on_host);
    if (null_out) return expect(e == CUDALLOC_ERROR_INVALID_VALUE, "residency with a NULL output");
    if (pick.kind != PtrKind::live) {
      return expect(e == CUDALLOC_ERROR_INVALID_DEVICE_POINTER, "offload/prefetch/residency");
    }
    // Without offload:host nothing moves; a live allocation's residency is known.
    expect(which == 2 ? e == CUDALLOC_SUCCESS
                      : e == CUDALLOC_SUCCESS || e == CUDALLOC_ERROR_NOT_SUPPORTED ||
                            e == CUDALLOC_ERROR_MEMORY_ALLOCATION,
           "offload/prefetch/residency of a live allocation");
  }

  void clean_up() {
    while (!pointers_.live().empty()) {
      expect(cudalloc_deallocate(pointers_.live().back().ptr, -1) == CUDALLOC_SUCCESS,
             "freeing what is left");
      pointers_.forget(pointers_.live().size() - 1);
    }
    for (int d = 0; d < kDevices; ++d) {
      expect(cudalloc_set_memory_fraction(1.0, d) == CUDALLOC_SUCCESS &&
                 cudalloc_set_memory_limit(0, d) == CUDALLOC_SUCCESS,
             "caps put back");
    }
    expect(cudalloc_empty_cache(-1) == CUDALLOC_SUCCESS && cudalloc_validate(-1) == CUDALLOC_SUCCESS,
           "empty and valid at the end");
  }

  ByteStream& in_;
  Pointers pointers_;
  long step_ = 0;
};

}  // namespace
}  // namespace cudalloc::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("CUDALLOC_DEVICE", "fake:64M:2", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cudalloc::fuzz::ByteStream in(data, size);
  cudalloc::fuzz::CapiProbe(in).run();
  return 0;
}
