// The replication pass: turns a one-replica training graph (forward, backward, one
// optimizer_update per weight) into the graph every replica of a data-parallel run executes:
//
//   micro-batch part, run `accumulation` times per step:
//     the original ops (optimizer_update removed); with accumulation > 1,
//     accumulate(<w>/grad_accum, g) (16-bit gradients are widened first: accumulators and the
//     reduction are f32; with accumulateInWeightDType the accumulator has the weight's dtype, as
//     PopART's default accum_type, and is widened to f32 only for the reduction)
//   update part, once per step:
//     c = cross_replica_reduce_scatter(g or <w>/grad_accum, scale 1/(R A))   ring, chunk of the
//     mean
//     plain:   optimizer_update(w, cross_replica_all_gather(c), lr, state...)
//     sharded: optimizer_update(w, c, lr, state chunks...) with replicas = R (replicated tensor
//              sharding, a property of the update: each replica keeps 1/R of the state and
//              updates 1/R of the weight, which compile() all-gathers; optimizers/optimizer.h)
//     with accumulation > 1: assign(<w>/grad_accum, 0)
//   loss scaling: the source's overflow flag, which saw one micro-batch of
//     one replica, is dropped with the ops that only fed it; the flag (same name, a graph
//     output) is recomputed from every mean gradient g' before the first update, so every
//     replica skips the step when any gradient of any replica or micro-batch was Inf/NaN.
//
// Every replica therefore applies the same update to the same weights: replicas stay bit-identical.
// Batch-norm statistics stay per replica (each replica normalises over its own micro-batch).
#pragma once

#include <string>
#include <vector>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/ir/graph.h"

namespace ipu::replication {

struct ReplicationOptions {
  int replicas = 1;                  // R, data-parallel replicas
  int accumulation = 1;              // A, micro-batches per weight update
  bool shardOptimizerState = false;  // replicated tensor sharding of the optimizer state
  // Gradient accumulators in the weight's dtype (PopART's Adam/LAMB `accum_type` default, which
  // Graphcore's BERT keeps: f16 accumulators for f16 weights) instead of f32: half the
  // always-live bytes of a 16-bit model's accumulators. Each micro-batch's sum is rounded to the
  // weight's dtype (stochastically where the policy rounds so); the reduction stays f32.
  bool accumulateInWeightDType = false;
};

struct ReplicatedGraph {
  Graph graph;
  int updateFirstOp = -1;                    // first op of the update part (-1: none, R = A = 1)
  std::vector<std::string> zeroInitialised;  // created variables that start at 0
  // Puts the pass's program structure into compile options (accumulation, update part).
  void configure(CompileOptions& co, int accumulation) const;
};

// Throws GraphError for options out of range or a graph whose optimizer_update ops are followed by
// a reader of the weights they update (the update must come last).
ReplicatedGraph replicate(const Graph& training, const ReplicationOptions& options);

}  // namespace ipu::replication
