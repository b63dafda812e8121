// dlsym, interposed: a lookup of a CUDA entry point that cudalloc serves returns cudalloc's,
// whatever the handle (libcuda.so.1 opened by a statically linked runtime, libcudart.so,
// RTLD_DEFAULT), once the real lookup has found the symbol. Everything else, and every lookup
// made while a thread is inside cudalloc (the driver's own initialisation), is the real
// answer.
//
// dlsym(RTLD_NEXT, ...) means "after the caller": the real dlsym finds the caller from its
// return address, so on x86-64 dlsym is a tail jump that leaves the caller's return address in
// place. Elsewhere RTLD_NEXT lookups are resolved relative to this library.
#include <dlfcn.h>

#include <cstring>
#include <initializer_list>

#include "device/real_dlsym.h"
#include "interpose/shim.h"

namespace cudalloc::interpose {
namespace {

// Every CUDA symbol this library exports (symbols.def).
constexpr const char* kExported[] = {
#define CUDALLOC_RUNTIME(name) #name,
#define CUDALLOC_DRIVER(base, name) #name,
#define CUDALLOC_DRIVER_PTSZ(base, name, per_thread) #name, #per_thread,
#define CUDALLOC_DRIVER_ALIAS(name) #name,
#include "interpose/symbols.def"
};

// This library's own handle, to look up its definitions (RTLD_DEFAULT would find the
// program's first).
void* self_handle() {
  static void* handle = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&self_handle), &info) == 0) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return handle;
}

}  // namespace

void* exported_hook(const char* symbol) {
  for (const char* name : kExported) {
    if (std::strcmp(name, symbol) == 0) {
      void* self = self_handle();
      return self != nullptr ? device::real_dlsym(self, symbol) : nullptr;
    }
  }
  return nullptr;
}

}  // namespace cudalloc::interpose

using cudalloc::interpose::exported_hook;

// Where dlsym(RTLD_NEXT, ...) jumps: the C library's dlsym (set before main; until then the
// C implementation below handles RTLD_NEXT too).
extern "C" {
__attribute__((visibility("hidden"))) void* cudalloc_real_dlsym_ptr = nullptr;

__attribute__((visibility("hidden"))) void* cudalloc_dlsym_impl(void* handle, const char* symbol) {
  void* real = cudalloc::device::real_dlsym(handle, symbol);
  if (real == nullptr || symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u' ||
      cudalloc::interpose::Inside::active() || !cudalloc::interpose::enabled()) {
    return real;
  }
  if (std::strcmp(symbol, "cuGetExportTable") == 0) {
    cudalloc::interpose::runtime_lookup_from(__builtin_return_address(0));
  }
  void* ours = exported_hook(symbol);
  return ours != nullptr ? ours : real;
}
}

__attribute__((constructor(101))) static void cudalloc_find_real_dlsym() {
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
    if (void* fn = dlvsym(RTLD_NEXT, "dlsym", version)) {
      cudalloc_real_dlsym_ptr = fn;
      return;
    }
  }
}

#if defined(__x86_64__)
// RTLD_NEXT is ((void*)-1).
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    cmpq $-1, %rdi
    jne 1f
    movq cudalloc_real_dlsym_ptr(%rip), %rax
    testq %rax, %rax
    je 1f
    jmp *%rax
1:
    jmp cudalloc_dlsym_impl
    .size dlsym, .-dlsym
)");
#else
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* symbol) {
  return cudalloc_dlsym_impl(handle, symbol);
}
#endif
