// Recomputation (RecomputeThenBackpropagate, as Graphcore's pipelines use it): a training graph's
// forward pass is cut into segments at checkpoint tensors; each segment but the last is run a
// second time, from the checkpoints, right before the first backward op that reads it, and the
// backward ops read those recomputed activations. So between a segment's forward and its backward
// only the checkpoints (and what the rest of the forward pass still needs) stay live, at the
// price of a second forward pass over the recomputed segments.
//
// The recomputed ops are copies of the forward ops on the same inputs (same kinds, attributes
// and operand values, keyed random draws included), so the gradients and the updated weights are
// the bits of the graph without recomputation.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct RecomputationReport {
  int segments = 0;              // forward segments cut by the checkpoints (the last one is kept)
  int recomputedOps = 0;         // forward ops copied into the backward pass
  i64 recomputedMacs = 0;        // multiply-accumulates of the copied convolutions and matmuls
  i64 forwardMacs = 0;           // the same over the whole forward pass
  std::vector<int> checkpoints;  // tensor ids, in forward order
  // (recomputed op, the forward op it copies), op ids of the rewritten graph.
  std::vector<std::pair<int, int>> copies;
};

// Rewrites `g` (forward ops the loss depends on, then the backward and update ops) so that the
// backward reads recomputed activations. `checkpoints` are tensor names produced by forward ops
// (GraphError naming the first that is unknown, not an activation, or not on the loss's forward
// path, with a hint). Ops that only feed running statistics before the loss keep the originals.
// Returns what was recomputed; no checkpoints: nothing changes.
RecomputationReport applyRecomputation(Graph& g, int loss,
                                       const std::vector<std::string>& checkpoints);

// The tensors that cross a stage boundary of the forward pass: produced by a forward op of stage
// s and read by a forward op of a later stage (`stageOfOp[op]`, -1 for ops outside the forward
// pass). Pipelining stashes exactly these; as checkpoints they give "recompute every stage".
std::vector<std::string> stageBoundaryCheckpoints(const Graph& g,
                                                  const std::vector<int>& stageOfOp);

}  // namespace ipu
