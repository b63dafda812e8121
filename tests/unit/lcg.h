// Lcg: the deterministic generator of the tests' generated workloads. The standard library's
// engines are not used, so that a workload is the same sequence wherever the tests run. A
// 64-bit linear congruential generator with Knuth's MMIX constants; its low bits have short
// periods, so values come from the high bits.
#pragma once

#include <cstdint>

namespace cudalloc::test {

struct Lcg {
  std::uint64_t state;
  // The next state, all 64 bits (callers shift to the high bits they need).
  std::uint64_t next() { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; }
  // A value in [0, bound) from bits 33-63 of the next state; bound > 0.
  std::uint64_t below(std::uint64_t bound) { return (next() >> 33) % bound; }
};

}  // namespace cudalloc::test
