// SIGINT and SIGTERM in a multi-threaded run: blocked in every thread and taken synchronously
// by one watcher thread (sigwait), so that no signal handler runs on a compute thread (an
// OpenMP worker inside a oneDNN JIT kernel, a decode worker, the main thread inside malloc or
// the logger) and no system call of ours or of a library fails with EINTR. The run loop polls
// stopSignal() between steps and evaluation batches.
#pragma once

#include <atomic>

namespace ipu::harness {

// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread created after it
// (call it first in main, before anything starts a thread), and starts the watcher. Until
// recordStopSignals() a signal ends the process at once: `earlyMessage` on stderr, exit 128 +
// the signal (nothing is written yet, so nothing is lost). Afterwards the first signal is
// recorded for the run loop, and a second one of a kind already received kills the process
// (the default action). A thread that unblocks them gets the same through an
// async-signal-safe handler. Once per process; `earlyMessage` must outlive it.
void installStopSignals(const char* earlyMessage);

// From now on a signal is recorded for the run loop instead of ending the process.
void recordStopSignals();

// The first SIGINT or SIGTERM recorded (0: none).
const std::atomic<int>& stopSignal();

}  // namespace ipu::harness
