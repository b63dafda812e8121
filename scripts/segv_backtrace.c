// A native backtrace when a process dies of SIGSEGV, SIGBUS or SIGABRT, for machines without a
// debugger (the GPU machine has no gdb):
//
//   gcc -shared -fPIC -O1 -o segv_backtrace.so scripts/segv_backtrace.c
//   LD_PRELOAD=$PWD/segv_backtrace.so PROGRAM...
//
// With PYTHONFAULTHANDLER=1 Python's handler runs first (Python frames), then restores this
// one and re-raises, so both sets of frames are printed.
//
// The handler runs on its own stack, writes the faulting address and the frames
// (backtrace_symbols_fd: object, symbol+offset, address) to stderr, then restores the default
// action and re-raises, so the exit status stays that of the signal. backtrace() is called
// once at load, so its lazy loading of the unwinder does not happen inside the handler.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char alt_stack[1 << 16];

static void write_str(const char* s) { (void)!write(2, s, strlen(s)); }

static void on_fatal(int sig, siginfo_t* info, void* context) {
  (void)context;
  char line[128];
  snprintf(line, sizeof line, "\n== signal %d at address %p; native frames:\n", sig,
           info->si_addr);
  write_str(line);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  write_str("== end of native frames\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  void* warm[1];
  backtrace(warm, 1);
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
