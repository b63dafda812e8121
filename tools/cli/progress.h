// Progress of long commands (replay, view) on stderr: one line per step with the time since
// the start, and the percent read of each input file. Shown only when stderr is a terminal, or when asked for (--progress), so that it
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

// Reports how far the reading of each input file has got, in percent, on stderr
// ("cudalloc: reading PATH: 42%"), through the one read path of every command
// (snapshot/input_file.h). On a terminal, once a read has taken kQuietReadSeconds, updated in
// place; when `forced` (--progress), from the start, one line per update. At most one update
// every kReadUpdateSeconds, and always the last (100%). Nothing when stderr is not a terminal
// and `forced` is false.
constexpr double kQuietReadSeconds = 2.0;
constexpr double kReadUpdateSeconds = 0.5;
void report_read_progress(bool forced);

// Prints "wrote PATH (SIZE)" on `to` (stdout; stderr where stdout carries --json): every
// command that writes a file says so, with the size of what it wrote.
void report_written(const std::string& path, std::FILE* to = stdout);

}  // namespace cudalloc::cli
