#include "view/snapshot_fields.h"

#include <algorithm>

namespace cudalloc::view {

using nlohmann::json;

std::uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::uint64_t>() : 0;
}

const json* cudalloc_device_info(const json& doc, int device) {
  auto section = doc.find("cudalloc");
  if (section == doc.end() || !section->is_object()) return nullptr;
  auto devices = section->find("devices");
  if (devices == section->end() || !devices->is_array()) return nullptr;
  for (const json& d : *devices) {
    auto id = d.is_object() ? d.find("device") : d.end();
    if (id != d.end() && id->is_number_integer() && id->get<int>() == device) return &d;
  }
  return nullptr;
}

std::uint64_t segment_host_bytes(const nlohmann::json& seg) {
  return std::min(u64(seg, "host_size"), u64(seg, "total_size"));
}

std::uint64_t segment_device_bytes(const nlohmann::json& seg) {
  return u64(seg, "total_size") - segment_host_bytes(seg);
}

const char* segment_location(const nlohmann::json& seg) {
  const std::uint64_t host = segment_host_bytes(seg);
  if (host == 0) return "device";
  return host == u64(seg, "total_size") ? "host" : "mixed";
}

std::string frame_text(const nlohmann::json& frame, const char* key) {
  auto it = frame.find(key);
  return it != frame.end() && it->is_string() ? it->get<std::string>() : "?";
}

std::int64_t frame_line(const nlohmann::json& frame) {
  auto it = frame.find("line");
  return it != frame.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

}  // namespace cudalloc::view
