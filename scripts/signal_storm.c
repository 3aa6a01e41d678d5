// A storm of handled signals, for run_benchmark (or any program) as an LD_PRELOAD: a no-op
// SIGPROF handler fired every SIGSTORM_US microseconds (default 200) of the process's CPU
// time, so that signal frames land on whatever thread is running at that moment (the main
// thread, OpenMP workers, oneDNN's JIT kernels). It reproduces in minutes what one SIGINT at a
// random moment does rarely: a kernel that cannot take a signal corrupts the heap (issue 26;
// docs/PERFORMANCE.md, "SIGINT heap corruption").
//
//   cc -O2 -shared -fPIC -o signal_storm.so scripts/signal_storm.c
//   LD_PRELOAD=$PWD/signal_storm.so build/harness/run_benchmark ...   # stderr: signals delivered
//
// Preload it into the program itself, not a shell that execs it: an interval timer survives
// exec, the handler does not.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t delivered;

static void onProf(int sig) {
  (void)sig;
  delivered++;
}

__attribute__((constructor)) static void startStorm(void) {
  const char* us = getenv("SIGSTORM_US");
  const long period = us ? atol(us) : 200;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onProf;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // no system call fails with EINTR: only the frames themselves
  sigaction(SIGPROF, &sa, 0);
  struct itimerval every = {{0, period}, {0, period}};
  setitimer(ITIMER_PROF, &every, 0);
}

__attribute__((destructor)) static void reportStorm(void) {
  char line[64];
  const int n = snprintf(line, sizeof line, "signal_storm: %ld SIGPROF delivered\n",
                         (long)delivered);
  if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
  }
}
