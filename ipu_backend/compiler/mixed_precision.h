// Mixed precision on the IR: the precision pass and the loss-scaled training step.
//
// applyPrecision() rewrites a forward graph (before autodiff) for a PrecisionPolicy:
//   * weights (variables read by compute ops) are stored in the policy's master dtype and cast
//     to the compute dtype where they are used ("16.32": f32 masters; "16.16": f16 weights);
//   * host inputs are cast to the compute dtype at their first use;
//   * what stays f32 is a fact of each op kind, OpDef::precision (ir/op_defs.h, set in the op
//     table or the op's own file): KeepF32 ops (softmax cross entropy) read f32, their inputs
//     cast up; DataInCompute ops (batch norm) take x in the compute dtype while their
//     parameters, running statistics and batch statistics stay f32 (the BN kernels widen x,
//     compute the statistics in f32 and round only y); FollowState (ema_update) casts the value
//     to its f32 state;
//   * ops with OpDef::usesPartials (conv, matmul) get the policy's partials type (attribute
//     `partials`);
//   * 16-bit graph outputs are replaced by an f32 cast (`<name>/f32`), so hosts read f32.
// Autodiff then differentiates through the casts (d cast = cast back), so gradients come out in
// each tensor's own dtype.
//
// appendTrainingStep() appends the backward pass and the update for the policy's loss scaling:
//   none     appendBackward + appendOptimizer;
//   static / dynamic: the seed of the backward pass is the host input `loss_scale` (S), every
//            gradient is checked for Inf/NaN (0 * g is NaN exactly when g is, so the sum of
//            0 * g over all gradients is 0 or NaN: the output `loss_scaling/overflow`), and
//            the optimizer's loss-scale wrapper multiplies the gradients by the host input
//            `loss_scale_inverse` (1/S) and skips the update (weights and state unchanged) on
//            overflow (ipu_backend/optimizers).
// The host owns S (precision::LossScaler): it feeds S and 1/S every step and reads the overflow
// flag after it, so dynamic scaling changes S without a recompile.
#pragma once

#include <map>
#include <vector>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/precision_policy.h"

namespace ipu {

struct PrecisionRewrite {
  Graph graph;
  std::vector<int> tensorMap;  // old tensor id -> new tensor id (outputs: the f32 copy)
  int map(int oldId) const { return oldId < 0 ? -1 : tensorMap.at(static_cast<size_t>(oldId)); }
};

// Throws GraphError naming the op for a graph that already contains backward or update ops
// other than ema_update (run the pass before autodiff).
PrecisionRewrite applyPrecision(const Graph& forward, const precision::PrecisionPolicy& policy);

struct TrainingStepTensors {
  std::map<int, int> grads;  // parameter -> gradient
  OptimizerState optimizer;
  int lossScale = -1;         // input f32[]: S (loss scaling only)
  int lossScaleInverse = -1;  // input f32[]: 1/S
  int overflow = -1;          // output f32[]: 0, or NaN when a gradient is not finite
};

TrainingStepTensors appendTrainingStep(Graph& g, int loss, const std::vector<int>& params, int lr,
                                       SgdOptions sgd, const precision::PrecisionPolicy& policy);

}  // namespace ipu
