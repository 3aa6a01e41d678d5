// stop_signals.h: SIGINT / SIGTERM never run a handler on a compute thread; the watcher thread
// records them, or ends the process before anything is written. Each case installs the
// watcher in a child process (a death test), since it changes the process's signal mask.
#include "harness/stop_signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ipu::harness {
namespace {

// Waits up to 10 s for the watcher to record a signal.
int awaitStopSignal() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stopSignal().load() == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return stopSignal().load();
}

bool blocksStopSignals() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGINT) == 1 && sigismember(&mask, SIGTERM) == 1;
}

class StopSignalsDeathTest : public ::testing::Test {
 protected:
  // Re-executes the binary for each case: the parent may have threads of its own.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A signal landing on a thread that runs a kernel is what this guards against: every thread
// started after the install (OpenMP's workers are pthreads started the same way) blocks both
// signals, and the one sent to the process is recorded all the same.
TEST_F(StopSignalsDeathTest, ThreadsBlockTheSignalsAndTheWatcherRecordsThem) {
  EXPECT_EXIT(
      {
        installStopSignals("early\n");
        recordStopSignals();
        bool workerBlocks = false;
        std::thread([&] { workerBlocks = blocksStopSignals(); }).join();
        if (!workerBlocks) _exit(3);
        if (!blocksStopSignals()) _exit(7);
        ::kill(::getpid(), SIGTERM);
        _exit(awaitStopSignal() == SIGTERM ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StopSignalsDeathTest, BeforeRecordingASignalEndsTheProcessWithItsExitCode) {
  EXPECT_EXIT(
      {
        installStopSignals("interrupted early; nothing written\n");
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        _exit(5);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "interrupted early; nothing written");
}

TEST_F(StopSignalsDeathTest, TheFirstSignalIsKeptAndASecondOfTheSameKindKills) {
  EXPECT_EXIT(
      {
        installStopSignals("early\n");
        recordStopSignals();
        ::kill(::getpid(), SIGINT);
        if (awaitStopSignal() != SIGINT) _exit(4);
        ::kill(::getpid(), SIGTERM);  // another kind: recorded as received, the first kept
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (stopSignal().load() != SIGINT) _exit(6);
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        _exit(5);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace
}  // namespace ipu::harness
