// `cudalloc convert SNAPSHOT -o OUT`: between JSON (cudalloc's or PyTorch's schema, optionally
// gzip-compressed) and the pickle that PyTorch's own tools read
// (python -m torch.cuda._memory_viz, pytorch.org/memory_viz). The output format follows OUT's
// extension: .pickle/.pkl, .json or .json.gz.
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/usage.h"
#include "snapshot/snapshot_encode.h"

namespace cudalloc::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool write_output(const std::string& path, const std::string& data, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    const bool ok = gzwrite(f, data.data(), unsigned(data.size())) == int(data.size());
    return gzclose(f) == Z_OK && ok;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  return out.good();
}

constexpr const char* kUsage =
    "usage: cudalloc convert SNAPSHOT -o OUT.pickle|OUT.json|OUT.json.gz [--progress]\n"
    "  Converts a snapshot (JSON, .json.gz or PyTorch pickle) to the format OUT's extension\n"
    "  names; .pickle is what PyTorch's tools read (python -m torch.cuda._memory_viz).\n"
    CUDALLOC_INPUT_OPTIONS_USAGE CUDALLOC_READ_PROGRESS_USAGE;

}  // namespace

int convert_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  std::string in, out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "-o" || args[i] == "--output") && i + 1 < args.size()) {
      out = args[++i];
    } else if (in.empty() && !args[i].empty() && args[i][0] != '-') {
      in = args[i];
    } else {
      in.clear();
      break;
    }
  }
  const bool to_pickle = ends_with(out, ".pickle") || ends_with(out, ".pkl");
  const bool to_json = ends_with(out, ".json") || ends_with(out, ".json.gz");
  if (in.empty() || out.empty()) return usage_error(kUsage);
  if (!(to_pickle || to_json)) {
    return argument_error("convert", "-o '" + out + "'",
                          "a name ending in .pickle, .pkl, .json or .json.gz");
  }
  std::string data, error;
  const auto format = to_pickle ? snapshot::SnapshotFormat::pickle : snapshot::SnapshotFormat::json;
  if (!snapshot::encode_snapshot(in, format, &data, &error)) {
    std::fprintf(stderr, "cudalloc convert: %s\n", error.c_str());
    return 2;
  }
  if (!write_output(out, data, ends_with(out, ".gz"))) {
    std::fprintf(stderr, "cudalloc convert: cannot write %s\n", out.c_str());
    return 1;
  }
  report_written(out);
  return 0;
}

}  // namespace cudalloc::cli
