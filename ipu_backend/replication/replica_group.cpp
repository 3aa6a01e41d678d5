#include "ipu_backend/replication/replica_group.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace ipu::replication {

HostMemoryBudget hostMemoryBudget() {
  if (const char* s = std::getenv("IPU_HOST_MEMORY_LIMIT_GB"))
    return {static_cast<std::int64_t>(std::atof(s) * 1e9), "IPU_HOST_MEMORY_LIMIT_GB"};
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return {kib * 1024, "MemAvailable"};
  return {};
}

namespace {
// Resident bytes of this process (0 when unknown).
std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

// Throws HostMemoryError when `local` copies of the first engine would not fit.
void refuseBeyondHostMemory(const ReplicaGroupOptions& o, const Engine& first,
                            std::int64_t firstResident, int local) {
  const HostMemoryBudget budget = hostMemoryBudget();
  // What the first copy took: its tensors (touched when it first runs), or more where the
  // process grew by more while building it (kernels, reordered weights).
  const std::int64_t each = std::max(first.tensorMemoryBytes(), firstResident);
  const std::int64_t more = each * (local - 1);  // the first copy is already allocated
  if (budget.bytes <= 0 || more <= budget.bytes) return;
  const int ranks = o.link ? o.link->ranks() : 1;
  throw HostMemoryError(fmt::format(
      "{} replicas in this process need {:.1f} GB of host memory ({:.2f} GB each: every "
      "emulated IPU holds its own copy of the program's tensors), but only {:.1f} GB more is "
      "available "
      "({}); hint: split the {} replicas over more processes on hosts with enough memory "
      "(mpirun -np N: each process holds {}/N of them; now {} process(es)), or choose a "
      "smaller pod size",
      local, static_cast<double>(each * local) / 1e9, static_cast<double>(each) / 1e9,
      static_cast<double>(budget.bytes) / 1e9, budget.source, o.replicas, o.replicas, ranks));
}
}  // namespace

int localReplicasOf(const ReplicaGroupOptions& o) {
  const int ranks = o.link ? o.link->ranks() : 1;
  if (o.replicas < 1 || o.replicas % ranks != 0)
    throw std::invalid_argument(fmt::format(
        "ReplicaGroup: {} replicas do not split evenly over {} processes (hint: use a process "
        "count that divides the replica count)",
        o.replicas, ranks));
  return o.replicas / ranks;
}

void ReplicaGroup::checkHostMemory(std::shared_ptr<const Executable> exe,
                                   const ReplicaGroupOptions& o) {
  const int local = localReplicasOf(o);
  if (local < 2) return;
  const int rank = o.link ? o.link->rank() : 0;
  RingCollective collective(o.replicas, rank * local, local, o.link, o.timeout);
  const std::int64_t before = residentBytes();
  const Engine first(std::move(exe), o.mode, ReplicaContext{rank * local, &collective});
  refuseBeyondHostMemory(o, first, residentBytes() - before, local);
}

ReplicaGroup::ReplicaGroup(std::shared_ptr<const Executable> exe, const ReplicaGroupOptions& o)
    : options_(o) {
  const int rank = o.link ? o.link->rank() : 0;
  const int local = localReplicasOf(o);
  collective_ =
      std::make_unique<RingCollective>(o.replicas, rank * local, local, o.link, o.timeout);
  const std::int64_t before = residentBytes();
  for (int l = 0; l < local; ++l) {
    engines_.push_back(
        std::make_unique<Engine>(exe, o.mode, ReplicaContext{rank * local + l, collective_.get()}));
    if (l == 0 && local > 1)
      refuseBeyondHostMemory(o, *engines_[0], residentBytes() - before, local);
  }
  errors_.resize(static_cast<size_t>(local));
  for (int l = 1; l < local; ++l) threads_.emplace_back([this, l] { worker(l); });
}

ReplicaGroup::~ReplicaGroup() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ReplicaGroup::writeAll(int tensor, const void* data, size_t bytes) {
  for (auto& e : engines_) e->writeTensor(tensor, data, bytes);
}

void ReplicaGroup::runOne(int local) {
  try {
    engines_[static_cast<size_t>(local)]->run();
  } catch (const std::exception& e) {
    errors_[static_cast<size_t>(local)] = std::current_exception();
    collective_->abort(fmt::format("replica {} failed: {}", firstReplica() + local, e.what()));
  }
}

void ReplicaGroup::worker(int local) {
  omp_set_num_threads(options_.threadsPerReplica);
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      start_.wait(lk, [&] { return stop_ || round_ != seen; });
      if (stop_) return;
      seen = round_;
    }
    runOne(local);
    {
      std::lock_guard lk(mu_);
      --running_;
    }
    done_.notify_all();
  }
}

void ReplicaGroup::run() {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard lk(mu_);
    running_ = localReplicas() - 1;
    ++round_;
  }
  start_.notify_all();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(options_.threadsPerReplica);
  runOne(0);
  omp_set_num_threads(saved);
  {
    std::unique_lock lk(mu_);
    done_.wait(lk, [&] { return running_ == 0; });
  }
  // The root cause first: a replica's own failure, not the CollectiveError it caused elsewhere.
  std::exception_ptr first;
  for (const auto& e : errors_) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveError&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace ipu::replication
