#include "harness/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace ipu::harness {
namespace {

std::atomic<int> gSignal{0};
std::atomic<bool> gRecord{false};
std::atomic<unsigned> gSeen{0};  // bit s: signal s received once already
const char* gEarlyMessage = "";
std::size_t gEarlyMessageBytes = 0;
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
              std::atomic<unsigned>::is_always_lock_free);
static_assert(SIGINT < 32 && SIGTERM < 32);

sigset_t stopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Ends the process by `sig`'s default action, as if it had never been caught.
[[noreturn]] void dieBy(int sig) {
  ::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached: the default action of SIGINT and SIGTERM terminates
}

// What a signal does, on the watcher thread or in the fallback handler: async-signal-safe
// (lock-free atomics, write, _exit, signal, pthread_sigmask, raise).
void receive(int sig) {
  if (!gRecord.load()) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, gEarlyMessage, gEarlyMessageBytes);
    ::_exit(128 + sig);
  }
  const unsigned bit = 1u << sig;
  if (gSeen.fetch_or(bit) & bit) dieBy(sig);
  int none = 0;
  gSignal.compare_exchange_strong(none, sig);
}

void onSignal(int sig) {
  receive(sig);
}

void watch() {
  const sigset_t set = stopSet();
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) == 0) receive(sig);
  }
}

}  // namespace

void installStopSignals(const char* earlyMessage) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) throw std::logic_error("installStopSignals: called twice");
  gEarlyMessage = earlyMessage;
  gEarlyMessageBytes = std::strlen(earlyMessage);
  const sigset_t set = stopSet();
  if (const int err = ::pthread_sigmask(SIG_BLOCK, &set, nullptr))
    throw std::system_error(err, std::generic_category(), "pthread_sigmask(SIGINT, SIGTERM)");
  // The fallback for a thread that unblocks them. SA_RESTART: its system calls do not fail.
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // Detached: it only touches the atomics above, so it may outlive main's objects.
  std::thread(watch).detach();
}

void recordStopSignals() {
  gRecord.store(true);
}

const std::atomic<int>& stopSignal() {
  return gSignal;
}

}  // namespace ipu::harness
