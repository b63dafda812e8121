// cudalloc_snapshot's files: written whole through PATH.tmp, and on every failure no PATH.tmp
// left behind (it used to stay: cudalloc_snapshot("/tmp") created /tmp.tmp).
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
  CHECK_FALSE(exists(target + ".tmp"));

  // A directory that does not exist: nothing is created.
  const std::string missing = dir + "/no/such/dir/snap.json";
  CHECK(cudalloc_snapshot(missing.c_str()) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(std::string(cudalloc_last_error_string()).find("cannot create") != std::string::npos);
  CHECK_FALSE(exists(missing + ".tmp"));

  // PATH.tmp is a directory: it is neither used nor removed.
  const std::string blocked = dir + "/blocked.json";
  REQUIRE(::mkdir((blocked + ".tmp").c_str(), 0755) == 0);
  CHECK(cudalloc_snapshot(blocked.c_str()) == CUDALLOC_ERROR_INVALID_VALUE);
  CHECK(exists(blocked + ".tmp"));
  CHECK_FALSE(exists(blocked));

  // Success: the file, and no temporary beside it.
  const std::string good = dir + "/good.json";
  REQUIRE(cudalloc_snapshot(good.c_str()) == CUDALLOC_SUCCESS);
  CHECK(exists(good));
  CHECK_FALSE(exists(good + ".tmp"));

  for (const std::string& d : {blocked + ".tmp", target}) ::rmdir(d.c_str());
  std::remove(good.c_str());
  ::rmdir(dir.c_str());
}
