// Budget: how much memory the allocator may hold, on the device (the reserve cap: limit and
// fraction of the device's memory, the smaller one) and on the host (host_limit).
//
// A cap is never weaker than the smallest one asked for: a fraction so small that it rounds
// to 0 bytes still caps (at one byte, so that nothing more can be reserved), and 0 means "no
// cap" only when no cap was asked for.
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/settings.h"

namespace cudalloc {

class Budget {
 public:
  // `settings` is the allocator's own copy, which set_memory_limit/fraction change.
  Budget(const Settings& settings, std::size_t device_total)
      : settings_(settings), device_total_(device_total) {}

  std::size_t device_total() const { return device_total_; }
  // The effective cap on reserved device bytes, 0 for none.
  std::size_t reserve_cap() const {
    std::size_t cap = settings_.limit;
    if (settings_.fraction < 1.0 && device_total_ != 0) {
      const auto by_fraction = std::max<std::size_t>(
          1, static_cast<std::size_t>(settings_.fraction * static_cast<double>(device_total_)));
      if (cap == 0 || by_fraction < cap) cap = by_fraction;
    }
    return cap;
  }
  // Whether `more` device bytes fit under the cap with `reserved` already held.
  bool device_allows(std::size_t reserved, std::size_t more) const {
    const std::size_t cap = reserve_cap();
    return cap == 0 || (more <= cap && reserved <= cap - more);
  }
  // Whether `more` host bytes fit under host_limit with `held` already held.
  bool host_allows(std::size_t held, std::size_t more) const {
    const std::size_t cap = settings_.host_limit;
    return cap == 0 || (more <= cap && held <= cap - more);
  }
  // What the device may hold in all: the cap, else the device's memory (0: unknown).
  std::size_t device_budget() const {
    const std::size_t cap = reserve_cap();
    return cap != 0 ? cap : device_total_;
  }

 private:
  const Settings& settings_;
  const std::size_t device_total_;
};

}  // namespace cudalloc
