// `cudalloc view SNAPSHOT [-o REPORT.html] [--progress]`: one self-contained HTML page (no
// network, opens from disk) with the segment map (at any event of the trace's last ones, by
// stream, searchable by address), the timeline of live and reserved memory with its
// out-of-memory events, the largest allocations, fragmentation figures, whether the trace is
// complete, and the allocator's settings.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/view_replay.h"
#include "cli/usage.h"
#include "snapshot/snapshot_loader.h"
#include "view/html_page.h"
#include "view/view_model.h"

namespace cudalloc::cli {
namespace {

constexpr const char* kUsage =
    "usage: cudalloc view SNAPSHOT [-o REPORT.html] [--no-replay] [--progress]\n"
    "  Writes one self-contained HTML page (inline script and style, no network) showing the\n"
    "  segment map (at any of the trace's last events, by stream, searchable by address), live\n"
    "  and reserved memory over the trace with its out-of-memory events, the same trace\n"
    "  replayed under PyTorch's native allocator, its expandable segments and cudalloc, the\n"
    "  largest allocations as bands over the trace, fragmentation and page maps over the\n"
    "  trace, who held memory at the peak and at each out-of-memory (by stack frame, when\n"
    "  recorded), whether the trace is complete, and the allocator's settings.\n"
    "  SNAPSHOT: JSON (cudalloc or PyTorch schema), .json.gz or a PyTorch pickle\n"
    "  -o           where to write the page (default: SNAPSHOT without its extension + .html)\n"
    "  --no-replay  leave out the replayed curves (they cost a replay of the trace per policy)\n"
    "  --progress   report each step and the percent of SNAPSHOT read on stderr, even when it\n"
    "               is not a terminal (on a terminal, reads of over 2 s show it anyway)\n"
    CUDALLOC_INPUT_OPTIONS_USAGE;

struct ViewArgs {
  std::string snapshot, output;
  bool progress = false;
  bool replay = true;
};

bool parse_args(const Args& args, ViewArgs* v) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "-o" || args[i] == "--output") && i + 1 < args.size()) {
      v->output = args[++i];
    } else if (args[i] == "--progress") {
      v->progress = true;
    } else if (args[i] == "--no-replay") {
      v->replay = false;
    } else if (v->snapshot.empty() && !args[i].empty() && args[i][0] != '-') {
      v->snapshot = args[i];
    } else {
      return false;
    }
  }
  return !v->snapshot.empty();
}

// "dir/snap.json.gz" -> "dir/snap.html"
std::string default_output(const std::string& snapshot) {
  std::string base = snapshot;
  for (const char* ext : {".gz", ".json", ".pickle", ".pkl"}) {
    const std::string e = ext;
    if (base.size() > e.size() && base.compare(base.size() - e.size(), e.size(), e) == 0) {
      base.resize(base.size() - e.size());
    }
  }
  return base + ".html";
}

}  // namespace

int view_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  ViewArgs v;
  if (!parse_args(args, &v)) return usage_error(kUsage);
  if (v.output.empty()) v.output = default_output(v.snapshot);
  const Progress progress("view", v.progress);
  progress.step("reading " + v.snapshot);
  snapshot::LoadedSnapshot snap;
  std::string error;
  if (!snapshot::load_snapshot(v.snapshot, &snap, &error)) {
    std::fprintf(stderr, "cudalloc view: %s\n", error.c_str());
    return 2;
  }
  progress.step("read " + std::to_string(snap.events.size()) + " trace events; building the page");
  std::string page;
  try {
    nlohmann::json model = view::view_model(snap, v.snapshot);
    if (v.replay) {
      progress.step("replaying the trace under PyTorch's rules, expandable segments and cudalloc");
      if (!add_replayed_curves(snap, &model, &error)) {
        std::fprintf(stderr, "cudalloc view: %s: %s\n", v.snapshot.c_str(), error.c_str());
        return 2;
      }
    }
    page = view::render_page(model, v.snapshot);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    std::fprintf(stderr, "cudalloc view: %s: malformed snapshot: %s\n", v.snapshot.c_str(),
                 e.what());
    return 2;
  }
  std::ofstream out(v.output, std::ios::binary | std::ios::trunc);
  out << page;
  if (!out.good()) {
    std::fprintf(stderr, "cudalloc view: cannot write %s\n", v.output.c_str());
    return 1;
  }
  out.close();
  report_written(v.output);
  return 0;
}

}  // namespace cudalloc::cli
