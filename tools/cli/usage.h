// Help and usage errors, the same way in every subcommand: `--help` or `-h` prints the usage
// to stdout and exits 0; bad arguments print it to stderr and exit 2.
#pragma once

#include <cstdio>

#include "cli/commands.h"

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

}  // namespace cudalloc::cli
