// snapshot_on_oom through libcudalloc.so on the simulated device: one new file per
// out-of-memory error, each recording the failed request. CUDALLOC_CONF is read once per
// process, so each mode is a process of its own (tests/CMakeLists.txt), which sets
// CUDALLOC_CONF itself before its first cudalloc call, with a fresh directory in it:
//   oom_snapshots numbered     PATH without %n: oom.json, oom.2.json, oom.3.json
//   oom_snapshots pattern      PATH with %p and %n: oom_PID_1.json, oom_PID_2.json, ...
//   oom_snapshots cap          snapshot_on_oom_max:2: four errors, two files, one warning
//   oom_snapshots unwritable   a PATH that cannot be written: the allocation's error message
//                              stays the out-of-memory one
//   oom_snapshots taken        files of those names exist already (another rank's): they are
//                              kept, and the snapshots take other names (.pPID, .pPID-2)
#include <dirent.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cudalloc.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  failures += ok ? 0 : 1;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

// Sizes past the 64 MiB limit, each a different one so that each file can be told apart.
constexpr std::size_t kMiB = std::size_t{1} << 20;
const std::size_t kRequests[] = {100 * kMiB, 200 * kMiB, 300 * kMiB, 400 * kMiB};

// One failing request of `size` bytes; its message must still say out of memory afterwards.
void fail_once(std::size_t size) {
  void* p = nullptr;
  const cudalloc_error_t err = cudalloc_allocate(&p, size, 0, nullptr);
  check(err == CUDALLOC_ERROR_MEMORY_ALLOCATION, "a request past the limit fails");
  check(std::string(cudalloc_last_error_string()).find("out of memory") != std::string::npos,
        "its error message is the out-of-memory one");
}

// The snapshot at `path` records request number `sequence` (1-based) of kRequests.
void check_snapshot(const std::string& path, std::uint64_t sequence) {
  const std::string text = read(path);
  check(!text.empty(), path + " exists");
  if (text.empty()) return;
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  const nlohmann::json none;
  const nlohmann::json section = doc.is_object() ? doc.value("cudalloc", none) : none;
  const nlohmann::json oom = section.is_object() ? section.value("oom", none) : none;
  check(oom.is_object(), path + " has cudalloc.oom");
  if (!oom.is_object()) return;
  check(oom.value("sequence", 0u) == sequence, path + ": sequence " + std::to_string(sequence));
  check(oom.value("size", std::size_t{0}) == kRequests[sequence - 1],
        path + ": the request's size");
  check(oom.value("device", -1) == 0 && oom.value("stream", 1u) == 0, path + ": device and stream");
  check(oom.value("message", std::string()).find("out of memory") != std::string::npos,
        path + ": the failure's message");
  // The simulated device has 1 GiB and holds nothing past the 64 MiB limit.
  check(oom.value("device_free", std::size_t{0}) >= 1024 * kMiB - 64 * kMiB,
        path + ": the device's free memory");
}

std::string make_dir() {
  char name[] = "/tmp/cudalloc_oom_snapshots_XXXXXX";
  if (::mkdtemp(name) == nullptr) {
    std::perror("mkdtemp");
    std::exit(2);
  }
  return name;
}

void configure(const std::string& conf) {
  ::setenv("CUDALLOC_CONF", ("limit:64M," + conf).c_str(), 1);
}

void numbered(const std::string& dir) {
  configure("snapshot_on_oom:" + dir + "/oom.json");
  for (std::size_t size : {kRequests[0], kRequests[1], kRequests[2]}) fail_once(size);
  check(files_in(dir).size() == 3, "three errors, three files");
  check_snapshot(dir + "/oom.json", 1);
  check_snapshot(dir + "/oom.2.json", 2);
  check_snapshot(dir + "/oom.3.json", 3);
}

void pattern(const std::string& dir) {
  configure("snapshot_on_oom:" + dir + "/oom_%p_%n.json");
  for (std::size_t size : {kRequests[0], kRequests[1], kRequests[2]}) fail_once(size);
  check(files_in(dir).size() == 3, "three errors, three files");
  const std::string stem = dir + "/oom_" + std::to_string(::getpid()) + "_";
  for (std::uint64_t n = 1; n <= 3; ++n) check_snapshot(stem + std::to_string(n) + ".json", n);
}

void cap(const std::string& dir) {
  const std::string log = dir + "/log.txt";
  if (std::freopen(log.c_str(), "w", stderr) == nullptr) std::exit(2);  // cudalloc logs there
  configure("snapshot_on_oom_max:2,snapshot_on_oom:" + dir + "/oom.json");
  for (std::size_t size : kRequests) fail_once(size);
  std::fflush(stderr);
  check(files_in(dir).size() == 3, "four errors, two files (and the log)");
  check_snapshot(dir + "/oom.json", 1);
  check_snapshot(dir + "/oom.2.json", 2);
  const std::string text = read(log);
  std::size_t warnings = 0;
  for (std::size_t at = text.find("snapshot_on_oom_max"); at != std::string::npos;
       at = text.find("snapshot_on_oom_max", at + 1)) {
    ++warnings;
  }
  check(warnings == 1, "one warning says the cap was reached");
  check(text.find("2 snapshots written") != std::string::npos, "it says how many were written");
}

void unwritable(const std::string& dir) {
  configure("snapshot_on_oom:" + dir + "/no/such/dir/oom.json");
  fail_once(kRequests[0]);  // the hook's own failure must not replace the allocation's message
  check(files_in(dir).empty(), "nothing written");
}

void taken(const std::string& dir) {
  const std::string pid = std::to_string(::getpid());
  std::ofstream(dir + "/oom.json") << "another process's snapshot";
  std::ofstream(dir + "/oom.p" + pid + ".json") << "another library's snapshot";
  configure("snapshot_on_oom:" + dir + "/oom.json");
  for (std::size_t size : {kRequests[0], kRequests[1]}) fail_once(size);
  check(read(dir + "/oom.json") == "another process's snapshot", "an existing file is kept");
  check(read(dir + "/oom.p" + pid + ".json") == "another library's snapshot",
        "so is the first fallback name, taken too");
  check_snapshot(dir + "/oom.p" + pid + "-2.json", 1);
  check_snapshot(dir + "/oom.2.json", 2);
  check(files_in(dir).size() == 4, "two errors, two new files, no temporary file left");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dir = make_dir();
  if (mode == "numbered") {
    numbered(dir);
  } else if (mode == "pattern") {
    pattern(dir);
  } else if (mode == "cap") {
    cap(dir);
  } else if (mode == "unwritable") {
    unwritable(dir);
  } else if (mode == "taken") {
    taken(dir);
  } else {
    std::fprintf(stderr, "usage: oom_snapshots numbered|pattern|cap|unwritable|taken\n");
    return 2;
  }
  for (const std::string& name : files_in(dir)) std::remove((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
