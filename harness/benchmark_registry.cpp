#include "harness/benchmark_registry.h"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>

#include "models/resnet50/resnet50.h"

namespace ipu::harness {
namespace {

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// models/resnet50's graph struct -> the trainer's. Parameters stay in canonical order; running
// statistics and momentum buffers are the state the trainer initialises but does not train.
::models::ClassifierGraph toClassifierGraph(const models::ResNetGraph& rg) {
  ::models::ClassifierGraph cg;
  cg.graph = rg.graph;
  cg.images = rg.images;
  cg.labels = rg.labels;
  cg.lr = rg.lr;
  cg.logits = rg.logits;
  cg.loss = rg.loss;
  cg.parameters = rg.params;
  cg.state = rg.runningStats;
  cg.state.insert(cg.state.end(), rg.optimizerState.begin(), rg.optimizerState.end());
  return cg;
}

ModelInstance buildResNet50(const ModelRequest& r) {
  // Full: ResNet-50 v1.5 at 224x224x3, 1000 classes, label smoothing 0.1 (the MLPerf reference
  // and the published submissions). Mini: the same [3,4,6,3] bottleneck architecture with every
  // canonical tensor; only the stem is adapted to 28x28x1 (models/resnet50/resnet50.h says why).
  models::ResNetConfig config = models::ResNetConfig::fashionMnist();
  if (r.scale == Scale::kFull) {
    config = models::ResNetConfig::resnet50();
    config.labelSmoothing = 0.1;
  }
  config.bnSpanReplicas = r.bn_span_replicas;
  SgdOptions sgd = models::resnetSgdOptions(r.momentum, r.weight_decay);
  sgd.larsEta = r.lars_eta;  // on the weights that take weight decay (not BN, not biases)
  sgd.larsEpsilon = r.lars_epsilon;
  auto train = std::make_shared<models::ResNetGraph>(
      models::buildTraining(config, r.micro_batch, sgd, r.precision));
  const models::ResNetGraph eval = models::buildInference(config, r.micro_batch, r.precision);
  ModelInstance m;
  m.train = toClassifierGraph(*train);
  m.train.lossScale = train->lossScale;
  m.train.lossScaleInverse = train->lossScaleInverse;
  m.train.overflow = train->overflow;
  m.train.lossScaling = r.precision.lossScaling;
  m.eval = toClassifierGraph(eval);
  m.weight_tensor_names = train->paramNames();
  m.init = [train](std::uint64_t seed) { return models::initWeights(*train, seed); };
  m.variant = "resnet50";
  m.description =
      fmt::format("ResNet-50 v1.5 ([3,4,6,3] bottlenecks, {} parameters, {}), models/resnet50",
                  train->parameterCount(),
                  r.scale == Scale::kFull ? "224x224x3, 1000 classes" : "28x28x1 stem");
  return m;
}

// TEMPORARY stand-in for resnet50 mini (opt-in): the small CNN of models/small_cnn.
ModelInstance buildSmallCnnStandIn(const ModelRequest& r) {
  if (r.scale != Scale::kMini || r.lars_eta > 0)
    throw std::invalid_argument("the small-CNN stand-in exists for mini-scale SGD runs only");
  ::models::SmallCnnConfig config;
  config.bnSpanReplicas = r.bn_span_replicas;
  SgdOptions sgd;
  sgd.momentum = r.momentum;
  sgd.weightDecay = r.weight_decay;
  sgd.decay = [](const Tensor& t) { return endsWith(t.name, "_weight"); };  // as ResNet's
  ModelInstance m;
  m.train = ::models::buildSmallCnnTraining(config, r.micro_batch, sgd, r.precision);
  m.eval = ::models::buildSmallCnnInference(config, r.micro_batch, r.precision);
  for (int p : m.train.parameters) m.weight_tensor_names.push_back(m.train.graph.tensor(p).name);
  auto graph = std::make_shared<Graph>(m.train.graph);
  m.init = [graph](std::uint64_t seed) { return ::models::initSmallCnn(*graph, seed); };
  m.variant = "resnet50";  // it occupies the resnet50 slot; `stand_in` says it is not ResNet-50
  m.description =
      "TEMPORARY STAND-IN: small CNN (2 conv + BN layers, models/small_cnn), NOT ResNet-50";
  m.stand_in = true;
  return m;
}

ModelInstance buildResNetSlot(const ModelRequest& r) {
  return r.choice == ModelChoice::kSmallCnnStandIn ? buildSmallCnnStandIn(r) : buildResNet50(r);
}

}  // namespace

const std::vector<BenchmarkEntry>& benchmarkRegistry() {
  static const std::vector<BenchmarkEntry> kEntries = {
      {Benchmark::kResNet50, true, "resnet50", "", true, "", buildResNetSlot},
      {Benchmark::kBertLarge,
       false,
       "bert_large",
       "the BERT-Large model (models/bert_large) and its text pipeline are not written yet",
       false,
       "",
       {}},
      {Benchmark::kEfficientNetB4,
       false,
       "efficientnet_b4",
       "the EfficientNet-B4 model (models/efficientnet_b4) is not written yet",
       false,
       "",
       {}},
  };
  return kEntries;
}

const BenchmarkEntry& findBenchmarkEntry(Benchmark benchmark) {
  for (const BenchmarkEntry& e : benchmarkRegistry()) {
    if (e.benchmark == benchmark) return e;
  }
  throw std::logic_error(fmt::format("benchmark {} has no registry entry", toString(benchmark)));
}

}  // namespace ipu::harness
