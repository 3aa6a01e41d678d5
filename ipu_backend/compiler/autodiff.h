// Autodiff: appends the backward graph of a scalar loss to the same Graph, from per-op gradient
// rules, and the optimizer update ops after it, so that one training step is one static program.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

struct GradientResult {
  std::map<int, int> grads;  // wrt tensor id -> gradient tensor id
  int opsAdded = 0;
};

// Appends ops computing d(loss)/d(t) for each t in wrt. The loss must have one element.
// The seed gradient is `seed` (1.0, or the loss scale when loss scaling arrives).
// A tensor in wrt that the loss does not depend on gets no entry (callers decide if that is an
// error). Throws GraphError for an op on the path that has no gradient rule, naming the op.
GradientResult appendBackward(Graph& g, int loss, const std::vector<int>& wrt, double seed = 1.0);
// The same with the seed read from a scalar tensor (a host input: the current loss scale, which
// dynamic loss scaling changes between steps without a recompile).
GradientResult appendBackwardSeeded(Graph& g, int loss, const std::vector<int>& wrt,
                                    int seedTensor);

// Tensors of a loss-scaled update (see compiler/mixed_precision.h): both f32 scalars.
struct LossScaleTensors {
  int inverseScale = -1;  // 1/S, multiplies every gradient before the update
  int overflow = -1;      // 0 when all gradients are finite, NaN otherwise: skip the update
};

struct SgdOptions {
  double momentum = 0.9;
  double weightDecay = 0.0;
  bool nesterov = false;
  // Weight decay applies to the variables this returns true for (MLPerf: not BN params, biases).
  std::function<bool(const Tensor&)> decay = [](const Tensor&) { return true; };
  // LARS (compiler/lars.h) on the variables `decay` selects, as the MLPerf reference skips batch
  // norm and biases for both: trust coefficient eta (the reference's 0.001) and epsilon. 0: SGD.
  double larsEta = 0.0;
  double larsEpsilon = 0.0;
  // Round 16-bit weight and momentum writes stochastically (the IPU's 16.16 setting).
  bool stochasticRounding = false;
  // Set: the update unscales the gradients and is skipped on overflow (sgd_update_scaled).
  LossScaleTensors lossScaling;
};

struct OptimizerState {
  std::vector<int> stateVariables;  // created momentum buffers (initialise to zero)
};

// For each (variable, grad): creates `<variable>/momentum` and appends an sgd_update op that
// reads the scalar learning-rate tensor `lr` (a host input, so schedules need no recompile).
OptimizerState appendSgdUpdate(Graph& g, const std::map<int, int>& grads, int lr,
                               const SgdOptions& opts);

// All trainable variables in declaration order: Variables that some op reads and that no
// side-effect op writes as state (i.e. not momentum buffers or running statistics).
std::vector<int> trainableVariables(const Graph& g);

}  // namespace ipu
