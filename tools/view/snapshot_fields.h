// Reading fields of snapshot documents that may lack them or hold other types: every reader
// of view and diff goes through these, so a missing field is never an exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace cudalloc::view {

// j[key] as an unsigned integer; 0 when absent or not an integer.
std::uint64_t u64(const nlohmann::json& j, const char* key);

// A stack frame's fields ({filename, line, name}) whatever their types: the text of a string,
// else "?"; the line if an integer, else 0.
std::string frame_text(const nlohmann::json& frame, const char* key);
std::int64_t frame_line(const nlohmann::json& frame);

// A segment's bytes in host memory (cudalloc's host tier: "host_size") and on the device
// (total_size - host_size). Device memory is what "reserved" means everywhere; the host tier
// is reported beside it, never in it, as cudalloc's stats count it.
std::uint64_t segment_host_bytes(const nlohmann::json& seg);
std::uint64_t segment_device_bytes(const nlohmann::json& seg);
// "device", "host" (all of it on the host) or "mixed" (a paged run partly on the host).
const char* segment_location(const nlohmann::json& seg);

// The entry of the snapshot's cudalloc.devices list for `device`, or null when there is none.
const nlohmann::json* cudalloc_device_info(const nlohmann::json& doc, int device);

}  // namespace cudalloc::view
