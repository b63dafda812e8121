// `cudalloc options [--markdown] [--conf CONF]`: the configuration reference, generated from
// the options table, and a check of a CUDALLOC_CONF string.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "api/options.h"
#include "cli/commands.h"
#include "cli/usage.h"

namespace cudalloc::cli {
namespace {

constexpr const char* kUsage =
    "usage: cudalloc options [--markdown] [--conf CONF]\n"
    "  Lists every CUDALLOC_CONF key with its type, default and meaning.\n"
    "  --markdown  the reference as Markdown (docs/configuration.md)\n"
    "  --conf      check CONF: prints the resulting value of every key; exit 2 on a bad key\n"
    "              or value\n";

}  // namespace

int options_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  bool markdown = false;
  const char* conf = nullptr;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--markdown") {
      markdown = true;
    } else if (args[i] == "--conf" && i + 1 < args.size()) {
      conf = args[++i].c_str();
    } else {
      return usage_error(kUsage);
    }
  }
  Settings settings;
  if (conf != nullptr) {
    const auto warnings = parse_conf(conf, &settings);
    for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    for (const Option& o : options()) std::printf("%s: %s\n", o.key, o.get(settings).c_str());
    return warnings.empty() ? 0 : 2;
  }
  if (markdown) {
    std::fputs(options_markdown().c_str(), stdout);
    return 0;
  }
  int width = 0;  // the longest key, so that every row lines up
  for (const Option& o : options()) width = std::max(width, int(std::strlen(o.key)));
  for (const Option& o : options()) {
    std::printf("%-*s %-9s default %-12s %s\n", width, o.key, option_type_name(o.type),
                o.get(settings).c_str(), o.help);
  }
  return 0;
}

}  // namespace cudalloc::cli
