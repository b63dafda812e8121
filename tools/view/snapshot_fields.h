// Reading fields of snapshot documents that may lack them or hold other types: every reader
// of view and diff goes through these, so a missing field is never an exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace cudalloc::view {

// j[key] as an unsigned integer; 0 when absent or not an integer.
std::uint64_t u64(const nlohmann::json& j, const char* key);

// The entry of the snapshot's cudalloc.devices list for `device`, or null when there is none.
const nlohmann::json* cudalloc_device_info(const nlohmann::json& doc, int device);

}  // namespace cudalloc::view
