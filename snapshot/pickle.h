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

// The pieces of json_to_pickle's encoding, for a document written in parts (a snapshot whose
// trace events are encoded as they are read, snapshot_encode.h). A whole pickle is
// pickle_begin, one value, pickle_end. Containers: open, their items (a dict's as key then
// value), close; an empty one is open_*(out, false) and no close.
void pickle_begin(std::string& out);
void pickle_end(std::string& out);
void pickle_value(std::string& out, const nlohmann::json& value);
void pickle_open_dict(std::string& out, bool has_items);
void pickle_close_dict(std::string& out);
void pickle_open_list(std::string& out, bool has_items);
void pickle_close_list(std::string& out);

}  // namespace cudalloc::snapshot
