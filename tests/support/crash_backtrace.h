// A test binary that includes this header prints the native stack on SIGSEGV /
// SIGABRT / SIGBUS / SIGFPE (glibc backtrace: frames as binary+offset, which
// `addr2line -f -C -e <binary> <offset>` turns into functions), then dies with
// the signal as before. Why: the GPU tests run on a machine without gdb, where
// a crash would otherwise leave only "Segmentation fault".
#pragma once

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

namespace futr::test {

inline void print_backtrace_and_die(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "\n*** fatal signal: native backtrace (addr2line -f -C -e <binary> <offset>) ***\n";
  (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

inline const bool kCrashBacktraceInstalled = [] {
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE}) signal(s, print_backtrace_and_die);
  return true;
}();

}  // namespace futr::test
