// ResNet-50 v1.5 (the MLPerf reference / torchvision resnet50) on the project's graph IR.
//
//   stem:  conv0 7x7/2 pad 3 -> bn0 -> relu -> maxpool 3x3/2 pad 1
//   stage s = 1..4 (widths w = 64, 128, 256, 512; out = 4w), blocks [3, 4, 6, 3]:
//     unit: conv1 1x1 (w) -> bn1 -> relu -> conv2 3x3 (w, stride) -> bn2 -> relu
//           -> conv3 1x1 (4w) -> bn3 ; + shortcut ; relu
//     v1.5: the stride (2 in the first unit of stages 2-4) is on conv2, not conv1.
//     The first unit of every stage has a projection shortcut conv1sc 1x1/stride -> bnsc.
//   head:  global average pool -> fc1 (dense, 1000) -> softmax cross entropy (mean over batch)
//
// Layouts: activations NHWC, conv weights [K,R,S,C] (OHWI), dense weights [in,out], batch norm
// over the last (channel) dim. No conv biases. Every tensor name is the MLPerf canonical name
// (conv0_weight, stage1_unit1_bn1_gamma, fc1_bias, ...), so weights move between the training
// and the inference graph, and into MLPerf logs, by name.
//
// Small single-channel images (Fashion-MNIST 28x28x1) use Stem::SmallImage: a 3x3 pad-1 stem
// conv of stride `smallStemStride` and no max pool (stride 1 is the CIFAR-style stem): the
// ImageNet stem would shrink 28x28 to 7x7 before the first stage and 1x1 by stage 3, leaving
// batch norm nothing to normalise over. fashionMnist() uses stride 2 (stage 1 at 14x14, stage 4
// at 2x2): a quarter of stride 1's work per image (about 0.25 GMAC instead of 1.0), which is what
// makes a mini run fit a CPU's budget. Parameter names and counts are unchanged; only conv0's
// kernel is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/precision_policy.h"
#include "models/task_graph.h"

namespace ipu::models {

struct ResNetConfig {
  enum class Stem {
    ImageNet,    // 7x7/2 conv pad 3 + 3x3/2 max pool pad 1 (224x224 in -> 56x56 at stage 1)
    SmallImage,  // 3x3 conv pad 1 of stride smallStemStride, no max pool (28x28 in, stride 2 ->
                 // 14x14 at stage 1)
  };

  int numClasses = 1000;
  std::vector<int> blocks = {3, 4, 6, 3};  // bottleneck units per stage
  int baseWidth = 64;                      // stem channels and stage-1 bottleneck width
  int expansion = 4;                       // unit output channels = expansion x width
  int inputH = 224, inputW = 224, inputC = 3;
  Stem stem = Stem::ImageNet;
  int smallStemStride = 1;      // Stem::SmallImage only (the ImageNet stem is always /4)
  double labelSmoothing = 0.0;  // MLPerf ResNet uses 0.1
  double bnEps = 1e-5;
  // EMA momentum of the running statistics: running = m * running + (1 - m) * batch.
  // PyTorch's BatchNorm momentum 0.1 is m = 0.9 here.
  double bnMomentum = 0.9;
  bool zeroInitLastBnGamma = false;  // initWeights: bn3 gamma = 0 in every unit (Goyal et al.)
  // Training batch norm over groups of this many replicas (model_bn_span = this x micro-batch);
  // 1: each replica's micro-batch alone. The replication pass checks that it divides R.
  int bnSpanReplicas = 1;

  static ResNetConfig resnet50();      // full, 224x224x3, 1000 classes
  static ResNetConfig small();         // tests: blocks [1,1,1,1], width 8, 32x32x3, 10 classes
  static ResNetConfig fashionMnist();  // full [3,4,6,3], 28x28x1, SmallImage stem /2, 10 classes
};

enum class BnMode { Train, Inference };

struct ResNetGraph {
  ResNetConfig config;
  i64 batch = 0;
  BnMode bnMode = BnMode::Train;
  Graph graph;
  int images = -1;                  // input f32[N,H,W,C]
  int labels = -1;                  // input i32[N]
  int lr = -1;                      // input f32[] (training graphs only)
  int logits = -1;                  // f32[N,classes], output
  int sampleLoss = -1;              // f32[N]
  int loss = -1;                    // f32[] mean over the batch, output
  std::vector<int> params;          // trainable variables, canonical order
  std::vector<int> runningStats;    // <bn>_running_mean, <bn>_running_var, in model order
  std::map<int, int> grads;         // param -> gradient tensor (after appendGradients)
  std::vector<int> optimizerState;  // momentum buffers (after appendSgd)
  OptimizerState optimizer;         // the same, with each one's first value
  // Loss scaling (training graphs of a loss-scaled policy, else -1): host inputs S and 1/S,
  // output overflow flag (see ipu_backend/compiler/mixed_precision.h).
  int lossScale = -1, lossScaleInverse = -1, overflow = -1;

  std::vector<std::string> paramNames() const;
  i64 parameterCount() const;  // elements of all trainable parameters
};

// The canonical parameter names of a config, in model order (161 for ResNet-50).
std::vector<std::string> resnetParameterNames(const ResNetConfig& c);

// Forward graph: logits and loss marked as outputs. Train: batch_norm_train with ema_update
// of the running statistics (var scaled by n/(n-1), unbiased, as PyTorch). Inference:
// batch_norm_inference with the running statistics.
ResNetGraph buildForward(const ResNetConfig& c, i64 batch, BnMode mode);
// Appends the backward pass of the mean loss; every parameter must get a gradient.
void appendGradients(ResNetGraph& rg);
// Adds the "lr" input (f32[]) and one optimizer_update (SGD or LARS) per parameter.
void appendSgd(ResNetGraph& rg, const SgdOptions& opts);

// One training step as one graph: forward (train BN) + backward + SGD momentum update.
ResNetGraph buildTraining(const ResNetConfig& c, i64 batch, const SgdOptions& opts);
ResNetGraph buildInference(const ResNetConfig& c, i64 batch);
// The same under a precision policy: the forward graph through applyPrecision, then the
// policy's training step (loss scaling, stochastic rounding). Tensor names are unchanged.
ResNetGraph buildTraining(const ResNetConfig& c, i64 batch, const SgdOptions& opts,
                          const precision::PrecisionPolicy& policy);
ResNetGraph buildInference(const ResNetConfig& c, i64 batch,
                           const precision::PrecisionPolicy& policy);

// The trainer's view (models/task_graph.h): data inputs "images" and "labels", evaluation output
// "logits"; running statistics and optimizer state are the state it initialises but does not
// train. `lossScaling` is the policy's (the graph's loss-scale tensors are set when it has them).
inline TaskGraph taskGraph(const ResNetGraph& rg,
                           const precision::LossScalingConfig& lossScaling = {}) {
  TaskGraph t;
  t.graph = rg.graph;
  t.inputs = {rg.images, rg.labels};
  t.lr = rg.lr;
  t.loss = rg.loss;
  t.outputs = {{"logits", rg.logits}};
  t.parameters = rg.params;
  t.state = rg.runningStats;
  t.state.insert(t.state.end(), rg.optimizerState.begin(), rg.optimizerState.end());
  t.optimizer = rg.optimizer;
  t.lossScale = rg.lossScale;
  t.lossScaleInverse = rg.lossScaleInverse;
  t.overflow = rg.overflow;
  t.lossScaling = lossScaling;
  return t;
}

// MLPerf-style SGD: weight decay on conv and fc weights only (not BN gamma/beta, not biases).
SgdOptions resnetSgdOptions(double momentum = 0.9, double weightDecay = 5e-5);

// Host initialisation of every variable of the graph, by name: conv weights Kaiming normal
// (fan_out, relu gain) as torchvision, BN gamma 1 (0 for bn3 if zeroInitLastBnGamma) and beta
// 0, fc weight and bias uniform(-1/sqrt(in), 1/sqrt(in)) (nn.Linear's default), running mean 0
// and var 1, momentum buffers 0. Deterministic for a seed, independent of the platform's
// <random> distributions (mt19937_64 per tensor, own Box-Muller).
std::map<std::string, std::vector<float>> initWeights(const ResNetGraph& rg, std::uint64_t seed);

// The recomputation checkpoints of Graphcore's MLPerf v1.1 ResNet-50 (configs.yml
// `mk2_resnet50_mlperf_pod*_lars`: pipeline splits [b1/0, b1/2, b2/0, b2/2, b3/0, b3/3]/relu on
// one IPU, Sequential, recomputation on): the output ReLUs of those blocks, in our names (their
// b<s>/<u> is stage s, unit u counted from 0; ours counts units from 1).
std::vector<std::string> publishedRecomputationCheckpoints();

// Multiply-accumulates of the conv2d and matmul ops of a graph (whole batch). Call it on a
// forward or inference graph: a training graph's backward matmuls would count too.
double forwardMacs(const Graph& g);

}  // namespace ipu::models
