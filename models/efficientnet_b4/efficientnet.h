// EfficientNet (B0 block table scaled by width / depth, as torchvision's efficientnet_b4) on the
// project's graph IR, with torchvision's tensor names.
//
//   stem (features.0):  conv 3x3/2 pad 1 -> norm -> swish
//   stage s = 1..7 (features.s), block j (features.s.j), stride on the first block only:
//     [expand 1x1 conv -> norm -> swish]          (block.0; absent when the ratio is 1)
//     spatial kxk conv, groups = C/groupSize -> norm -> swish   (depthwise when groupSize 1)
//     squeeze-excite: mean over H,W -> fc1 (1x1 conv + bias) -> swish -> fc2 -> sigmoid -> * x
//     project 1x1 conv -> norm                    (no activation)
//     + input when stride 1 and in == out, the branch dropped per sample (stochastic depth,
//       p = stochasticDepth * i / blocks for global block i) in training graphs
//   head (features.8): conv 1x1 to 4x the last stage's channels -> norm -> swish
//   classifier: mean over H,W -> dropout (training) -> classifier.1 (Linear) -> softmax CE
//
// Layouts: activations NHWC; conv weights [K,R,S,C/G] (OHWI: the same element order as
// PyTorch's [K,C/G,R,S] for 1x1 and depthwise convs); classifier.1.weight [classes, features]
// as PyTorch's nn.Linear. Channel rounding is torchvision's _make_divisible(c * width, 8);
// repeats ceil(r * depth); SE squeeze width max(1, block input channels / 4).
//
// G16 (Graphcore's open variant): groupSize 16 makes every spatial conv a group conv of 16
// channels per group (groups = max(1, C / 16), a full conv where C < 32 leaves one group) and
// expandRatioOverride 4 replaces the expansion ratio 6; parameter count stays ~19.3 M.
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

namespace ipu::models::efficientnet {

// One row of the B0 table, before width / depth scaling.
struct StageSpec {
  int expandRatio = 6;
  int kernel = 3;
  int stride = 1;
  int inChannels = 0;
  int outChannels = 0;
  int layers = 1;
};

enum class Norm { Batch, Group };

struct Config {
  std::vector<StageSpec> stages;  // B0's seven stages by default (b4())
  double widthMult = 1.4;
  double depthMult = 1.8;
  int inputH = 380, inputW = 380, inputC = 3;
  int numClasses = 1000;
  double dropout = 0.4;          // before the classifier, training graphs only
  double stochasticDepth = 0.2;  // drop probability of the last block's branch, rising linearly
  Norm norm = Norm::Batch;
  int normGroups = 4;  // Norm::Group (Graphcore: 4 groups)
  double normEps = 1e-5;
  // EMA momentum of the running statistics: running = m * running + (1 - m) * batch.
  // torchvision's BatchNorm2d momentum 0.1 is m = 0.9 here.
  double bnMomentum = 0.9;
  // > 0: the classifier weight starts U(+-1/sqrt(classifierInitFanOut)) instead of torchvision's
  // U(+-1/sqrt(numClasses)); the mini runs keep the 1000-class head's range at 10 classes.
  int classifierInitFanOut = 0;
  int groupSize = 1;            // channels per group of the spatial convs; 1 = depthwise
  int expandRatioOverride = 0;  // > 0: replaces every expansion ratio other than 1 (G16: 4)
  double labelSmoothing = 0.0;
  std::uint64_t dropoutSeed = 0x5eed;  // seeds of the dropout ops (one per op, derived)

  static Config b4();     // torchvision efficientnet_b4: 380x380x3, 1000 classes
  static Config b4G16();  // b4 with group convs of 16 channels, expansion 4
  // Tests: the same code, three stages [1 (e1), 2 (e6, k5, /2), 2 (e6, /2)] at width 0.5,
  // depth 1, 32x32x3, 10 classes (about 0.03 M parameters).
  static Config small();
};

// One MBConv block after scaling.
struct BlockSpec {
  std::string prefix;  // "features.<stage>.<block>."
  int stage = 0, index = 0, globalIndex = 0;
  i64 in = 0, out = 0, expanded = 0, squeeze = 0, kernel = 3, stride = 1, groups = 1;
  double dropProb = 0;  // stochastic depth of this block's residual branch (0 without residual)
  bool residual() const { return stride == 1 && in == out; }
};

i64 makeDivisible(double v, i64 divisor = 8);  // torchvision's _make_divisible
std::vector<BlockSpec> blocks(const Config& c);
i64 stemChannels(const Config& c);
i64 headChannels(const Config& c);

enum class Mode { Train, Inference };

struct EfficientNetGraph {
  Config config;
  i64 batch = 0;
  Mode mode = Mode::Train;
  Graph graph;
  int images = -1;                // input f32[N,H,W,C]
  int labels = -1;                // input i32[N]
  int dropoutKey = -1;            // input i32[2] (step, first global sample) when dropout ops exist
  int logits = -1;                // f32[N,classes], output
  int sampleLoss = -1;            // f32[N]
  int loss = -1;                  // f32[] mean over the batch, output
  std::vector<int> params;        // trainable variables, torchvision's state_dict order
  std::vector<int> runningStats;  // batch norm running_mean / running_var, model order
  std::map<int, int> grads;       // param -> gradient (after appendGradients)
  // A training step (buildTraining): the "lr" input, the optimizer's state and, under a
  // loss-scaled policy, the loss-scale tensors (compiler/mixed_precision.h); -1 / empty else.
  int lr = -1;
  OptimizerState optimizer;
  int lossScale = -1, lossScaleInverse = -1, overflow = -1;

  std::vector<std::string> paramNames() const;
  i64 parameterCount() const;
};

// Forward graph: logits and loss marked as outputs. Train: batch statistics with an EMA of the
// running statistics (unbiased variance, as PyTorch), dropout and stochastic depth (rates > 0).
// Inference: running statistics, no dropout. Bad configs throw GraphError naming the field.
EfficientNetGraph buildForward(const Config& c, i64 batch, Mode mode);
// Appends the backward pass of the mean loss; every parameter must get a gradient.
void appendGradients(EfficientNetGraph& g);

// A forward graph rewritten for a precision policy (compiler/mixed_precision.h): the same
// struct over the rewritten graph, tensor names unchanged. Call it before appendGradients (a
// training step then comes from appendTrainingStep with the policy's loss scaling).
EfficientNetGraph withPrecision(const EfficientNetGraph& forward,
                                const precision::PrecisionPolicy& policy);

// Whether a parameter is a norm layer's scale or shift (rank 1, not a squeeze-excite or
// classifier bias): the reference applies no weight decay to them.
bool isNormParameter(const Tensor& t);

// One training step as one graph: the forward graph (Mode::Train) under `policy`, its backward
// pass and `opts`'s update per parameter (weight decay on every parameter but the norm layers').
EfficientNetGraph buildTraining(const Config& c, i64 batch, OptimizerOptions opts,
                                const precision::PrecisionPolicy& policy = {});
EfficientNetGraph buildInference(const Config& c, i64 batch,
                                 const precision::PrecisionPolicy& policy = {});

// Host initialisation of every variable, by name, as torchvision's efficientnet: conv weights
// Kaiming normal (fan_out = K x R x S), the classifier uniform(+-1/sqrt(classes)), biases 0,
// norm scale 1 and shift 0, running mean 0 and variance 1; optimizer state 0 (apply
// models::applyOptimizerStateInit for RMSProp's 1s and the weight EMA). Deterministic per seed
// (models/common/init_random.h).
std::map<std::string, std::vector<float>> initWeights(const EfficientNetGraph& eg,
                                                      std::uint64_t seed);

// The trainer's view (models/task_graph.h): data inputs "images", "labels" and, when the graph
// has dropout ops, "dropout_key" (i32[2]: step, first global sample of the micro-batch);
// evaluation output "logits".
TaskGraph taskGraph(const EfficientNetGraph& eg,
                    const precision::LossScalingConfig& lossScaling = {});

}  // namespace ipu::models::efficientnet
