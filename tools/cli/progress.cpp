#include "cli/progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "util/units.h"

namespace cudalloc::cli {

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
