// Optimizers as lowerings. A model asks for one optimizer_update op per weight
// (appendOptimizer); the replication pass moves those ops after the gradient reduction and may
// shard them; compile() lowers each one (expandOptimizers) into ordinary ops (cast, unary,
// binary, reduce, lars_learning_rate) and apply_update, the one in-place write. So the planner,
// both engine modes and the cost model know no optimizer: only the ops they already price.
//
// Every optimizer is one file in this folder (sgd, lars, lamb, rmsprop, adam) that computes the
// new weight and state in f32 from f32 operands; the wrappers in lowering.cpp do what is common
// to all of them: 16-bit weights and state are widened first and rounded once on the write
// (stochastically with stochastic_rounding), loss-scaled gradients are unscaled and the writes
// skipped on overflow, a sharded update works on this replica's chunk and all-gathers the new
// weight, and a weight EMA (ema.cpp) follows the new weight.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ipu_backend/ir/graph.h"

namespace ipu {

// Tensors of a loss-scaled update (see compiler/mixed_precision.h): both f32 scalars.
struct LossScaleTensors {
  int inverseScale = -1;  // 1/S, multiplies every gradient before the update
  int overflow = -1;      // 0 when all gradients are finite, NaN otherwise: skip the update
};

struct OptimizerOptions {
  // "sgd" (PyTorch's SGD with momentum), "lars" (TensorFlow's LARSOptimizer, the MLPerf
  // ResNet-50 reference), "lamb" (the MLPerf BERT reference; biasCorrection false is Graphcore's
  // LambNoBias), "rmsprop" (TensorFlow's form), "adam" (PyTorch's Adam, L2 weight decay).
  std::string kind = "sgd";
  double momentum = 0.9;  // sgd, lars, rmsprop
  double weightDecay = 0.0;
  bool nesterov = false;  // sgd, lars
  // Weight decay, and LARS's / LAMB's trust ratio, apply to the variables this returns true for
  // (the MLPerf references skip batch norm, layer norm and biases). The others take plain SGD
  // under "lars" and an Adam step without decay or trust ratio under "lamb".
  std::function<bool(const Tensor&)> decay = [](const Tensor&) { return true; };
  // LARS: trust coefficient eta (the reference's 0.001) and epsilon; eta > 0 with kind "sgd"
  // also selects LARS (the ResNet-50 options).
  double larsEta = 0.0;
  double larsEpsilon = 0.0;
  double beta1 = 0.9, beta2 = 0.999;  // lamb, adam
  double epsilon = 1e-6;              // lamb, adam; rmsprop: inside the square root
  bool biasCorrection = true;         // lamb, adam
  double rho = 0.9;                   // rmsprop: decay of the mean square
  // lamb: clip the gradients to this global norm (over every lamb update) first; 0: no clipping.
  double maxGradNorm = 0.0;
  // > 0: keep `<weight>/ema`, an exponential moving average of the weight with this decay.
  double emaDecay = 0.0;
  // TensorFlow's ExponentialMovingAverage with num_updates (the EfficientNet reference passes
  // the global step): the n-th update (n = 1, 2, ...) uses min(emaDecay, (1 + n) / (10 + n)),
  // so the average of a short run is not stuck near the initial weights. One f32 scalar state
  // variable, kOptimizerEmaUpdates, counts the steps for all weights (the decay is computed once
  // a step: per-weight scalars would all land on one tile).
  bool emaWarmup = false;
  // Round 16-bit weight and state writes stochastically (the IPU's 16.16 setting).
  bool stochasticRounding = false;
  // Set: the update unscales the gradients and is skipped on overflow.
  LossScaleTensors lossScaling;
};
// The name the ResNet-50 code and its tests grew up with.
using SgdOptions = OptimizerOptions;

// The step count of the EMA warm-up (OptimizerOptions::emaWarmup), shared by all weights.
inline constexpr char kOptimizerEmaUpdates[] = "optimizer/ema_updates";

enum class StateInit : std::uint8_t { Zero, One, Weight };  // Weight: a copy of the weight

struct OptimizerState {
  std::vector<int> stateVariables;  // every state variable the optimizer created
  std::vector<StateInit> init;      // per state variable: its value before the first step
  std::vector<int> weightOf;  // per state variable: its weight (shared ones: the first weight)
};

// For each (variable, grad): creates the optimizer's state variables `<variable>/<slot>` and
// appends an optimizer_update that reads the scalar learning-rate tensor `lr` (a host input, so
// schedules need no recompile). GraphError for an unknown kind or bad options.
OptimizerState appendOptimizer(Graph& g, const std::map<int, int>& grads, int lr,
                               const OptimizerOptions& opts);
inline OptimizerState appendSgdUpdate(Graph& g, const std::map<int, int>& grads, int lr,
                                      const OptimizerOptions& opts) {
  return appendOptimizer(g, grads, lr, opts);
}

struct ExpandedOptimizers {
  int updates = 0;                   // optimizer_update ops lowered
  std::vector<int> producedTensors;  // tensors the lowerings created (cost attribution)
  std::int64_t stateBytes = 0;       // optimizer state per replica (sharded: 1/R)
};
// Lowers every optimizer_update in place: its ops sit where the update was (after the
// replication pass's updateFirstOp, which stays valid). Tensor ids are kept. GraphError naming
// the weight for an unknown optimizer, a wrong number of state variables or an update that
// cannot be sharded (LARS, LAMB: their trust ratio needs the whole weight).
ExpandedOptimizers expandOptimizers(Graph& g);

// The names `appendOptimizer` accepts.
std::vector<std::string> optimizerNames();
// Whether an update of this optimizer can be sharded over replicas (false: its trust ratio
// needs the norm of the whole weight, LARS and LAMB).
bool optimizerShardable(const std::string& kind);

}  // namespace ipu
