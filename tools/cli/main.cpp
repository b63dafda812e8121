// `cudalloc`: the command-line tool. `cudalloc help` lists the subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "api/cudalloc.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/usage.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const cudalloc::cli::Args&);
  bool reads_input = true;  // takes --max-input and --progress (cli/usage.h)
  bool reports_steps = false;  // parses --progress itself (it also reports its own steps)
};

constexpr Command kCommands[] = {
    {"options", "list CUDALLOC_CONF keys (--markdown for the reference), check --conf CONF",
     cudalloc::cli::options_command, false},
    {"replay", "replay a trace through cudalloc and PyTorch's rules on a simulated device",
     cudalloc::cli::replay_command, true, true},
    {"inspect", "summarize a snapshot: memory, fragmentation, largest blocks, segment map",
     cudalloc::cli::inspect_command},
    {"convert", "convert a snapshot between JSON and PyTorch's pickle (-o OUT.pickle|.json)",
     cudalloc::cli::convert_command},
    {"view", "write a self-contained HTML page of a snapshot: segment map, timeline, peaks",
     cudalloc::cli::view_command, true, true},
    {"diff", "what changed between two snapshots: stats, segments, blocks (--json)",
     cudalloc::cli::diff_command},
};

int usage(FILE* out) {
  std::fprintf(out, "cudalloc %s: a caching allocator for CUDA device memory\n\n"
                    "usage: cudalloc <command> [args]   (cudalloc <command> --help)\n\ncommands:\n",
               cudalloc_version_string());
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nreplay, inspect, convert, view and diff read regular files (plain or gzip) of\n"
                    "at most 1G once decompressed: --max-input BYTES or %s=BYTES raises it;\n"
                    "--progress reports the percent read on stderr (on a terminal it appears\n"
                    "by itself once a read takes 2 s)\n",
               cudalloc::snapshot::kMaxInputEnv);
  std::fprintf(out, "\nexit codes: 0 success, 1 the work failed (e.g. an output cannot be written,\n"
                    "an invariant broke in replay), 2 bad usage or bad input\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  if (!std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    return usage(stdout);
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("%s\n", cudalloc_version_string());
    return 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    // A document of an unexpected shape (a list where an object belongs) makes nlohmann::json
    // throw from deep inside a command: that is bad input, reported as such, not an abort.
    cudalloc::cli::Args args(argv + 2, argv + argc);
    std::string error;
    if (c.reads_input && !cudalloc::cli::take_input_options(&args, &error)) {
      std::fprintf(stderr, "cudalloc %s: %s\n", c.name, error.c_str());
      return 2;
    }
    if (c.reads_input) {
      const auto flag = std::find(args.begin(), args.end(), "--progress");
      cudalloc::cli::report_read_progress(flag != args.end());
      if (flag != args.end() && !c.reports_steps) args.erase(flag);
    }
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cudalloc %s: cannot use this input: %s\n", c.name, e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "cudalloc: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
