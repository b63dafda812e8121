// The options table: the single description of every CUDALLOC_CONF key. It drives parsing,
// the generated configuration reference (`cudalloc options --markdown`) and the settings
// recorded in snapshots.
//
// CUDALLOC_CONF is "key:value,key:value". Keys are case-insensitive. An unknown key or a bad
// value produces a warning naming the key, and the default (or the last good value) is kept.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/settings.h"

namespace cudalloc {

enum class OptionType { bytes, fraction, count, boolean, path, choice };

struct Option {
  const char* key;
  OptionType type;
  const char* help;
  // Returns false (and says why in *why) if `text` is not a valid value; else stores it.
  bool (*set)(Settings& settings, std::string_view text, std::string* why);
  // The value for machines, as snapshots record it: sizes and counts as decimal numbers
  // ("262144"), fractions as "%g", booleans as true/false, paths as given. set() takes it back.
  std::string (*value)(const Settings& settings);
  // The value for people (cudalloc options, the reference, warnings): sizes in binary units,
  // exactly ("256 KiB", "1.5 GiB"; 0, which means no cap, stays "0"), anything else as
  // value(). set() takes it back too.
  std::string get(const Settings& settings) const;
};

// A static table without a destructor, so it stays valid in exit-time handlers.
std::span<const Option> options();
const char* option_type_name(OptionType type);

// Applies `conf` to *settings; returns one warning per problem (already phrased for users).
std::vector<std::string> parse_conf(std::string_view conf, Settings* settings);

// 1/true/on/yes (true) or 0/false/off/no (false), case-insensitive; false if neither.
bool parse_bool(std::string_view text, bool* value);

// User text as a warning echoes it: in full up to 64 characters, else its first 64, "..." and
// its length, so that a huge environment variable does not flood the log.
std::string echo(std::string_view text);

// The reference table in Markdown: key, type, default, meaning.
std::string options_markdown();

}  // namespace cudalloc
