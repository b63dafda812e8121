// Python pickles of plain data (dicts, lists, tuples, strings, ints, floats, bools, None),
// which is what PyTorch's memory snapshots are, converted to and from JSON documents.
//
// The writer uses only protocol-2 opcodes that PyTorch's MemoryViz.js unpickler reads:
// PROTO, EMPTY_DICT/LIST, MARK, SETITEMS, APPENDS, BININT, LONG1 (at most 8 bytes),
// BINUNICODE, BINFLOAT, NEWTRUE/NEWFALSE, NONE, STOP. Integers never exceed 8 bytes.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace cudalloc::snapshot {

// Parses `data`; returns false with the byte offset and reason in *error.
bool pickle_to_json(const std::string& data, nlohmann::json* out, std::string* error);

std::string json_to_pickle(const nlohmann::json& doc);

}  // namespace cudalloc::snapshot
