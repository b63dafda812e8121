// Comparing snapshot documents across a JSON -> pickle -> JSON round trip, for the fuzz
// targets of the readers.
//
// The pickle writer (snapshot/pickle.h) cannot keep everything a JSON document holds, by
// design: unsigned integers of 2^63 and above become floats, and a NaN read from a pickle
// stays a NaN (never equal to itself). equivalent() accepts exactly those differences and
// nothing else; the reader refuses documents nested deeper than kPickleMaxDepth.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace cudalloc::fuzz {

// The deepest node (root = 0) that pickle_to_json turns into JSON.
constexpr int kPickleMaxDepth = 200;

// The depth of the deepest node of `doc`, counting no further than `limit` + 1.
int document_depth(const nlohmann::json& doc, int limit);

// True when `after` is what a pickle round trip of `before` may give.
bool equivalent(const nlohmann::json& before, const nlohmann::json& after);

// Aborts with a message if json_to_pickle(doc) does not read back as an equivalent document
// (or, for documents deeper than the reader allows, is not refused with a message).
void check_pickle_round_trip(const nlohmann::json& doc, const char* target);

}  // namespace cudalloc::fuzz
