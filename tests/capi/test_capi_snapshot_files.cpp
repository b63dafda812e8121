// cudalloc_snapshot's files: written whole through a temporary file beside PATH (PATH.tmp.PID.N,
// a name no other writer uses), and on every failure none left behind (one used to stay:
// cudalloc_snapshot("/tmp") created /tmp.tmp).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "cudalloc.h"

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Entries of `dir` whose names start with `prefix` (temporary files left beside a snapshot).
int entries_starting(const std::string& dir, const std::string& prefix) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    ::closedir(d);
  }
  return n;
}

std::string scratch_dir() {
  char name[] = "/tmp/cudalloc_snapshot_files_XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  return name;
}

}  // namespace

TEST_CASE("a snapshot to a directory fails clearly and leaves no temporary file",
          "[capi][snapshot]") {
  const std::string dir = scratch_dir();
  const std::string target = dir + "/snap";
  REQUIRE(::mkdir(target.c_str(), 0755) == 0);
  CHECK(cudalloc_snapshot(target.c_str()) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(std::string(cudalloc_last_error_string()).find(target + " is a directory") !=
        std::string::npos);
  CHECK(entries_starting(dir, "snap.tmp") == 0);

  // A directory that does not exist: nothing is created.
  const std::string missing = dir + "/no/such/dir/snap.json";
  CHECK(cudalloc_snapshot(missing.c_str()) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(std::string(cudalloc_last_error_string()).find("cannot create") != std::string::npos);
  CHECK_FALSE(exists(dir + "/no"));

  // Another writer's PATH.tmp (here a directory): neither used nor removed, and the snapshot
  // is written all the same.
  const std::string blocked = dir + "/blocked.json";
  REQUIRE(::mkdir((blocked + ".tmp").c_str(), 0755) == 0);
  CHECK(cudalloc_snapshot(blocked.c_str()) == CUDALLOC_SUCCESS);
  CHECK(exists(blocked + ".tmp"));
  CHECK(exists(blocked));
  CHECK(entries_starting(dir, "blocked.json.tmp.") == 0);

  // Success: the file, and no temporary beside it.
  const std::string good = dir + "/good.json";
  REQUIRE(cudalloc_snapshot(good.c_str()) == CUDALLOC_SUCCESS);
  CHECK(exists(good));
  CHECK(entries_starting(dir, "good.json.tmp") == 0);

  for (const std::string& d : {blocked + ".tmp", target}) ::rmdir(d.c_str());
  std::remove(blocked.c_str());
  std::remove(good.c_str());
  ::rmdir(dir.c_str());
}
