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
  CHECK((parse_bytes("2P", &v) && v == std::size_t{2} << 50));
  CHECK((parse_bytes("1 EiB", &v) && v == std::size_t{1} << 60));
  CHECK((parse_bytes("256 KiB", &v) && v == 256 * KiB));  // as format_bytes_exact writes it
  CHECK((parse_bytes("262145 B", &v) && v == 262145));
  // Whole counts are exact past 2^53, where a double would round them.
  CHECK((parse_bytes("9007199254740993", &v) && v == 9007199254740993ull));
  CHECK((parse_bytes("18446744073709551615", &v) && v == 18446744073709551615ull));
  CHECK((parse_bytes("15E", &v) && v == std::size_t{15} << 60));
}

TEST_CASE("parse_bytes rejects malformed sizes", "[units]") {
  std::size_t v = 7;
  for (const char* bad :
       {"", "G", "-1", "1Q", "1..5G", "abc", "1e3", "99999999999999T", "16E", "8 G B",
        "18446744073709551616", "99999999999999999999999"}) {
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

TEST_CASE("format_bytes_exact writes what a person reads and parse_bytes reads back", "[units]") {
  CHECK(format_bytes_exact(0) == "0 B");
  CHECK(format_bytes_exact(1000) == "1000 B");
  CHECK(format_bytes_exact(1024) == "1 KiB");
  CHECK(format_bytes_exact(1280) == "1.25 KiB");
  CHECK(format_bytes_exact(256 * KiB) == "256 KiB");
  CHECK(format_bytes_exact(262145) == "262145 B");  // no unit holds it exactly in 2 decimals
  CHECK(format_bytes_exact(20 * MiB) == "20 MiB");
  CHECK(format_bytes_exact(3 * GiB / 2) == "1.5 GiB");
  CHECK(format_bytes_exact(1024 * GiB) == "1 TiB");
  CHECK(format_bytes_exact(5 * 1024 * 1024 * GiB) == "5 PiB");
  CHECK(format_bytes_exact(std::size_t{1} << 60) == "1 EiB");
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{1023}, 1536 * KiB + 256,
                            3 * GiB / 4, 7 * GiB + 768 * MiB, std::size_t{1} << 50, 262145 * KiB}) {
    INFO(bytes);
    std::size_t back = 0;
    CHECK((parse_bytes(format_bytes_exact(bytes), &back) && back == bytes));
  }
}
