#include "util/units.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace cudalloc {
namespace {

bool unit_shift(std::string_view unit, int* shift) {
  std::string u;
  for (char c : unit) u.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (u.size() > 1 && u.back() == 'b') u.pop_back();     // "kb", "mib", "b"
  if (u.size() > 1 && u.back() == 'i') u.pop_back();     // "mi" -> "m"
  static constexpr struct { const char* name; int shift; } kUnits[] = {
      {"", 0}, {"b", 0}, {"k", 10}, {"m", 20}, {"g", 30}, {"t", 40}, {"p", 50}, {"e", 60}};
  for (const auto& entry : kUnits) {
    if (u == entry.name) {
      *shift = entry.shift;
      return true;
    }
  }
  return false;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool parse_bytes(std::string_view text, std::size_t* bytes) {
  text = trimmed(text);
  std::size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return false;
  int shift = 0;
  if (!unit_shift(trimmed(text.substr(digits)), &shift)) return false;
  const std::string_view number_text = text.substr(0, digits);
  if (number_text.find('.') == std::string_view::npos) {
    // Whole numbers exactly: through a double, a count above 2^53 bytes would be rounded.
    std::uint64_t value = 0;
    for (const char c : number_text) {
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (value > (UINT64_MAX - digit) / 10) return false;
      value = value * 10 + digit;
    }
    if (shift > 0 && value > (UINT64_MAX >> shift)) return false;
    *bytes = static_cast<std::size_t>(value << shift);
    return true;
  }
  const std::string number(number_text);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) return false;
  const double scaled = std::ldexp(value, shift);
  if (scaled >= 18446744073709551615.0) return false;
  *bytes = static_cast<std::size_t>(scaled);
  return true;
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string format_bytes_exact(std::size_t bytes) {
  static constexpr struct { const char* name; int shift; } kUnits[] = {
      {"EiB", 60}, {"PiB", 50}, {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  static constexpr const char* kQuarters[] = {"", ".25", ".5", ".75"};
  for (const auto& unit : kUnits) {
    const std::size_t size = std::size_t{1} << unit.shift;
    const std::size_t quarter = size / 4;
    if (bytes < size || bytes % quarter != 0) continue;
    return std::to_string(bytes / size) + kQuarters[bytes % size / quarter] + " " + unit.name;
  }
  return std::to_string(bytes) + " B";
}

}  // namespace cudalloc
