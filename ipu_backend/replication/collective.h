// Cross-replica collectives, as the engine sees them. One Program op (cross_replica_reduce_scatter,
// cross_replica_all_gather) runs the same way whatever joins the replicas: threads in one
// process (RingCollective alone) or several processes (RingCollective over an MPI link).
//
// Semantics, identical for every implementation so that a run split over processes is bit for
// bit the run in one process:
//  * chunks: a tensor of n elements is cut into R chunks of s = ceil(n / R) elements (the last
//    ones shorter or empty); replica r owns chunk r;
//  * reduce-scatter is a ring: chunk c starts at replica c+1 and travels c+1 -> c+2 -> ... -> c,
//    each hop adding the receiver's own chunk (dst = received + dst), so chunk c is summed in the
//    order c+1, c+2, ..., c; replica r's output is chunk r of the sum times `scale`, padded with
//    zeros to s elements;
//  * all-gather concatenates every replica's s-element chunk and keeps the first n elements.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ipu {

// A collective that cannot complete: a replica failed, a peer process died or timed out.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int replicas() const = 0;  // R, over every process
  // Called once per op by every replica this process owns, each from its own thread; returns
  // when `out` holds the result. Throws CollectiveError when the group was aborted.
  virtual void reduceScatter(int replica, const float* in, std::int64_t n, float* out, float scale,
                             std::string_view what) = 0;
  virtual void allGather(int replica, const float* chunk, float* out, std::int64_t n,
                         std::string_view what) = 0;
  // Wakes every waiting replica with CollectiveError(reason) (a sibling replica failed).
  virtual void abort(const std::string& reason) = 0;
};

inline std::int64_t chunkElements(std::int64_t n, int replicas) {
  return (n + replicas - 1) / replicas;
}

// What an engine needs to run replica ops: which replica it is and how to reach the others.
struct ReplicaContext {
  int replica = 0;
  Collective* collective = nullptr;  // null: a single replica (collectives are the identity)
};

}  // namespace ipu
