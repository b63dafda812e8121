#include "view/snapshot_fields.h"

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

}  // namespace cudalloc::view
