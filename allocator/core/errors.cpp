#include "core/errors.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

namespace cudalloc {
namespace {
thread_local char t_message[512];
thread_local OutOfMemoryDetail t_out_of_memory;
}  // namespace

const char* error_name(Error e) {
  switch (e) {
    case Error::ok: return "ok";
    case Error::invalid_value: return "invalid value";
    case Error::invalid_pointer: return "invalid pointer";
    case Error::out_of_memory: return "out of memory";
    case Error::no_device: return "no device";
    case Error::not_supported: return "not supported";
    case Error::device_error: return "device error";
    case Error::internal: return "internal error";
  }
  return "unknown";
}

Error fail(Error e, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_message, sizeof t_message, format, args);
  va_end(args);
  return e;
}

const char* last_error_message() { return t_message; }

void note_out_of_memory(const OutOfMemoryDetail& detail) { t_out_of_memory = detail; }

const OutOfMemoryDetail& last_out_of_memory() { return t_out_of_memory; }

void fatal_host_out_of_memory(const char* operation, int device) noexcept {
  // No allocation on this path: format into the stack and write(2) directly.
  char line[256];
  const int n = std::snprintf(line, sizeof line,
                              "cudalloc: fatal: host memory exhausted while updating the "
                              "allocator's metadata in %s on device %d; aborting\n",
                              operation, device);
  if (n > 0) {
    const auto len = static_cast<std::size_t>(n) < sizeof line ? static_cast<std::size_t>(n)
                                                                : sizeof line - 1;
    [[maybe_unused]] const auto written = ::write(2, line, len);
  }
  std::abort();
}

}  // namespace cudalloc
