#include "core/stats.h"

namespace cudalloc {

const char* stat_field_name(int index) {
  static constexpr const char* kNames[] = {
#define CUDALLOC_STAT_NAME(name, help) #name,
      CUDALLOC_STAT_FIELDS(CUDALLOC_STAT_NAME)
#undef CUDALLOC_STAT_NAME
  };
  constexpr int n = static_cast<int>(sizeof kNames / sizeof kNames[0]);
  return index >= 0 && index < n ? kNames[index] : nullptr;
}

}  // namespace cudalloc
