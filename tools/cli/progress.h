// Progress of long commands (replay, view) on stderr: one line per step with the time since
// the start. Shown only when stderr is a terminal, or when asked for (--progress), so that it
// never mixes into output a script reads (stdout, --json).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace cudalloc::cli {

class Progress {
 public:
  // `command` prefixes each line; `forced` shows progress even when stderr is not a terminal.
  Progress(const char* command, bool forced);

  bool enabled() const { return enabled_; }
  // "cudalloc replay: [  2.1 s] what"
  void step(const std::string& what) const;

 private:
  const char* command_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

// Prints "wrote PATH (SIZE)" on `to` (stdout; stderr where stdout carries --json): every
// command that writes a file says so, with the size of what it wrote.
void report_written(const std::string& path, std::FILE* to = stdout);

}  // namespace cudalloc::cli
