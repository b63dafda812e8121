// Counters with current / peak / total, defined once (stats_fields.h).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/stats_fields.h"

namespace cudalloc {

struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t total = 0;

  void increase(std::int64_t amount) {
    current += amount;
    total += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) { current -= amount; }
  // For event counters: one more occurrence.
  void count() { increase(1); }
  void reset_peak() { peak = current; }
};

struct Stats {
#define CUDALLOC_STAT_MEMBER(name, help) Stat name;
  CUDALLOC_STAT_FIELDS(CUDALLOC_STAT_MEMBER)
#undef CUDALLOC_STAT_MEMBER

  // Calls f(name, help, stat) for every field, in the list's order.
  template <typename F>
  void for_each(F&& f) const {
#define CUDALLOC_STAT_VISIT(name, help) f(std::string_view(#name), std::string_view(help), name);
    CUDALLOC_STAT_FIELDS(CUDALLOC_STAT_VISIT)
#undef CUDALLOC_STAT_VISIT
  }
  template <typename F>
  void for_each_mutable(F&& f) {
#define CUDALLOC_STAT_VISIT(name, help) f(std::string_view(#name), name);
    CUDALLOC_STAT_FIELDS(CUDALLOC_STAT_VISIT)
#undef CUDALLOC_STAT_VISIT
  }
};

constexpr int stat_field_count() {
  int n = 0;
#define CUDALLOC_STAT_ONE(name, help) ++n;
  CUDALLOC_STAT_FIELDS(CUDALLOC_STAT_ONE)
#undef CUDALLOC_STAT_ONE
  return n;
}

// Name of field `index` in list order, or nullptr.
const char* stat_field_name(int index);
// PyTorch's key for field `index` (CUDALLOC_TORCH_STAT_NAMES), or nullptr; *gauge says
// whether it is a gauge (current/peak/allocated/freed) or a counter.
const char* stat_field_torch_name(int index, int* gauge);

}  // namespace cudalloc
