#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <vector>

#include "core/free_bins.h"

using namespace cudalloc;

TEST_CASE("FreeBins gives the same best fit as an ordered set", "[free_bins]") {
  FreeBins bins;
  auto order = [](const Block* a, const Block* b) {
    return a->size != b->size ? a->size < b->size : a->addr < b->addr;
  };
  std::set<Block*, decltype(order)> truth(order);
  std::vector<Block> storage(4000);
  std::mt19937_64 rng(3);
  for (std::size_t i = 0; i < storage.size(); ++i) {
    storage[i].addr = (i + 1) << 30;
    storage[i].size = 512 * (1 + rng() % (std::size_t(1) << (rng() % 22)));
  }
  std::vector<Block*> out;
  for (int step = 0; step < 100000; ++step) {
    const int op = int(rng() % 3);
    if (op == 0 && out.size() < storage.size()) {
      Block* b = &storage[rng() % storage.size()];
      if (truth.count(b) == 0) {
        bins.insert(b);
        truth.insert(b);
      }
    } else if (op == 1 && !truth.empty()) {
      const std::size_t want = 512 * (1 + rng() % (std::size_t(1) << (rng() % 22)));
      Block key;
      key.size = want;
      auto it = truth.lower_bound(&key);
      Block* expected = it == truth.end() ? nullptr : *it;
      REQUIRE(bins.best_fit(want) == expected);
      if (expected != nullptr) {
        bins.erase(expected);
        truth.erase(expected);
      }
    } else if (!truth.empty()) {
      auto it = truth.begin();
      std::advance(it, long(rng() % truth.size()));
      REQUIRE(bins.contains(*it));
      bins.erase(*it);
      truth.erase(it);
    }
    REQUIRE(bins.size() == truth.size());
  }
}

TEST_CASE("bins split each doubling into sixteen", "[free_bins]") {
  CHECK(FreeBins::bin_of(512) == 0);
  CHECK(FreeBins::bin_of(1024) == 16);
  CHECK(FreeBins::bin_of(1024 + 64) == 17);
  CHECK(FreeBins::bin_of(std::size_t(1) << 62) == FreeBins::kBins - 1);
}
