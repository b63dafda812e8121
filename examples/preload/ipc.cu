// CUDA IPC between two processes, checked word by word: the parent allocates buffers of
// several sizes with cudaMalloc, fills them, and sends their cudaIpcGetMemHandle handles to
// a forked child; the child opens each (cudaIpcOpenMemHandle), checks every word, writes a
// new pattern and closes it; the parent then checks that it sees the child's words. Run it
// without and with LD_PRELOAD=libcudalloc_preload.so (the child inherits it):
//   preload_ipc [ROUNDS]
// Exit 0 only when every word was right in both processes.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hazard_kernels.cuh"

namespace {

#define CHECK(call)                                                                        \
  do {                                                                                     \
    const cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "[%d] %s:%d: %s: %s\n", int(getpid()), __FILE__, __LINE__,     \
                   #call, cudaGetErrorString(e));                                          \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// Sizes that land in every kind of cudalloc memory: small blocks, a page, pages at an
// offset inside their first page, and a large run of pages.
constexpr std::size_t kSizes[] = {3000, std::size_t{1} << 20, (std::size_t{5} << 20) + 4096,
                                  std::size_t{64} << 20};
constexpr int kBuffers = sizeof kSizes / sizeof kSizes[0];

unsigned long long wrong_words(const unsigned* x, std::size_t n, unsigned pattern) {
  unsigned long long* counter = nullptr;
  CHECK(cudaMalloc(&counter, sizeof *counter));
  CHECK(cudaMemset(counter, 0, sizeof *counter));
  count_wrong<<<132, 256>>>(x, n, pattern, counter);
  unsigned long long wrong = 0;
  CHECK(cudaMemcpy(&wrong, counter, sizeof wrong, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(counter));
  return wrong;
}

void write_all(int fd, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n <= 0) std::exit(3);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

bool read_all(int fd, void* data, std::size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

struct Message {
  cudaIpcMemHandle_t handles[kBuffers];
  unsigned pattern;  // what the parent wrote; the child writes ~pattern
};

// The child: opens, checks and rewrites each buffer; answers with its count of wrong words.
int importer(int from_parent, int to_parent) {
  Message m;
  unsigned long long wrong = 0;
  while (read_all(from_parent, &m, sizeof m)) {
    for (int b = 0; b < kBuffers; ++b) {
      void* p = nullptr;
      CHECK(cudaIpcOpenMemHandle(&p, m.handles[b], cudaIpcMemLazyEnablePeerAccess));
      const std::size_t n = kSizes[b] / sizeof(unsigned);
      wrong += wrong_words(static_cast<unsigned*>(p), n, m.pattern);
      fill<<<132, 256>>>(static_cast<unsigned*>(p), n, ~m.pattern);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaIpcCloseMemHandle(p));
    }
    write_all(to_parent, &wrong, sizeof wrong);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return 2;
  const pid_t child = fork();  // before any CUDA call: each process has its own context
  if (child == 0) {
    close(down[1]);
    close(up[0]);
    return importer(down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  unsigned long long parent_wrong = 0, child_wrong = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<void*> buffers;
    Message m{};
    m.pattern = 0xc0de0000u + unsigned(round);
    void* spacer = nullptr;
    CHECK(cudaMalloc(&spacer, 1000 + round * 4096));  // each round at other offsets
    for (int b = 0; b < kBuffers; ++b) {
      void* p = nullptr;
      CHECK(cudaMalloc(&p, kSizes[b]));
      fill<<<132, 256>>>(static_cast<unsigned*>(p), kSizes[b] / sizeof(unsigned), m.pattern);
      CHECK(cudaIpcGetMemHandle(&m.handles[b], p));
      buffers.push_back(p);
    }
    CHECK(cudaDeviceSynchronize());
    write_all(down[1], &m, sizeof m);
    if (!read_all(up[0], &child_wrong, sizeof child_wrong)) {
      std::fprintf(stderr, "the child ended early\n");
      return 1;
    }
    for (int b = 0; b < kBuffers; ++b) {
      parent_wrong +=
          wrong_words(static_cast<unsigned*>(buffers[b]), kSizes[b] / sizeof(unsigned), ~m.pattern);
      CHECK(cudaFree(buffers[b]));
    }
    CHECK(cudaFree(spacer));
  }
  close(down[1]);
  int status = 0;
  waitpid(child, &status, 0);
  const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("%d rounds of %d buffers: %llu wrong words in the child, %llu in the parent, "
              "child %s\n", rounds, kBuffers, child_wrong, parent_wrong,
              child_ok ? "exited 0" : "failed");
  return child_wrong == 0 && parent_wrong == 0 && child_ok ? 0 : 1;
}
