// A program that dies of SIGSEGV in a named function, for check_segv_backtrace.sh.
#include <stdio.h>

__attribute__((noinline)) int read_through_null(volatile int* p) { return *p; }

int main(int argc, char** argv) {
  (void)argv;
  volatile int* p = NULL;
  // argc keeps the compiler from proving the read away.
  return read_through_null(argc > 0 ? p : (volatile int*)&argc);
}
