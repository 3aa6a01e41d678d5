// A small CNN for 28x28 single-channel images (Fashion-MNIST), written against the backend's
// builder: the quick end-to-end check that the whole stack (IR -> autodiff -> planner ->
// engine) really trains.
//   conv3x3(1->c1) BN relu maxpool2  [N,14,14,c1]
//   conv3x3(c1->c2) BN relu maxpool2 [N,7,7,c2]
//   flatten -> dense(7*7*c2 -> classes)
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

struct SmallCnnConfig {
  std::int64_t height = 28, width = 28, channels = 1;
  std::int64_t conv1Channels = 16, conv2Channels = 32;
  std::int64_t numClasses = 10;
  double bnEps = 1e-5;
  double bnMomentum = 0.9;  // running = m * running + (1 - m) * batch (PyTorch's 0.1)
  double labelSmoothing = 0.0;
  int bnSpanReplicas = 1;  // training batch norm over groups of this many replicas (bn_span)
};

// The graphs are models/task_graph.h's: data inputs "images" f32[N,H,W,C] and "labels" i32[N],
// evaluation output "logits" [N, classes].

// One training step as one graph: forward, mean loss, backward, SGD momentum update, BN running
// statistics update. Variable names match buildSmallCnnInference.
TaskGraph buildSmallCnnTraining(const SmallCnnConfig& c, std::int64_t batch,
                                const ipu::SgdOptions& sgd);
// Evaluation graph: batch-norm with running statistics, logits and loss outputs.
TaskGraph buildSmallCnnInference(const SmallCnnConfig& c, std::int64_t batch);
// The same under a precision policy (compiler/mixed_precision.h): weights, activations and
// gradients in the policy's dtypes, its loss scaling in the training graph.
TaskGraph buildSmallCnnTraining(const SmallCnnConfig& c, std::int64_t batch,
                                const ipu::SgdOptions& sgd,
                                const ipu::precision::PrecisionPolicy& policy);
TaskGraph buildSmallCnnInference(const SmallCnnConfig& c, std::int64_t batch,
                                 const ipu::precision::PrecisionPolicy& policy);

// Host-side initial values for every variable of g: Kaiming-normal convolutions (fan-out, as
// torchvision), uniform(-1/sqrt(in), 1/sqrt(in)) dense layers, BN gamma 1 / beta 0, running
// variance 1, everything else 0. Deterministic for a seed.
std::map<std::string, std::vector<float>> initSmallCnn(const ipu::Graph& g, std::uint64_t seed);

}  // namespace ipu::models
