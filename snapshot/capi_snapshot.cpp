// cudalloc_snapshot / cudalloc_snapshot_json, and the snapshots that CUDALLOC_CONF asks for
// on out-of-memory and at exit. Registered when the library loads.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/cudalloc.h"
#include "api/hooks.h"
#include "api/runtime.h"
#include "core/log.h"
#include "snapshot/snapshot_json.h"

namespace cudalloc::snapshot {
namespace {

nlohmann::json snapshot_doc(Allocator& allocator) {
  std::vector<DeviceState> states;
  allocator.for_each_device([&](DeviceAllocator& d) { states.push_back(d.state()); });
  return snapshot_json(states, process_conf());
}

// How a written snapshot takes its name: replacing a file there (a snapshot asked for by
// path), or only where no file is (out-of-memory snapshots, which never replace one).
enum class Publish { replace, new_file };

// Gives the complete temporary file `tmp` the name `path`. new_file never replaces a file
// there (*taken set, false): renameat2 with RENAME_NOREPLACE where the file system has it, else
// a hard link (which fails where the name exists), else the name reserved with O_EXCL and
// renamed over (an empty file shows there meanwhile; removed again if the rename fails).
bool publish(const std::string& tmp, const std::string& path, Publish how, bool* taken,
             std::string* why) {
  const auto name_taken = [&] {
    *taken = true;
    *why = path + " exists";
    return false;
  };
  bool reserved = false;
  if (how == Publish::new_file) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
      return true;
    }
    int error = errno;
    if (error == EEXIST) return name_taken();
    if (error == EINVAL || error == ENOSYS || error == ENOTSUP) {  // no RENAME_NOREPLACE here
      if (::link(tmp.c_str(), path.c_str()) == 0) {
        ::unlink(tmp.c_str());
        return true;
      }
      error = errno;
      if (error == EEXIST) return name_taken();
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      error = errno;
      if (fd < 0 && error == EEXIST) return name_taken();
      if (fd < 0) {
        *why = "cannot create " + path + ": " + std::strerror(error);
        return false;
      }
      ::close(fd);
      reserved = true;
    } else {
      *why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(error);
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  const int error = errno;
  if (reserved) ::unlink(path.c_str());
  *why = error == EISDIR ? path + " is a directory"
                         : "cannot rename " + tmp + " to " + path + ": " + std::strerror(error);
  return false;
}

// A new temporary file beside `path` for a snapshot being written, of a name no other writer
// uses (process id and a counter, created with O_EXCL): writers of one name at once (ranks of
// a job out of memory together) never write into each other's file. -1 with *why on failure.
int create_temporary(const std::string& path, std::string* tmp, std::string* why) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 8; ++attempt) {
    *tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) {
      if (fd < 0) *why = "cannot create " + *tmp + ": " + std::strerror(errno);
      return fd;
    }
  }
  *why = "cannot create a temporary file beside " + path + ": every name tried exists";
  return -1;
}

// Writes `text` to a new temporary file beside `path` (create_temporary), then gives it the
// name `path` (publish), so that a reader never sees half a snapshot. On every failure the
// temporary file is removed (only the one this call created) and *why says what failed;
// *taken (if given) says the name was taken (Publish::new_file).
bool write_file(const std::string& path, const std::string& text, std::string* why,
                Publish how = Publish::replace, bool* taken = nullptr) {
  bool name_taken = false;
  std::string tmp;
  const int fd = create_temporary(path, &tmp, why);
  if (fd < 0) return false;
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
  } else if (publish(tmp, path, how, &name_taken, why)) {
    return true;
  }
  if (taken != nullptr) *taken = name_taken;
  ::unlink(tmp.c_str());
  return false;
}

// cudalloc_snapshot and snapshot_at_exit: `path` with %p expanded; a failure is the calling
// thread's last error.
Error write_snapshot(Allocator& allocator, const std::string& path) {
  const std::string expanded = expand_path(path);
  std::string why;
  if (!write_file(expanded, snapshot_doc(allocator).dump(), &why)) {
    return fail(Error::invalid_value, "cannot write snapshot file %s: %s", expanded.c_str(),
                why.c_str());
  }
  log().info("snapshot written to {}", expanded);
  return Error::ok;
}

// The failed request, as the snapshot written for it records it ("oom" in the cudalloc
// section; docs/snapshots.md).
nlohmann::json oom_json(const OutOfMemory& oom, std::uint64_t sequence) {
  nlohmann::json out = {{"device", oom.device},     {"size", oom.size},
                        {"stream", oom.stream},     {"sequence", sequence},
                        {"message", oom.message}};
  if (oom.device_free_known) out["device_free"] = oom.device_free;
  return out;
}

// Whether out-of-memory error number `sequence` is past snapshot_on_oom_max (0: no cap). The
// first one past it says so, once.
bool past_cap(std::uint64_t sequence, std::size_t max) {
  if (max == 0 || sequence <= max) return false;
  if (sequence == max + 1) {
    log().warn("snapshot_on_oom: {} snapshot{} written, as many as snapshot_on_oom_max allows; "
               "no more are written for later out-of-memory errors",
               max, max == 1 ? "" : "s");
  }
  return true;
}

// How many names an out-of-memory snapshot tries (oom_snapshot_path, then fallbacks) before
// giving up, when each is taken.
constexpr int kNameAttempts = 16;

// The hook (api/hooks.h): one new file per out-of-memory error, named by its number in the
// process (oom_snapshot_path), or another name where that file exists (never replaced). It
// never calls fail(): the caller's last error stays the allocation's.
void snapshot_on_oom(const OutOfMemory& oom) noexcept {
  static std::atomic<std::uint64_t> count{0};
  try {
    Allocator& a = process_allocator();
    const std::uint64_t sequence = count.fetch_add(1) + 1;
    if (past_cap(sequence, a.settings().snapshot_on_oom_max)) return;
    const std::string first = oom_snapshot_path(a.settings().snapshot_on_oom, sequence);
    // The request first: oom.message lies in a per-thread buffer that later errors rewrite.
    nlohmann::json failed = oom_json(oom, sequence);
    nlohmann::json doc = snapshot_doc(a);
    doc["cudalloc"]["oom"] = std::move(failed);
    const std::string text = doc.dump();
    // A file of that name (another process's or library's) is never replaced: another name.
    std::string path = first, why;
    bool written = false, taken = false;
    for (int attempt = 1; attempt <= kNameAttempts; ++attempt) {
      taken = false;
      written = write_file(path, text, &why, Publish::new_file, &taken);
      if (written || !taken) break;
      if (attempt == kNameAttempts) {
        why = std::to_string(kNameAttempts) + " names from " + first + " on are taken";
      } else {
        path = oom_snapshot_fallback(first, long(::getpid()), attempt);
      }
    }
    if (written) {
      log().warn("device {}: out of memory (error {} of this process); snapshot written to {}",
                 oom.device, sequence, path);
    } else {
      log().error("snapshot_on_oom: cannot write snapshot file {}: {}", path, why);
    }
  } catch (const std::exception& e) {
    log().error("snapshot_on_oom failed: {}", e.what());
  } catch (...) {
    log().error("snapshot_on_oom failed");
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
    const std::string text = snapshot::snapshot_doc(process_allocator()).dump();
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
