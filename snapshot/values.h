// The values every reader takes from traces and snapshots (sizes, addresses, streams, device
// numbers), checked one way whatever the format (JSON, pickle, RMM CSV) and whatever the
// command, so that no reader takes a size that another refuses, or wraps -5 to 2^64 - 5.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device_allocator.h"

namespace cudalloc::snapshot {

enum class ValueKind : std::uint8_t {
  size,     // bytes: 0 to kMaxSize, what the allocator would take
  address,  // an address or a stream handle: any 64-bit value, never negative
  device,   // a device number: 0 to kMaxDevice (an int everywhere)
};

constexpr std::uint64_t kMaxSize = DeviceAllocator::kMaxRequest;  // 2^50
constexpr std::uint64_t kMaxDevice = INT32_MAX;

// `value` (the field `name`) as a `kind`: true with *out, or false with *error =
// "'size' must be an integer from 0 to 1125899906842624 (2^50 bytes, the largest request), not -5".
bool read_value(const nlohmann::json& value, ValueKind kind, const std::string& name,
                std::uint64_t* out, std::string* error);

// A number as RMM's CSV writes it (decimal, or hexadecimal after 0x) as a JSON value for
// read_value: an integer when it is one that fits 64 bits, else the text itself.
nlohmann::json number_from_text(const std::string& text);

// A document with two top-level "device_traces" keys: a JSON parser keeps only the last, but
// a streaming reader has seen both, so every reader refuses it with this message.
constexpr const char* kDuplicateTraces =
    "the key device_traces appears twice at the top level of the document";

// One trace event: an object with a string "action"; "addr", "size", "stream",
// "reserved_bytes" and "device_free" valid when present. False with *error (without the event's position: callers add it).
bool check_event(const nlohmann::json& event, std::string* error);

// The parts of a snapshot document that readers interpret, where present: "segments" a list
// of objects with valid sizes, addresses and devices, their "blocks" likewise;
// "device_traces" a list of lists of valid events; the devices of cudalloc's section.
// False with *error saying where ("segments[2].blocks[0]: ...").
bool check_document(const nlohmann::json& doc, std::string* error);
// What a JSON object whose top-level keys are `keys` is, when it has neither "segments" nor
// "device_traces" (so is not a memory snapshot): the message every reader gives for it.
std::string not_a_snapshot(const std::vector<std::string>& keys);
// True when an object with these top-level keys is a memory snapshot.
bool is_snapshot_keys(const std::vector<std::string>& keys);

}  // namespace cudalloc::snapshot
