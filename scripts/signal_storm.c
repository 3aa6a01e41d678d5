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
// SIGSTORM_MODE=watcher takes the same storm the way run_benchmark takes SIGINT and SIGTERM
// (harness/stop_signals.h): blocked in every thread, consumed by one sigwait thread; then no
// frame lands on a compute thread and the run must end as a calm one does (same log and
// ipu_weights_crc32). Preload it into the program itself, not a shell that execs it: an
// interval timer survives exec, the handler does not.
#include <pthread.h>
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

static void* watchProf(void* arg) {
  (void)arg;
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  for (;;) {
    int sig = 0;
    if (sigwait(&prof, &sig) == 0) delivered++;
  }
  return 0;
}

__attribute__((constructor)) static void startStorm(void) {
  const char* us = getenv("SIGSTORM_US");
  const long period = us ? atol(us) : 200;
  const char* mode = getenv("SIGSTORM_MODE");
  if (mode && strcmp(mode, "watcher") == 0) {
    // Before main: every thread of the program starts from this mask.
    sigset_t prof;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &prof, 0);
    pthread_t watcher;
    pthread_create(&watcher, 0, watchProf, 0);
    pthread_detach(watcher);
  }
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
  const int n =
      snprintf(line, sizeof line, "signal_storm: %ld SIGPROF delivered\n", (long)delivered);
  if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
  }
}
