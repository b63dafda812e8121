// Loading a whole snapshot for the tools that show one (view, diff): the document without its
// device_traces, and the trace events as compact records. A trace of millions of events is
// never held as JSON objects: each event is parsed, recorded and dropped.
//
// Reads the same inputs as read_snapshot (JSON, gzip JSON, PyTorch pickle). Unlike
// read_trace it keeps every action the viewer draws (segment_map, segment_unmap, ...) and the
// time stamps.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cudalloc::snapshot {

enum class EventKind : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  oom,
  other,  // an action the tools do not interpret (snapshot, user annotations, ...)
};

// The kind named `action` ("alloc", "segment_map", ...), or EventKind::other.
EventKind event_kind_from_name(const std::string& action);

struct SnapshotEvent {
  // For oom events, the device's free memory when the request failed ("device_free"), as
  // PyTorch's own trace entries keep it in the address.
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::int64_t time_us = -1;   // -1: the event has no time stamp
  std::int64_t reserved = -1;  // cudalloc's "reserved_bytes" after the event; -1: not recorded
  std::uint32_t stack = 0;     // an alloc's frames: LoadedSnapshot::stacks[stack - 1]; 0: none
  std::int16_t device = 0;     // at most kMaxTraceDevices lists
  EventKind kind = EventKind::other;
};
static_assert(sizeof(SnapshotEvent) == 48, "a trace of millions of events stays compact");

// The most device lists a trace may have (a device index is 16 bits in SnapshotEvent).
constexpr std::size_t kMaxTraceDevices = 4096;

struct LoadedSnapshot {
  nlohmann::json doc;                 // the snapshot with "device_traces" emptied
  std::vector<SnapshotEvent> events;  // device by device, each in recorded order
  // The distinct stacks of the alloc events that have "frames" (PyTorch's lists of {filename,
  // line, name}, innermost first), each once: events refer to them by SnapshotEvent::stack.
  std::vector<nlohmann::json> stacks;
  std::string format;                 // "json" or "pickle"
};

// Reads `path`. Returns false with a message saying where on missing, truncated or malformed
// input, and on a document that is not an object (a bare segment list is wrapped as PyTorch's
// tools do). Never throws.
bool load_snapshot(const std::string& path, LoadedSnapshot* out, std::string* error);

}  // namespace cudalloc::snapshot
