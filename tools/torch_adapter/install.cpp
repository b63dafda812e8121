// cudalloc_torch_install(): puts the adapter in place of PyTorch's CUDA caching allocator,
// as torch.cuda.memory.change_current_allocator does, without needing PyTorch's Python
// bindings (the Python module calls this through ctypes after importing torch).
#include <cstdio>

#include "adapter.h"

extern "C" __attribute__((visibility("default"))) int cudalloc_torch_install(char* message,
                                                                             size_t capacity) {
  namespace cca = c10::cuda::CUDACachingAllocator;
  using cudalloc::torch_adapter::TorchAllocator;
  auto say = [&](const char* text) {
    if (message != nullptr && capacity != 0) std::snprintf(message, capacity, "%s", text);
  };
  try {
    if (TorchAllocator::instance() != nullptr &&
        cca::allocator.load() == TorchAllocator::instance()) {
      return 0;  // already installed
    }
    cca::CUDAAllocator* current = cca::allocator.load();
    if (current != nullptr && current->initialized()) {
      say("PyTorch's CUDA allocator is already initialized");
      return 1;
    }
    // Immortal: storages freed at exit call its deleter after static destructors ran.
    auto* adapter = new TorchAllocator();
    cca::allocator.store(adapter);
    c10::SetAllocator(c10::DeviceType::CUDA, adapter, /*priority=*/255);
    return 0;
  } catch (const std::exception& e) {
    say(e.what());
    return 2;
  }
}

// The C API version the adapter was built against, checked by the Python module.
extern "C" __attribute__((visibility("default"))) int cudalloc_torch_adapter_version(void) {
  return CUDALLOC_VERSION_MAJOR * 10000 + CUDALLOC_VERSION_MINOR * 100 + CUDALLOC_VERSION_PATCH;
}
