// Results of core operations and the per-thread description of the last failure.
//
// The core reports failures by value (Error) and never throws for expected failures (out of
// memory, bad pointers, device errors). The message is formatted into a fixed per-thread
// buffer, so reporting an error never allocates.
#pragma once

#include <cstddef>
#include <new>

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

// The calling thread's last allocation that failed for lack of memory (DeviceAllocator), for
// the entry point that reports it: which device, how many bytes, and the device's free memory
// as the driver reported it then (device_free_known is false when the driver could not say).
// Kept per thread beside the message, so recording it never allocates.
struct OutOfMemoryDetail {
  int device = -1;
  std::size_t size = 0;
  bool device_free_known = false;
  std::size_t device_free = 0;
};
void note_out_of_memory(const OutOfMemoryDetail& detail);
const OutOfMemoryDetail& last_out_of_memory();

// Host memory for the allocator's own metadata (block and page records, tables) is assumed.
// Running out of it inside an operation that changes the allocator's state is fatal: the
// process is ended with a message naming the operation, because the state could no longer be
// trusted (a half-done split, a page whose record was not made). mimalloc and snmalloc treat
// metadata exhaustion the same way. Read-only operations (stats, state copies, validation)
// leave the state untouched and report out_of_memory instead.
[[noreturn]] void fatal_host_out_of_memory(const char* operation, int device) noexcept;

// Runs f() (a state-changing operation on `device`) under that policy.
template <typename F>
auto metadata_guard(const char* operation, int device, F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    fatal_host_out_of_memory(operation, device);
  }
}

}  // namespace cudalloc
