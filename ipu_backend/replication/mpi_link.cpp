#include "ipu_backend/replication/mpi_link.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace ipu::replication {

bool MpiLink::launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

MpiLink::MpiLink(std::chrono::milliseconds timeout) : timeout_(timeout) {
  if (const char* s = std::getenv("IPU_COLLECTIVE_TIMEOUT_S"))
    timeout_ = std::chrono::milliseconds(static_cast<long long>(std::atof(s) * 1000.0));
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // Any replica thread may run the hops, never two at once (RingCollective's lock).
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      abortJob("MPI does not provide MPI_THREAD_SERIALIZED, which the replica threads need");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
}

MpiLink::~MpiLink() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

void MpiLink::abortJob(std::string_view message, int code) {
  std::fprintf(stderr, "rank %d of %d: %.*s\n", rank_, ranks_, static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void MpiLink::wait(void* requests, int count, std::string_view op, std::string_view what) {
  auto* req = static_cast<MPI_Request*>(requests);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout_;
  for (;;) {
    int done = 0;
    MPI_Testall(count, req, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline)
      abortJob(fmt::format("no answer from the other ranks for {:.1f} s in {} of '{}': a peer "
                           "process died or hangs; aborting the job (IPU_COLLECTIVE_TIMEOUT_S "
                           "sets the limit)",
                           static_cast<double>(timeout_.count()) / 1000.0, op, what),
               75);
    // Yield first: a hop is usually microseconds away, and a sleep's wake-up latency would be
    // paid at every one of them. A peer that is far behind (still compiling, or sharing this
    // process's cores when the host is oversubscribed) gets the core back: after 2 ms of
    // waiting, sleep 200 us between tests instead of spinning against the rank it waits for.
    if (now - start < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

namespace {
int count(std::int64_t n) {
  if (n > std::numeric_limits<int>::max())
    throw std::length_error(fmt::format("MpiLink: {} floats exceed one MPI message", n));
  return static_cast<int>(n);
}
}  // namespace

void MpiLink::shift(const float* send, std::int64_t n, float* recv, std::int64_t m,
                    std::string_view what) {
  MPI_Request req[2];
  const int next = (rank_ + 1) % ranks_, prev = (rank_ + ranks_ - 1) % ranks_;
  MPI_Irecv(recv, count(m), MPI_FLOAT, prev, 1, MPI_COMM_WORLD, &req[0]);
  MPI_Isend(send, count(n), MPI_FLOAT, next, 1, MPI_COMM_WORLD, &req[1]);
  wait(req, 2, "the ring reduce-scatter", what);
}

void MpiLink::allGather(const float* mine, std::int64_t n, float* all, std::string_view what) {
  MPI_Request req;
  MPI_Iallgather(mine, count(n), MPI_FLOAT, all, count(n), MPI_FLOAT, MPI_COMM_WORLD, &req);
  wait(&req, 1, "the all-gather", what);
}

void MpiLink::barrier(std::string_view what) {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  wait(&req, 1, "a barrier", what);
}

}  // namespace ipu::replication
