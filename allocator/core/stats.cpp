#include "core/stats.h"

#include <cstring>

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

const char* stat_field_torch_name(int index, int* gauge) {
  const char* name = stat_field_name(index);
  if (name == nullptr) return nullptr;
  struct Entry {
    const char* field;
    const char* torch;
    int gauge;
  };
  static constexpr Entry kTorch[] = {
#define CUDALLOC_TORCH_NAME(field, torch, is_gauge) {#field, torch, is_gauge},
      CUDALLOC_TORCH_STAT_NAMES(CUDALLOC_TORCH_NAME)
#undef CUDALLOC_TORCH_NAME
  };
  for (const Entry& e : kTorch) {
    if (std::strcmp(e.field, name) == 0) {
      if (gauge != nullptr) *gauge = e.gauge;
      return e.torch;
    }
  }
  return nullptr;
}

}  // namespace cudalloc
