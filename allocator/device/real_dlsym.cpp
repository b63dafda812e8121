#include "device/real_dlsym.h"

#include <dlfcn.h>

#include <initializer_list>

namespace cudalloc::device {
namespace {

using DlsymFn = void* (*)(void*, const char*);

DlsymFn find_real_dlsym() {
  // dlvsym is not interposed. RTLD_NEXT from this library reaches the C library's dlsym
  // (GLIBC_2.34 since dlsym moved into libc, GLIBC_2.2.5 before).
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
    if (void* fn = dlvsym(RTLD_NEXT, "dlsym", version)) return reinterpret_cast<DlsymFn>(fn);
  }
  return &dlsym;
}

}  // namespace

void* real_dlsym(void* handle, const char* symbol) {
  static const DlsymFn fn = find_real_dlsym();
  return fn(handle, symbol);
}

}  // namespace cudalloc::device
