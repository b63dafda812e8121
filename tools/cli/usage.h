// Help and usage errors, the same way in every subcommand: `--help` or `-h` prints the usage
// to stdout and exits 0; bad arguments print it to stderr and exit 2.
#pragma once

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "snapshot/input_file.h"

namespace cudalloc::cli {

inline bool asks_for_help(const Args& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

inline int print_help(const char* usage) {
  std::fputs(usage, stdout);
  return 0;
}

inline int usage_error(const char* usage) {
  std::fputs(usage, stderr);
  return 2;
}

// A bad value: one line naming the argument as given and what was expected, then exit 2.
// (The usage is printed for a missing or unknown argument, this for a wrong one.)
inline int argument_error(const char* command, const std::string& argument,
                          const std::string& expected) {
  std::fprintf(stderr, "cudalloc %s: %s: expected %s\n", command, argument.c_str(),
               expected.c_str());
  return 2;
}

// A whole decimal number from lo to hi; false for anything else ("x", "3x", "-3", "").
inline bool parse_count(const std::string& text, std::size_t lo, std::size_t hi,
                        std::size_t* out) {
  if (text.empty() || text.size() > 12) return false;
  std::size_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::size_t>(c - '0');
  }
  if (value < lo || value > hi) return false;
  *out = value;
  return true;
}

// The options of every command that reads traces or snapshots, for its usage text. main()
// takes them out of the arguments (take_input_options) before the command sees them.
#define CUDALLOC_INPUT_OPTIONS_USAGE                                                        \
  "  --max-input BYTES  refuse input larger than BYTES once decompressed (default 1G, or\n" \
  "                     CUDALLOC_MAX_INPUT); input must be a regular file, plain or gzip\n"
// For the commands that report no steps of their own (inspect, convert, diff): main() takes
// --progress out of their arguments and reports the percent read.
#define CUDALLOC_READ_PROGRESS_USAGE                                                        \
  "  --progress         report the percent of each input read on stderr, even when it is\n" \
  "                     not a terminal (on a terminal it appears once a read takes 2 s)\n"
static_assert(snapshot::kDefaultMaxInputBytes == std::uint64_t{1} << 30,
              "CUDALLOC_INPUT_OPTIONS_USAGE names the default");

// Removes `--max-input BYTES` from `args` and sets the bound. False with *error on a bad value.
inline bool take_input_options(Args* args, std::string* error) {
  for (std::size_t i = 0; i < args->size(); ++i) {
    if ((*args)[i] != "--max-input") continue;
    std::uint64_t bytes = 0;
    if (i + 1 >= args->size() || !snapshot::parse_max_input((*args)[i + 1], &bytes)) {
      *error = "--max-input needs a size such as 512M or 16G";
      return false;
    }
    snapshot::set_max_input_bytes(bytes);
    args->erase(args->begin() + std::ptrdiff_t(i), args->begin() + std::ptrdiff_t(i) + 2);
    --i;
  }
  return true;
}

}  // namespace cudalloc::cli
