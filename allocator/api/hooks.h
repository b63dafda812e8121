// Hooks that a higher layer (snapshot/) installs when the library loads, so that the API can
// trigger its work without including it.
#pragma once

namespace cudalloc {

// Called after an allocation on `device` failed for lack of memory, outside every lock, when
// CUDALLOC_CONF has snapshot_on_oom.
using OutOfMemoryHook = void (*)(int device);
void set_out_of_memory_hook(OutOfMemoryHook hook);
OutOfMemoryHook out_of_memory_hook();

}  // namespace cudalloc
