#include "harness/benchmark_registry.h"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>

#include "harness/bert_task.h"
#include "harness/efficientnet_task.h"
#include "harness/image_task.h"
#include "models/resnet50/resnet50.h"

namespace ipu::harness {
namespace {

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
  OptimizerOptions opt = r.optimizer;
  // Weight decay (and LARS's trust ratio) on conv and fc weights only, as the reference.
  opt.decay = models::resnetSgdOptions().decay;
  auto train = std::make_shared<models::ResNetGraph>(
      models::buildTraining(config, r.micro_batch, opt, r.precision));
  const models::ResNetGraph eval = models::buildInference(config, r.micro_batch, r.precision);
  ModelInstance m;
  m.train = models::taskGraph(*train, r.precision.lossScaling);
  m.eval = models::taskGraph(eval);
  m.weight_tensor_names = train->paramNames();
  m.init = [train](std::uint64_t seed) {
    auto values = models::initWeights(*train, seed);
    models::applyOptimizerStateInit(train->graph, train->optimizer, values);  // RMSProp's 1s
    return values;
  };
  m.variant = "resnet50";
  m.description =
      fmt::format("ResNet-50 v1.5 ([3,4,6,3] bottlenecks, {} parameters, {}), models/resnet50",
                  train->parameterCount(),
                  r.scale == Scale::kFull ? "224x224x3, 1000 classes" : "28x28x1 stem");
  return m;
}

}  // namespace

const std::vector<BenchmarkEntry>& benchmarkRegistry() {
  static const std::vector<BenchmarkEntry> kEntries = {
      {Benchmark::kResNet50, true, "resnet50", "", true, "", buildResNet50,
       makeImageClassificationData},
      {Benchmark::kBertLarge, true, "bert_large", "", false,
       "BERT-Large at sequence 512 runs pipelined over 4 or 8 IPUs per replica (Graphcore's "
       "placement, in the presets); pipelined execution (--ipus-per-replica) runs at mini scale, "
       "the full-size model's run is not wired to it yet",
       buildBert, makeBertData},
      {Benchmark::kEfficientNetB4, true, "efficientnet_b4", "", false,
       "EfficientNet-B4's published configurations are 4-IPU pipelines; pipelined execution "
       "(--ipus-per-replica) runs at mini scale, the full-size run is not wired to it yet",
       buildEfficientNet, makeEfficientNetData},
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
