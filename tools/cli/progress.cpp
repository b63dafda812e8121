#include "cli/progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "snapshot/input_file.h"
#include "util/units.h"

namespace cudalloc::cli {
namespace {

using Clock = std::chrono::steady_clock;

// How each file's read is being reported. diff reads its two snapshots on two threads at
// once: every report holds g_read_mutex, and each read (its path and its thread: `diff A A`
// reads one path twice at once) has its own state. While more than one read is shown, each
// update is a line of its own: updating in place, the reads would overwrite each other.
struct ReadReport {
  std::string path;
  Clock::time_point start, last_update;
  int last_percent = -1;
  std::uint64_t last_read = 0;
  bool shown = false, finished = false;
};
struct ReadReports {
  bool forced = false, terminal = false;
  std::map<std::pair<std::string, std::thread::id>, ReadReport> by_read;
  // Reads shown and not finished: while more than one, updates are whole lines.
  int showing = 0;
};
ReadReports g_read;
std::mutex g_read_mutex;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void on_read_progress(const std::string& path, std::uint64_t read, std::uint64_t size) {
  std::lock_guard<std::mutex> lock(g_read_mutex);
  const bool forced = g_read.forced;
  ReadReport& r = g_read.by_read[{path, std::this_thread::get_id()}];
  if (path != r.path || read < r.last_read) {  // a new file, or the same one again
    if (r.shown && !r.finished) --g_read.showing;
    r.path = path;
    r.start = Clock::now();
    r.last_percent = -1;
    r.shown = r.finished = false;
  }
  r.last_read = read;
  if (r.finished) return;
  const int percent = size > 0 ? int(read * 100 / size) : 100;
  const bool last = percent >= 100;
  if (!forced && !r.shown && seconds_since(r.start) < kQuietReadSeconds) return;
  if (!last && r.shown && (percent == r.last_percent ||
                           seconds_since(r.last_update) < kReadUpdateSeconds)) {
    return;
  }
  if (!r.shown) {
    // A line being updated in place ends before another read's first line.
    if (g_read.terminal && g_read.showing == 1) std::fputc('\n', stderr);
    ++g_read.showing;
  }
  const bool in_place = g_read.terminal && g_read.showing == 1;
  std::fprintf(stderr, in_place ? "\rcudalloc: reading %s: %3d%%%s" : "cudalloc: reading %s: %3d%%%s\n",
               path.c_str(), percent, in_place && last ? "\n" : "");
  std::fflush(stderr);
  r.shown = true;
  r.finished = last;
  if (last) --g_read.showing;
  r.last_percent = percent;
  r.last_update = Clock::now();
}

}  // namespace

void report_read_progress(bool forced) {
  g_read.forced = forced;
  g_read.terminal = ::isatty(STDERR_FILENO) == 1;
  if (forced || g_read.terminal) snapshot::set_read_progress(on_read_progress);
}

Progress::Progress(const char* command, bool forced)
    : command_(command),
      enabled_(forced || ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

void Progress::step(const std::string& what) const {
  if (!enabled_) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "cudalloc %s: [%6.1f s] %s\n", command_, seconds, what.c_str());
}

}  // namespace cudalloc::cli

namespace cudalloc::cli {

void report_written(const std::string& path, std::FILE* to) {
  struct stat st {};
  const std::string size = ::stat(path.c_str(), &st) == 0
                               ? format_bytes(static_cast<std::size_t>(st.st_size))
                               : std::string("size unknown");
  std::fprintf(to, "wrote %s (%s)\n", path.c_str(), size.c_str());
}

}  // namespace cudalloc::cli
