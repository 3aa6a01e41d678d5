// The Collective over the replicas this process owns (threads, one per replica), optionally
// joined to the other processes' replicas by a RingLink (MPI). Replicas are numbered globally;
// a process owns the contiguous block [firstReplica, firstReplica + localReplicas).
//
// The reduce-scatter runs the ring hop by hop (collective.h gives the summation order), the
// hops between two processes' blocks over the link, so one process and several produce the same
// bits. The last local replica to arrive at an op runs it for all of them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ipu_backend/replication/collective.h"

namespace ipu::replication {

// The hops of the ring between processes: rank p's block is followed by rank p+1's.
class RingLink {
 public:
  virtual ~RingLink() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // Sends `n` floats to the next rank and receives `m` floats from the previous one.
  virtual void shift(const float* send, std::int64_t n, float* recv, std::int64_t m,
                     std::string_view what) = 0;
  // Every rank's `n` floats, concatenated in rank order into `all`.
  virtual void allGather(const float* mine, std::int64_t n, float* all, std::string_view what) = 0;
};

class RingCollective final : public Collective {
 public:
  // `timeout`: how long a replica waits for its siblings at one op before failing.
  RingCollective(int replicas, int firstReplica, int localReplicas, RingLink* link = nullptr,
                 std::chrono::milliseconds timeout = std::chrono::minutes(5));

  int replicas() const override { return replicas_; }
  int firstReplica() const { return first_; }
  int localReplicas() const { return local_; }
  void reduceScatter(int replica, const float* in, std::int64_t n, float* out, float scale,
                     std::string_view what) override;
  void allGather(int replica, const float* chunk, float* out, std::int64_t n,
                 std::string_view what) override;
  void abort(const std::string& reason) override;

 private:
  enum class Kind { kReduceScatter, kAllGather };
  struct Slot {
    Kind kind;
    const float* in;
    float* out;
    std::int64_t n;
    float scale;
    std::string what;
  };
  void arrive(int replica, Slot slot);
  void runReduceScatter();
  void runAllGather();
  bool remote() const { return link_ != nullptr && link_->ranks() > 1; }

  int replicas_, first_, local_;
  RingLink* link_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<std::uint64_t> generation_{0};  // ops completed; read unlocked while spinning
  bool aborted_ = false;
  std::string reason_;
  std::vector<Slot> slots_;
  std::vector<std::vector<float>> work_;
  std::vector<float> recv_, mine_, gathered_;
};

}  // namespace ipu::replication
