// The argument space of the API probes (fuzz_capi, fuzz_preload): sizes and pointers of every
// kind a caller may pass, with what each one is, so that a probe knows CUDA's answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "byte_stream.h"

namespace cudalloc::fuzz {

[[noreturn]] inline void probe_violation(const char* probe, const char* what, long step) {
  std::fprintf(stderr, "%s: step %ld: %s\n", probe, step, what);
  std::abort();
}

// 0, small, medium, large, past a small device, 2^50, and sizes next to SIZE_MAX.
inline std::size_t pick_size(ByteStream& in) {
  switch (in.below(8)) {
    case 0: return 0;
    case 1: return 1 + in.below(4096);
    case 2: return 1 + in.below(std::size_t{1} << 20);
    case 3: return 1 + in.below(std::size_t{16} << 20);
    case 4: return (std::size_t{1} << 30) + in.below(4096);
    case 5: return std::size_t{1} << 50;
    case 6: return SIZE_MAX - in.below(1024);
    default: return std::size_t{1} << in.below(64);
  }
}

enum class PtrKind { null, live, freed, interior, host, heap, wild };

struct LiveAllocation {
  void* ptr;
  std::size_t size;
  int device;
};

// The allocations an input has live, and some it freed. A freed address that was handed out
// again counts as live.
class Pointers {
 public:
  struct Pick {
    PtrKind kind;
    void* ptr;
    std::size_t index;  // into live() when kind == live
  };

  const std::vector<LiveAllocation>& live() const { return live_; }
  void add(void* ptr, std::size_t size, int device) { live_.push_back({ptr, size, device}); }
  void forget(std::size_t index) {
    if (freed_.size() < 16) freed_.push_back(live_[index].ptr);
    live_[index] = live_.back();
    live_.pop_back();
  }

  Pick pick(ByteStream& in) {
    static int host_object = 0;
    static void* const heap_object = std::malloc(64);  // kept for the process
    const auto kind = static_cast<PtrKind>(in.below(7));
    switch (kind) {
      case PtrKind::live:
        if (live_.empty()) break;
        {
          const std::size_t i = in.below(live_.size());
          return {PtrKind::live, live_[i].ptr, i};
        }
      case PtrKind::freed:
        if (freed_.empty()) break;
        return classify(freed_[in.below(freed_.size())], PtrKind::freed);
      case PtrKind::interior:
        for (const LiveAllocation& a : live_) {
          if (a.size > 256) return {PtrKind::interior, static_cast<char*>(a.ptr) + 256, 0};
        }
        break;
      case PtrKind::host: return {PtrKind::host, &host_object, 0};
      case PtrKind::heap: return {PtrKind::heap, heap_object, 0};
      case PtrKind::wild:
        return classify(reinterpret_cast<void*>(0xdead0000ull + in.u16() * 256ull), PtrKind::wild);
      case PtrKind::null: break;
    }
    return {PtrKind::null, nullptr, 0};
  }

 private:
  Pick classify(void* ptr, PtrKind otherwise) const {
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i].ptr == ptr) return {PtrKind::live, ptr, i};
    }
    return {otherwise, ptr, 0};
  }

  std::vector<LiveAllocation> live_;
  std::vector<void*> freed_;
};

}  // namespace cudalloc::fuzz
