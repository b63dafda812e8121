#include "doc_compare.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "snapshot/pickle.h"

namespace cudalloc::fuzz {

using nlohmann::json;

int document_depth(const json& doc, int limit) {
  if (!doc.is_structured() || limit < 0) return 0;
  int deepest = 0;
  for (const json& child : doc) {
    deepest = std::max(deepest, 1 + document_depth(child, limit - 1));
    if (deepest > limit) break;
  }
  return deepest;
}

bool equivalent(const json& before, const json& after) {
  if (before.is_number_unsigned() && before.get<std::uint64_t>() > std::uint64_t(INT64_MAX)) {
    return after.is_number_float() && after.get<double>() == double(before.get<std::uint64_t>());
  }
  if (before.is_number_float() && after.is_number_float() && std::isnan(before.get<double>())) {
    return std::isnan(after.get<double>());
  }
  if (before.is_array() && after.is_array()) {
    if (before.size() != after.size()) return false;
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (!equivalent(before[i], after[i])) return false;
    }
    return true;
  }
  if (before.is_object() && after.is_object()) {
    if (before.size() != after.size()) return false;
    for (auto it = before.begin(); it != before.end(); ++it) {
      auto other = after.find(it.key());
      if (other == after.end() || !equivalent(it.value(), *other)) return false;
    }
    return true;
  }
  return before == after;  // scalars; numbers compare by value across int/unsigned/float
}

void check_pickle_round_trip(const json& doc, const char* target) {
  const std::string pickled = snapshot::json_to_pickle(doc);
  json back;
  std::string error;
  const bool ok = snapshot::pickle_to_json(pickled, &back, &error);
  const bool too_deep = document_depth(doc, kPickleMaxDepth) > kPickleMaxDepth;
  if (too_deep) {
    if (ok || error.find("nesting too deep") == std::string::npos) {
      std::fprintf(stderr, "%s: a document nested too deep was not refused (%s)\n", target,
                   error.c_str());
      std::abort();
    }
    return;
  }
  if (!ok) {
    std::fprintf(stderr, "%s: the pickle written for a document does not read back: %s\n",
                 target, error.c_str());
    std::abort();
  }
  if (!equivalent(doc, back)) {
    std::fprintf(stderr, "%s: the document changed in a pickle round trip\n", target);
    std::abort();
  }
}

}  // namespace cudalloc::fuzz
