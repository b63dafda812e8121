#include <catch2/catch.hpp>

#include "core/size_classes.h"
#include "util/units.h"

using namespace cudalloc;

TEST_CASE("every size maps to the smallest class that holds it", "[size_classes]") {
  const SizeClasses classes(256 * KiB);
  CHECK(classes.slab_max() == 256 * KiB);
  for (std::size_t size = 1; size <= classes.slab_max(); size += 37) {
    const int c = classes.class_of(size);
    REQUIRE(classes.size_of(c) >= size);
    if (c > 0) REQUIRE(classes.size_of(c - 1) < size);
  }
}

TEST_CASE("classes are 256-byte multiples with bounded rounding waste", "[size_classes]") {
  const SizeClasses classes(1 * MiB);
  for (int c = 0; c < classes.count(); ++c) {
    const std::size_t s = classes.size_of(c);
    CHECK(s % 256 == 0);
    CHECK(classes.slab_bytes(c) % (2 * MiB) == 0);
    CHECK(classes.slab_bytes(c) / s >= 8);
    if (c > 0 && s > 2048) {
      // The worst request for class c is one byte above class c-1.
      const double waste = double(s - classes.size_of(c - 1) - 1) / double(s);
      CHECK(waste <= 0.125);
    }
  }
}

TEST_CASE("slab_max is clamped and rounded up to a class", "[size_classes]") {
  CHECK(SizeClasses(1).slab_max() == 256);
  CHECK(SizeClasses(100 * MiB).slab_max() == 1 * MiB);
  const SizeClasses odd(300 * KiB);
  CHECK(odd.slab_max() >= 300 * KiB);
  CHECK(odd.class_of(odd.slab_max()) == odd.count() - 1);
}
