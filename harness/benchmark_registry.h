// The benchmarks run_benchmark knows, one entry each: whether it runs yet, how to build its
// model as the two graphs the Trainer runs (training step, inference; models/task_graph.h), and
// its data and metric (harness/task.h). A pending model (BERT-Large, EfficientNet-B4) has an
// entry that says why it is refused, so it plugs in by filling `build` and `data` and setting
// `implemented`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/benchmark.h"
#include "harness/mllog.h"  // Json
#include "harness/task.h"
#include "ipu_backend/ir/graph.h"
#include "ipu_backend/optimizers/optimizer.h"
#include "ipu_backend/precision/precision_policy.h"
#include "models/task_graph.h"

namespace ipu::harness {

struct ModelRequest {
  Scale scale = Scale::kMini;
  std::int64_t micro_batch = 1;
  // The optimizer, as ipu_backend/optimizers takes it: kind (sgd, lars, lamb, rmsprop, adam),
  // its constants, and a weight EMA (emaDecay > 0). The model sets which tensors take weight
  // decay and trust ratio (OptimizerOptions::decay); the precision policy adds loss scaling and
  // stochastic rounding.
  OptimizerOptions optimizer;
  precision::PrecisionPolicy precision;  // fp32 by default
  int bn_span_replicas = 1;  // batch-norm statistics over this many replicas (model_bn_span / b)
  Json hyperparameters;      // the logged MLPerf keys (EfficientNet: model_variant, rates)
  // Text models (BERT): the rows' tokens, masked-LM slots and sequences per row (pack) the
  // graph is built for, and the vocabulary (the data must have been made for the same).
  struct Text {
    int sequence_length = 0, masked_slots = 0, max_per_pack = 1, vocab = 0;
    // The mini encoder's shape (0: bertMiniConfig's closed mini model, 24 x 32).
    int layers = 0, hidden = 0, heads = 0, ffn = 0;
  } text;
};

// A built model: both graphs (same variable names, same data inputs), host initial values, and
// what the MLPerf log says about it.
struct ModelInstance {
  models::TaskGraph train;
  models::TaskGraph eval;
  // Initial value of every variable of `train.graph` (weights, running stats, optimizer state).
  std::function<std::map<std::string, std::vector<float>>(std::uint64_t seed)> init;
  std::vector<std::string> weight_tensor_names;  // trainable parameters, for weights_initialization
  std::string variant;      // model variant for the division rules ("resnet50")
  std::string description;  // one line for the console and the system description
};

struct BenchmarkEntry {
  Benchmark benchmark = Benchmark::kResNet50;
  bool implemented = false;
  std::string variant;          // model variant for the division rules ("resnet50")
  std::string not_implemented;  // why it is refused (when !implemented)
  bool full_scale = false;      // the full-scale data pipeline is wired
  std::string full_scale_missing;
  std::function<ModelInstance(const ModelRequest&)> build;  // empty when !implemented
  // The run's data, input pipelines and quality metric (loaded when called: inside the timed
  // run); empty when !implemented.
  std::function<std::unique_ptr<TaskData>(const DataRequest&)> data;
};

const std::vector<BenchmarkEntry>& benchmarkRegistry();
const BenchmarkEntry& findBenchmarkEntry(Benchmark benchmark);

}  // namespace ipu::harness
