// Results of core operations and the per-thread description of the last failure.
//
// The core reports failures by value (Error) and never throws for expected failures (out of
// memory, bad pointers, device errors). The message is formatted into a fixed per-thread
// buffer, so reporting an error never allocates.
#pragma once

namespace cudalloc {

enum class Error {
  ok,
  invalid_value,    // bad argument (size too large, bad device, bad fraction)
  invalid_pointer,  // free / record_stream of a pointer that is not a live allocation
  out_of_memory,
  no_device,
  not_supported,
  device_error,
  internal,         // an invariant check failed, or an unexpected exception
};

const char* error_name(Error e);

// Formats the calling thread's last error message (printf style) and returns `e`.
Error fail(Error e, const char* format, ...) __attribute__((format(printf, 2, 3)));
const char* last_error_message();

}  // namespace cudalloc
