// Whether this kernel lets a process take over its own file descriptors (pidfd_open and
// pidfd_getfd, Linux 5.6), which opening shared pages needs: the IPC tests exercise the open
// only where it is, and say so where it is not.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cudalloc::testing {

inline bool pidfd_available() {
  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const long pidfd = ::syscall(434 /* pidfd_open */, ::getpid(), 0);
  const long fd =
      pidfd >= 0 && probe >= 0 ? ::syscall(438 /* pidfd_getfd */, pidfd, probe, 0) : -1;
  for (long open_fd : {static_cast<long>(probe), pidfd, fd}) {
    if (open_fd >= 0) ::close(static_cast<int>(open_fd));
  }
  return fd >= 0;
}

}  // namespace cudalloc::testing
