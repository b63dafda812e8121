// fork() while other threads allocate and free, as a program with data-loader workers does.
// Shared by the C API test (libcudalloc.so) and the LD_PRELOAD test (libcudalloc_preload.so).
//
// Every child allocates, writes, frees and exits 0. A lock another thread held at the moment
// of fork() would stay locked in the child forever; alarm() turns such a hang into SIGALRM,
// which the parent sees in the child's status.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

namespace cudalloc::testing {

// Returns how many of `children` children did not exit 0. `allocate(void**, size_t)` and
// `release(void*)` return true on success.
template <typename Allocate, typename Release>
int fork_while_allocating(int children, Allocate allocate, Release release) {
  // The allocator exists before the first fork (its fork handlers come with it): a fork in
  // the middle of its creation is a different case, not covered here.
  {
    void* first = nullptr;
    if (!allocate(&first, 256) || !release(first)) return children;
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        void* p = nullptr;
        if (allocate(&p, 256 + (i * 4099 + t * 65537) % (8 << 20))) release(p);
      }
    });
  }
  // All children first, then their statuses: a hang costs one alarm period, not one per child.
  int failed = 0;
  std::vector<pid_t> pids;
  for (int c = 0; c < children; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a hang becomes a signal, not a stuck test
      bool ok = true;
      for (std::size_t n : {std::size_t{64}, std::size_t{1} << 20, std::size_t{9} << 20}) {
        void* p = nullptr;
        ok = ok && allocate(&p, n) && p != nullptr;
        if (p != nullptr) std::memset(p, 0x5a, n);
        ok = ok && release(p);
      }
      _exit(ok ? 0 : 1);
    }
    if (pid < 0) ++failed;
    if (pid > 0) pids.push_back(pid);
  }
  for (const pid_t pid : pids) {
    int status = -1;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  stop = true;
  for (std::thread& w : workers) w.join();
  return failed;
}

}  // namespace cudalloc::testing
