// Temporary input files for the reader tests, named per process so parallel runs never meet.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <string>

namespace cudalloc::test {

inline std::string temp_path(const std::string& name) {
  return "/tmp/cudalloc_test_" + std::to_string(::getpid()) + "_" + name;
}

// Writes `content` (gzip-compressed when asked) to a new temporary file; its path.
inline std::string temp_file(const std::string& name, const std::string& content,
                             bool gzip = false) {
  const std::string path = temp_path(name);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, content.data(), unsigned(content.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << content;
  }
  return path;
}

}  // namespace cudalloc::test
