// The benchmarks run_benchmark knows, one entry each: whether it runs yet, and how to build its
// model as the two graphs the ClassifierTrainer runs (training step, inference). A pending model
// (BERT-Large, EfficientNet-B4) has an entry that says why it is refused, so it plugs in by
// filling `build` and setting `implemented`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/benchmark.h"
#include "harness/mllog.h"  // Json
#include "ipu_backend/ir/graph.h"
#include "ipu_backend/precision/precision_policy.h"
#include "models/small_cnn/small_cnn.h"  // ::models::ClassifierGraph

namespace ipu::harness {

// Which implementation fills the resnet50 slot at mini scale.
enum class ModelChoice {
  kReference,  // the real model (ResNet-50 [3,4,6,3] on 28x28x1 for resnet50 mini)
  // TEMPORARY: the small CNN stands in for ResNet-50 while models/resnet50 does not train at a
  // usable speed on the backend (see harness/README.md). Opt-in only (--model-stand-in).
  kSmallCnnStandIn,
};

struct ModelRequest {
  Scale scale = Scale::kMini;
  std::int64_t micro_batch = 1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  // LARS (opt_name "lars"): trust coefficient and epsilon; eta 0 is plain SGD with momentum.
  double lars_eta = 0.0;
  double lars_epsilon = 0.0;
  ModelChoice choice = ModelChoice::kReference;
  precision::PrecisionPolicy precision;  // fp32 by default
  int bn_span_replicas = 1;  // batch-norm statistics over this many replicas (model_bn_span / b)
};

// A built model: both graphs (same variable names), host initial values, and what the MLPerf
// log says about it.
struct ModelInstance {
  ::models::ClassifierGraph train;
  ::models::ClassifierGraph eval;
  // Initial value of every variable of `train.graph` (weights, running stats, momentum).
  std::function<std::map<std::string, std::vector<float>>(std::uint64_t seed)> init;
  std::vector<std::string> weight_tensor_names;  // trainable parameters, for weights_initialization
  std::string variant;      // model variant for the division rules ("resnet50")
  std::string description;  // one line for the console and the system description
  bool stand_in = false;    // true for a TEMPORARY stand-in model
};

struct BenchmarkEntry {
  Benchmark benchmark = Benchmark::kResNet50;
  bool implemented = false;
  std::string variant;          // model variant for the division rules ("resnet50")
  std::string not_implemented;  // why it is refused (when !implemented)
  bool full_scale = false;      // the full-scale data pipeline is wired
  std::string full_scale_missing;
  std::function<ModelInstance(const ModelRequest&)> build;  // empty when !implemented
};

const std::vector<BenchmarkEntry>& benchmarkRegistry();
const BenchmarkEntry& findBenchmarkEntry(Benchmark benchmark);

}  // namespace ipu::harness
