#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

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
