// Host memory exhaustion inside the allocator (errors.h, metadata_guard): a counting operator
// new fails the Nth host allocation made inside an allocator call, for every N a
// representative workload reaches. Each run happens in a child process, which must either
// finish with every invariant intact (the failure hit a read-only call, which reported it and
// changed nothing) or end with the allocator's fatal message, never go on with a broken state
// or crash any other way.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "harness.h"

using namespace cudalloc;
using namespace cudalloc::test;

namespace {

thread_local bool t_armed = false;
std::atomic<long> g_countdown{-1};  // allocations left before the one that fails; -1: none
std::atomic<bool> g_injected{false};
std::atomic<long> g_counted{0};  // allocations made inside allocator calls

void* counted_new(std::size_t n) {
  if (t_armed) ++g_counted;
  if (t_armed && g_countdown.load() >= 0 && g_countdown.fetch_sub(1) == 0) {
    g_injected = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

// Every form of new and delete is replaced, so that each pair goes through malloc and free
// here (a sanitizer checks that the two sides match).
void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t align) {
  if (t_armed) return counted_new(n);  // the allocator asks for no extended alignment
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t align) { return operator new(n, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

constexpr StreamHandle kS1 = 0x100, kS2 = 0x200;

// Runs f() with allocations inside it counted.
template <typename F>
auto armed(F&& f) {
  t_armed = true;
  struct Disarm {
    ~Disarm() { t_armed = false; }
  } disarm;
  return f();
}

// Child exit codes.
constexpr int kFinished = 0, kBroken = 3, kWrongResult = 4;

bool valid(DeviceAllocator& a) { return a.validate().empty(); }

// A workload that reaches every kind of metadata: slabs, blocks, paged segments and pages on
// two streams, record_stream, device-ordered frees behind a fence, the OOM path under a cap,
// the host tier (spills and moves), state copies, empty_cache.
int run_workload(long fail_at) {
  Settings s;
  s.offload = Offload::host;
  FakeDevice fake(fake_options(256 * MiB));
  DeviceAllocator a(fake, 0, s);
  g_countdown = fail_at;
  std::vector<void*> live;
  auto get = [&](std::size_t size, StreamHandle stream) {
    void* p = nullptr;
    const Error err = armed([&] { return a.allocate(size, stream, &p); });
    if (err == Error::ok) live.push_back(p);
    return err == Error::ok || err == Error::out_of_memory;
  };
  auto put = [&](std::size_t i, DeviceAllocator::FreeOrder order) {
    if (i >= live.size() || live[i] == nullptr) return true;
    const Error err = armed([&] { return a.deallocate(live[i], order); });
    live[i] = nullptr;
    return err == Error::ok;
  };
  bool ok = true;
  armed([&] { a.register_stream(kS2); });
  for (std::size_t size : {1000ul, 100 * KiB, 3 * MiB, 30 * MiB}) {
    ok = ok && get(size, kS1) && get(size, kS2);
  }
  if (!live.empty()) armed([&] { return a.record_stream(live[0], kS2); });
  for (std::size_t i = 0; i < live.size(); i += 2) ok = ok && put(i, DeviceAllocator::FreeOrder::device);
  ok = ok && get(200 * MiB, kS1);  // past the device: spills to the host tier
  if (live.size() > 1 && live[1] != nullptr) {
    armed([&] { return a.offload(live[1], kS1); });
    armed([&] { return a.prefetch(live[1], kS1); });
  }
  try {
    armed([&] { return a.state(); });  // read-only: may report bad_alloc, changes nothing
  } catch (const std::bad_alloc&) {
  }
  for (std::size_t i = 0; i < live.size(); ++i) ok = ok && put(i, DeviceAllocator::FreeOrder::stream);
  ok = ok && armed([&] { return a.empty_cache(); }) == Error::ok;
  armed([&] { a.unregister_stream(kS2); });
  g_countdown = -1;
  std::fprintf(stderr, "allocations=%ld\n", g_counted.load());
  if (!ok) return kWrongResult;
  return valid(a) ? kFinished : kBroken;
}

// In a child: the default action for SIGABRT (the test framework's handler would report the
// expected abort as a failure) and no output of the framework on stdout.
void become_plain_child() {
  std::signal(SIGABRT, SIG_DFL);
  std::freopen("/dev/null", "w", stdout);
}

struct ChildResult {
  int status = 0;
  std::string stderr_text;
};

ChildResult run_child(long fail_at) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], 2);
    become_plain_child();
    _exit(run_workload(fail_at));
  }
  close(pipe_fds[1]);
  ChildResult r;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) {
    r.stderr_text.append(buf, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  REQUIRE(waitpid(pid, &r.status, 0) == pid);
  return r;
}

bool aborted_with_message(const ChildResult& r) {
  return WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT &&
         r.stderr_text.find("host memory exhausted while updating the allocator's metadata") !=
             std::string::npos;
}

}  // namespace

TEST_CASE("a failed host allocation inside a state change is fatal with a message",
          "[host-oom]") {
  // The reported scenario: idle pages, a device-ordered free waiting for a fence, then the
  // next host allocation inside allocate(100 KiB) fails. Before, the allocator went on with a
  // stuck mode flag (every later allocation needing new memory failed) and broken structures.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    become_plain_child();
    std::freopen("/dev/null", "w", stderr);
    FakeDevice fake(fake_options(1 * GiB));
    DeviceAllocator a(fake, 0, Settings{});
    a.register_stream(kS1);
    void* big = nullptr;
    void* small = nullptr;
    if (a.allocate(10 * MiB, 0, &big) != Error::ok || a.deallocate(big) != Error::ok) _exit(5);
    if (a.allocate(8 * KiB, 0, &small) != Error::ok ||
        a.deallocate(small, DeviceAllocator::FreeOrder::device) != Error::ok) {
      _exit(5);
    }
    g_countdown = 0;
    void* p = nullptr;
    armed([&] { return a.allocate(100 * KiB, 0, &p); });
    _exit(g_injected ? kBroken : 6);  // reaching here after an injected failure is the bug
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}

TEST_CASE("every host allocation of a workload, failed in turn, ends cleanly or fatally",
          "[host-oom][fault-sweep]") {
  const ChildResult clean = run_child(-1);
  REQUIRE(WIFEXITED(clean.status));
  REQUIRE(WEXITSTATUS(clean.status) == kFinished);
  const auto at = clean.stderr_text.find("allocations=");
  REQUIRE(at != std::string::npos);
  const long total = std::atol(clean.stderr_text.c_str() + at + 12);
  REQUIRE(total > 100);
  long fatal = 0, survived = 0;
  // Every position up to 400, then a sample: each run costs a process.
  for (long n = 0; n < total; n += n < 400 ? 1 : 1 + n / 64) {
    INFO("failing host allocation " << n << " of " << total);
    const ChildResult r = run_child(n);
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == kFinished) {
      ++survived;  // the failure hit a read-only call: reported, nothing changed
      continue;
    }
    INFO("child status " << r.status << ", stderr: " << r.stderr_text);
    REQUIRE(aborted_with_message(r));
    ++fatal;
  }
  CHECK(fatal > 100);
  CHECK(survived > 0);
}
