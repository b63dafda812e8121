#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "core/live_map.h"

using namespace cudalloc;

TEST_CASE("LiveMap agrees with std::map under random churn", "[live_map]") {
  LiveMap map;
  std::map<std::uintptr_t, std::size_t> truth;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    // Keys in a narrow range force long probe runs and wrap-around.
    const std::uintptr_t key = (rng() % 5000 + 1) * 256;
    LiveEntry* e = map.find(key);
    REQUIRE((e != nullptr) == (truth.count(key) == 1));
    if (e != nullptr) {
      REQUIRE(e->requested == truth[key]);
      map.erase(e);
      truth.erase(key);
    } else {
      map.insert(LiveEntry{key, Owner{}, key / 256});
      truth[key] = key / 256;
    }
    REQUIRE(map.size() == truth.size());
  }
  std::size_t seen = 0;
  map.for_each([&](const LiveEntry& e) {
    ++seen;
    CHECK(truth.at(e.key) == e.requested);
  });
  CHECK(seen == truth.size());
}

TEST_CASE("LiveMap never finds key 0 (the empty-slot marker, a NULL pointer)", "[live_map]") {
  LiveMap map;
  CHECK(map.find(0) == nullptr);  // an empty table: every slot has key 0
  map.insert(LiveEntry{256, Owner{}, 1});
  CHECK(map.find(0) == nullptr);
  const LiveMap& constant = map;
  CHECK(constant.find(0) == nullptr);
  CHECK(map.find(256) != nullptr);
}
