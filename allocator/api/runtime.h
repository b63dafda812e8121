// The process-wide allocator behind the C API, configured from the environment on first use:
// CUDALLOC_DEVICE picks the device layer, CUDALLOC_CONF the settings (warnings are logged),
// CUDALLOC_LOG the log level.
#pragma once

#include "core/allocator.h"

namespace cudalloc {

// Never destroyed: memory may be freed from static destructors of other libraries.
Allocator& process_allocator();

}  // namespace cudalloc
