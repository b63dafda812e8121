#include <catch2/catch.hpp>

#include "util/units.h"

using namespace cudalloc;

TEST_CASE("parse_bytes accepts sizes with binary suffixes", "[units]") {
  std::size_t v = 0;
  CHECK((parse_bytes("0", &v) && v == 0));
  CHECK((parse_bytes("512", &v) && v == 512));
  CHECK((parse_bytes("4k", &v) && v == 4096));
  CHECK((parse_bytes("2M", &v) && v == 2 * MiB));
  CHECK((parse_bytes("8G", &v) && v == 8 * GiB));
  CHECK((parse_bytes("1.5GiB", &v) && v == 3 * GiB / 2));
  CHECK((parse_bytes(" 64mb ", &v) && v == 64 * MiB));
  CHECK((parse_bytes("1T", &v) && v == 1024 * GiB));
}

TEST_CASE("parse_bytes rejects malformed sizes", "[units]") {
  std::size_t v = 7;
  for (const char* bad : {"", "G", "-1", "1Q", "1..5G", "abc", "1e3", "99999999999999T", "8 G B"}) {
    INFO(bad);
    CHECK_FALSE(parse_bytes(bad, &v));
  }
  CHECK(v == 7);
}

TEST_CASE("format_bytes picks a readable unit", "[units]") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(20 * MiB) == "20.00 MiB");
}
