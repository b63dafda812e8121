// cudalloc_snapshot / cudalloc_snapshot_json, and the snapshots that CUDALLOC_CONF asks for
// on out-of-memory and at exit. Registered when the library loads.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api/cudalloc.h"
#include "api/hooks.h"
#include "api/runtime.h"
#include "core/log.h"
#include "snapshot/snapshot_json.h"

namespace cudalloc::snapshot {
namespace {

std::string snapshot_text(Allocator& allocator) {
  std::vector<DeviceState> states;
  allocator.for_each_device([&](DeviceAllocator& d) { states.push_back(d.state()); });
  return snapshot_json(states, process_conf()).dump();
}

// Writes `text` to PATH.tmp, then renames it over `path`, so that a reader never sees half a
// snapshot. On every failure the temporary file is removed (only when this call created it: a
// directory of that name is left alone) and *why says what failed.
bool write_file(const std::string& path, const std::string& text, std::string* why) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    *why = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += std::size_t(n);
  }
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (written < text.size() || !closed) {
    *why = "cannot write " + tmp + ": " + std::strerror(written < text.size() ? write_errno : errno);
  } else if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = errno == EISDIR ? path + " is a directory" : "cannot rename " + tmp + " to " + path +
                                                            ": " + std::strerror(errno);
  } else {
    return true;
  }
  ::unlink(tmp.c_str());
  return false;
}

Error write_snapshot(Allocator& allocator, const std::string& path) {
  const std::string expanded = expand_path(path);
  std::string why;
  if (!write_file(expanded, snapshot_text(allocator), &why)) {
    return fail(Error::invalid_value, "cannot write snapshot file %s: %s", expanded.c_str(),
                why.c_str());
  }
  log().info("snapshot written to {}", expanded);
  return Error::ok;
}

void snapshot_on_oom(int device) {
  try {
    Allocator& a = process_allocator();
    const std::string& path = a.settings().snapshot_on_oom;
    if (write_snapshot(a, path) == Error::ok) {
      log().warn("device {}: out of memory; snapshot written to {}", device, expand_path(path));
    } else {
      log().error("snapshot_on_oom: {}", last_error_message());
    }
  } catch (const std::exception& e) {
    log().error("snapshot_on_oom failed: {}", e.what());
  }
}

void snapshot_at_exit() {
  try {
    Allocator* a = process_allocator_if_created();
    if (a == nullptr || a->settings().snapshot_at_exit.empty()) return;
    if (write_snapshot(*a, a->settings().snapshot_at_exit) != Error::ok) {
      log().error("snapshot_at_exit: {}", last_error_message());
    }
  } catch (const std::exception& e) {
    log().error("snapshot_at_exit failed: {}", e.what());
  }
}

// Installs the hooks when the library is loaded.
[[maybe_unused]] const bool g_registered = [] {
  set_out_of_memory_hook(&snapshot_on_oom);
  std::atexit(&snapshot_at_exit);
  return true;
}();

cudalloc_error_t to_code(Error e) {
  return e == Error::ok ? CUDALLOC_SUCCESS
         : e == Error::invalid_value ? CUDALLOC_ERROR_INVALID_VALUE
                                     : CUDALLOC_ERROR_UNKNOWN;
}

}  // namespace
}  // namespace cudalloc::snapshot

using namespace cudalloc;

extern "C" cudalloc_error_t cudalloc_snapshot(const char* path) {
  if (path == nullptr || *path == '\0') {
    return snapshot::to_code(fail(Error::invalid_value, "snapshot: no path given"));
  }
  try {
    return snapshot::to_code(snapshot::write_snapshot(process_allocator(), path));
  } catch (const std::exception& e) {
    return snapshot::to_code(fail(Error::internal, "snapshot failed: %s", e.what()));
  }
}

extern "C" cudalloc_error_t cudalloc_snapshot_json(char* buffer, size_t capacity,
                                                   size_t* length) {
  if (length == nullptr) {
    return snapshot::to_code(fail(Error::invalid_value, "snapshot_json: length is NULL"));
  }
  try {
    const std::string text = snapshot::snapshot_text(process_allocator());
    *length = text.size();
    if (buffer == nullptr || capacity < text.size() + 1) {
      return snapshot::to_code(fail(Error::invalid_value,
                                    "snapshot_json: needs a buffer of %zu bytes", text.size() + 1));
    }
    std::memcpy(buffer, text.c_str(), text.size() + 1);
    return CUDALLOC_SUCCESS;
  } catch (const std::exception& e) {
    return snapshot::to_code(fail(Error::internal, "snapshot failed: %s", e.what()));
  }
}
