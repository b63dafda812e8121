// The C library's dlsym, reached even when dlsym itself is interposed (cudalloc's preload
// library interposes it to hand out its own CUDA entry points).
#pragma once

namespace cudalloc::device {

void* real_dlsym(void* handle, const char* symbol);

}  // namespace cudalloc::device
