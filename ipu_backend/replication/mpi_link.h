// The ring's hops between processes over Open MPI: `mpirun -np P run_benchmark ...` runs P
// processes, rank p owning replicas [p R/P, (p+1) R/P). Every wait is bounded: a peer that died
// or hangs makes this process print which rank and op it waited for and abort the whole job
// (MPI_Abort) instead of hanging.
#pragma once

#include <chrono>
#include <string_view>

#include "ipu_backend/replication/ring_collective.h"

namespace ipu::replication {

class MpiLink final : public RingLink {
 public:
  // True when this process was started by mpirun (Open MPI's environment is present).
  static bool launchedByMpirun();
  // Initialises MPI (once per process); finalises it at destruction. `timeout` bounds every
  // exchange; IPU_COLLECTIVE_TIMEOUT_S in the environment overrides it.
  explicit MpiLink(std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~MpiLink() override;
  MpiLink(const MpiLink&) = delete;
  MpiLink& operator=(const MpiLink&) = delete;

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  void shift(const float* send, std::int64_t n, float* recv, std::int64_t m,
             std::string_view what) override;
  void allGather(const float* mine, std::int64_t n, float* all, std::string_view what) override;
  // Waits (bounded) until every rank arrives.
  void barrier(std::string_view what);
  // Ends every process of the job with `code` after printing `message` (never returns).
  [[noreturn]] void abortJob(std::string_view message, int code = 1);

 private:
  void wait(void* requests, int count, std::string_view op, std::string_view what);
  int rank_ = 0, ranks_ = 1;
  std::chrono::milliseconds timeout_;
};

}  // namespace ipu::replication
