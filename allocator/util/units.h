// Byte sizes as people write them. Pure functions, used by every layer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cudalloc {

// Parses "123", "512K", "2M", "8G", "1T", "1.5G", "64MiB", "4kb", "256 KiB" (binary
// multiples up to E, case insensitive, spaces allowed around the unit). Returns false on
// anything else, on negative values and on overflow.
bool parse_bytes(std::string_view text, std::size_t* bytes);

// "512 B", "1.50 KiB", "20.00 MiB", "3.25 GiB": two decimals, rounded (for figures).
std::string format_bytes(std::size_t bytes);

// Exact, for values a person reads and may type back (option values): the largest binary unit
// up to EiB in which `bytes` has at most two decimals, with no trailing zeros ("256 KiB",
// "20 MiB", "1.5 GiB", "1.25 KiB"), else bytes ("1000 B", "262145 B"). parse_bytes reads
// every result back to the same value.
std::string format_bytes_exact(std::size_t bytes);

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

}  // namespace cudalloc
