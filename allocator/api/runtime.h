// The process-wide allocator behind the C API, configured from the environment on first use:
// CUDALLOC_DEVICE picks the device layer, CUDALLOC_CONF the settings (warnings are logged),
// CUDALLOC_LOG the log level.
#pragma once

#include <string>

#include "core/allocator.h"

namespace cudalloc {

// Never destroyed: memory may be freed from static destructors of other libraries.
Allocator& process_allocator();
// The process-wide allocator if something already created it, else nullptr (for exit-time
// work that must not start CUDA).
Allocator* process_allocator_if_created();
// The warning for a CUDALLOC_DEVICE value (may be NULL) that is neither "cuda" nor
// "fake...", which then selects the default (CUDA) device; "" when there is nothing to say.
std::string device_choice_warning(const char* choice);
// What the process allocator may assume about streams (core/settings.h), before it is
// created: the interposer sets all_seen where it can watch every stream's creation. Later
// calls change nothing.
void set_stream_visibility(StreamVisibility visibility);
// Whether the allocator serves an interposed CUDA API (LD_PRELOAD): its memory may then be
// used by any stream, seen or not, and waiting for a region's work means the whole device.
void set_interposing();
bool interposing();
// The CUDALLOC_CONF text the allocator was configured from ("" if unset).
const std::string& process_conf();

}  // namespace cudalloc
