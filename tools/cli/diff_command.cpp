// `cudalloc diff A B [--json] [--top N]`: what changed from snapshot A to snapshot B: stat
// deltas, segments added / removed / resized, blocks allocated / freed, largest first.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/usage.h"
#include "snapshot/snapshot_loader.h"
#include "util/units.h"
#include "view/snapshot_diff.h"

namespace cudalloc::cli {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: cudalloc diff A B [--json] [--top N] [--progress]\n"
    "  What changed from snapshot A to snapshot B, per device: reserved, allocated, active,\n"
    "  requested and cached bytes and counts; segments added, removed and resized; blocks\n"
    "  allocated and freed (by address and size). Largest changes first.\n"
    "  A, B: JSON (cudalloc or PyTorch schema), .json.gz or PyTorch pickles\n"
    "  --json  the whole difference as one JSON object (every block and segment)\n"
    "  --top   entries of each list in the text output (default 10)\n"
    CUDALLOC_INPUT_OPTIONS_USAGE CUDALLOC_READ_PROGRESS_USAGE;

std::string signed_bytes(std::int64_t delta) {
  const std::string size = format_bytes(static_cast<std::size_t>(std::llabs(delta)));
  return delta > 0 ? "+" + size : delta < 0 ? "-" + size : size;
}

bool is_count(const std::string& name) { return name.find("bytes") == std::string::npos; }

void print_change(const std::string& name, const json& c) {
  const auto before = c["before"].get<std::uint64_t>(), after = c["after"].get<std::uint64_t>();
  const auto delta = c["delta"].get<std::int64_t>();
  if (is_count(name)) {
    std::printf("  %-18s %12llu -> %-12llu (%+lld)\n", name.c_str(),
                static_cast<unsigned long long>(before), static_cast<unsigned long long>(after),
                static_cast<long long>(delta));
  } else {
    std::printf("  %-18s %12s -> %-12s (%s)\n", name.c_str(), format_bytes(before).c_str(),
                format_bytes(after).c_str(), signed_bytes(delta).c_str());
  }
}

// The segment figures in a fixed order, then cudalloc's own counters that changed.
void print_stats(const json& device) {
  for (const char* name : {"reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes",
                           "cached_bytes", "segments", "allocations", "free_blocks"}) {
    print_change(name, device["stats"][name]);
  }
  if (!device.contains("cudalloc_stats")) return;
  std::printf("  cudalloc stats that changed (current):\n");
  for (const auto& [name, c] : device["cudalloc_stats"].items()) {
    if (c["delta"].get<std::int64_t>() != 0) print_change("  " + name, c);
  }
}

void print_list(const char* title, const json& list, char mark, std::size_t top,
                const char* size_key) {
  std::printf("  %s: %zu\n", title, list.size());
  for (std::size_t i = 0; i < std::min(top, list.size()); ++i) {
    const json& e = list[i];
    std::printf("    %c %16s %12s", mark, e["address"].get<std::string>().c_str(),
                format_bytes(e[size_key].get<std::uint64_t>()).c_str());
    if (e.contains("size_before") && mark == '~') {
      std::printf("  (was %s)", format_bytes(e["size_before"].get<std::uint64_t>()).c_str());
    }
    std::printf("\n");
  }
  if (list.size() > top) std::printf("    ... %zu more (--top, --json)\n", list.size() - top);
}

void print_text(const json& diff, std::size_t top) {
  if (diff["devices"].empty()) std::printf("no segments in either snapshot\n");
  for (const json& d : diff["devices"]) {
    std::printf("device %d\n", d["device"].get<int>());
    print_stats(d);
    print_list("segments added", d["segments"]["added"], '+', top, "size_after");
    print_list("segments removed", d["segments"]["removed"], '-', top, "size_before");
    print_list("segments resized", d["segments"]["resized"], '~', top, "size_after");
    print_list("blocks allocated", d["blocks"]["allocated"], '+', top, "size");
    print_list("blocks freed", d["blocks"]["freed"], '-', top, "size");
  }
}

// False on a missing or unknown argument; a wrong value sets *bad to its argument_error.
bool parse_args(const Args& args, std::vector<std::string>* paths, bool* as_json,
                std::size_t* top, int* bad) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json") {
      *as_json = true;
    } else if (args[i] == "--top" && i + 1 < args.size()) {
      if (!parse_count(args[++i], 0, 1000000, top)) {
        *bad = argument_error("diff", "--top '" + args[i] + "'", "a whole number from 0 to 1000000");
        return false;
      }
    } else if (!args[i].empty() && args[i][0] != '-' && paths->size() < 2) {
      paths->push_back(args[i]);
    } else {
      return false;
    }
  }
  return paths->size() == 2;
}

}  // namespace

int diff_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  std::vector<std::string> paths;
  bool as_json = false;
  std::size_t top = 10;
  int bad = 0;
  if (!parse_args(args, &paths, &as_json, &top, &bad)) return bad != 0 ? bad : usage_error(kUsage);
  // The two snapshots are read at once, on two threads: a read is one core's work.
  snapshot::LoadedSnapshot snaps[2];
  std::string errors[2];
  bool loaded[2] = {false, false};
  // An exception must not leave a thread (std::terminate): each becomes that file's error.
  auto load = [&](int i) {
    try {
      loaded[i] = snapshot::load_snapshot(paths[std::size_t(i)], &snaps[i], &errors[i]);
    } catch (const std::exception& e) {
      errors[i] = paths[std::size_t(i)] + ": cannot use this input: " + e.what();
    }
  };
  std::thread second(load, 1);
  load(0);
  second.join();
  for (int i = 0; i < 2; ++i) {
    if (!loaded[i]) {
      std::fprintf(stderr, "cudalloc diff: %s\n", errors[i].c_str());
      return 2;
    }
  }
  json diff;
  try {
    diff = view::snapshot_diff(snaps[0].doc, snaps[1].doc);
  } catch (const json::exception& e) {  // a field of an unexpected type
    std::fprintf(stderr, "cudalloc diff: malformed snapshot (%s or %s): %s\n", paths[0].c_str(),
                 paths[1].c_str(), e.what());
    return 2;
  }
  if (as_json) {
    diff["before"] = paths[0];
    diff["after"] = paths[1];
    std::printf("%s\n", diff.dump(2).c_str());
  } else {
    print_text(diff, top);
  }
  return 0;
}

}  // namespace cudalloc::cli
