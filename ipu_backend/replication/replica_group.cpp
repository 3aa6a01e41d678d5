#include "ipu_backend/replication/replica_group.h"

#include <omp.h>

#include <fmt/format.h>

namespace ipu::replication {

ReplicaGroup::ReplicaGroup(std::shared_ptr<const Executable> exe, const ReplicaGroupOptions& o)
    : options_(o) {
  const int ranks = o.link ? o.link->ranks() : 1, rank = o.link ? o.link->rank() : 0;
  if (o.replicas < 1 || o.replicas % ranks != 0)
    throw std::invalid_argument(fmt::format(
        "ReplicaGroup: {} replicas do not split evenly over {} processes (hint: use a process "
        "count that divides the replica count)",
        o.replicas, ranks));
  const int local = o.replicas / ranks;
  collective_ =
      std::make_unique<RingCollective>(o.replicas, rank * local, local, o.link, o.timeout);
  for (int l = 0; l < local; ++l)
    engines_.push_back(
        std::make_unique<Engine>(exe, o.mode, ReplicaContext{rank * local + l, collective_.get()}));
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
