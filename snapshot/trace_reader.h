// Reading traces and snapshots written by cudalloc, by PyTorch or by RMM:
//   - JSON in PyTorch's snapshot schema, plain or gzip-compressed (streamed: a trace of
//     millions of events is never held as a JSON document)
//   - PyTorch's own pickled snapshots (torch.cuda.memory._dump_snapshot), without PyTorch
//   - RMM's logging_resource_adaptor CSV (Thread,Time,Action,Pointer,Size,Stream)
// Every failure is a message that starts with the path and says where: the byte offset of
// malformed input, the device and event index of a malformed event. Files are opened, bounded
// and checked by snapshot/input_file.h, values by snapshot/values.h, as in snapshot_loader.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace cudalloc::snapshot {

struct TraceRecord {
  TraceAction action;
  std::uint64_t addr;
  std::uint64_t size;
  std::uint64_t stream;
  int device;
};

struct TraceFile {
  std::string format;                // "json", "pickle" or "rmm-csv"
  std::vector<TraceRecord> events;   // device by device, each in recorded order
  std::uint64_t other_events = 0;    // actions replay does not use (snapshot, segment_map...)
  nlohmann::json meta;               // the top-level "meta" object, if any
};

// Reads the trace in `path`. Returns false and sets *error on malformed or truncated input.
bool read_trace(const std::string& path, TraceFile* out, std::string* error);

// Reads a whole snapshot document (JSON, gzip JSON or pickle). A bare list is taken as the
// segments, as PyTorch's tools do.
bool read_snapshot(const std::string& path, nlohmann::json* out, std::string* error);

// Extracts the trace events of a snapshot document.
bool trace_from_document(const nlohmann::json& doc, TraceFile* out, std::string* error);

}  // namespace cudalloc::snapshot
