// cudalloc_snapshot / cudalloc_snapshot_json, and the snapshots that CUDALLOC_CONF asks for
// on out-of-memory and at exit. Registered when the library loads.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

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

bool write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

Error write_snapshot(Allocator& allocator, const std::string& path) {
  const std::string expanded = expand_path(path);
  if (!write_file(expanded, snapshot_text(allocator))) {
    return fail(Error::invalid_value, "cannot write snapshot file %s: %s", expanded.c_str(),
                std::strerror(errno));
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
