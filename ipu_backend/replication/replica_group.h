// The replicas one process owns, each an Engine over the same Executable, run side by side (one
// thread per replica) and joined by a RingCollective, optionally over a RingLink to the
// replicas of other processes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ipu_backend/engine/engine.h"
#include "ipu_backend/replication/ring_collective.h"

namespace ipu::replication {

struct ReplicaGroupOptions {
  EngineMode mode = EngineMode::Fused;
  int replicas = 1;           // R over every process
  RingLink* link = nullptr;   // other processes; null: this process owns every replica
  int threadsPerReplica = 1;  // OpenMP threads of each replica's engine
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // per collective
};

// The local replicas' tensors do not fit this host's memory (refused before they are allocated).
class HostMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes of host memory a process may still allocate, and where the figure came from:
// IPU_HOST_MEMORY_LIMIT_GB when set (tests, shared hosts), else MemAvailable from /proc/meminfo
// (0 when unknown: no check).
struct HostMemoryBudget {
  std::int64_t bytes = 0;
  const char* source = "MemAvailable";
};
HostMemoryBudget hostMemoryBudget();

// Replicas each process holds (options.replicas over the link's processes); throws
// std::invalid_argument when they do not split evenly.
int localReplicasOf(const ReplicaGroupOptions& options);

class ReplicaGroup {
 public:
  // Every local replica holds its own copy of the program's tensors, as each IPU does: when the
  // copies after the first would not fit hostMemoryBudget(), throws HostMemoryError
  // (naming the sizes and how to split the replicas) instead of being killed part way.
  ReplicaGroup(std::shared_ptr<const Executable> exe, const ReplicaGroupOptions& options);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  // The same check without the group: builds the first local replica's engine only, measures
  // it and throws HostMemoryError where the constructor would. For a fit check before a run
  // (its engines are built again by the run): one engine instead of every replica's.
  static void checkHostMemory(std::shared_ptr<const Executable> exe,
                              const ReplicaGroupOptions& options);

  int replicas() const { return options_.replicas; }
  int localReplicas() const { return static_cast<int>(engines_.size()); }
  int firstReplica() const { return collective_->firstReplica(); }
  Engine& engine(int local) { return *engines_.at(static_cast<size_t>(local)); }
  const Engine& engine(int local) const { return *engines_.at(static_cast<size_t>(local)); }

  // Writes the same value of a tensor (e.g. an initial weight) to every local replica.
  void writeAll(int tensor, const void* data, size_t bytes);
  // Runs every local replica's program once (deviceIterations steps); rethrows the first
  // failure after every replica has stopped (a failed replica aborts the collectives).
  void run();

 private:
  void worker(int local);
  void runOne(int local);

  ReplicaGroupOptions options_;
  std::unique_ptr<RingCollective> collective_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::uint64_t round_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace ipu::replication
