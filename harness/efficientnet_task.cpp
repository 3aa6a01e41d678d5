#include "harness/efficientnet_task.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "harness/image_task.h"

namespace ipu::harness {
namespace {

namespace en = models::efficientnet;

constexpr char kDropoutKey[] = "dropout_key";
constexpr int kFullImageSize = 380;
constexpr int kFullResizeSize = 412;  // 380 + the reference's crop padding 32

bool hasSlot(const MicroBatch& m, std::string_view name) {
  for (const HostSlot& s : m.slots())
    if (s.name == name) return true;
  return false;
}

// An image task's training source plus the dropout key of each micro-batch.
class DropoutKeySource : public BatchSource {
 public:
  DropoutKeySource(std::unique_ptr<BatchSource> inner, const BatchGeometry& g)
      : inner_(std::move(inner)), g_(g) {}
  bool beginStep(std::int64_t globalStep) override {
    step_ = globalStep;
    return inner_->beginStep(globalStep);
  }
  void fill(int replica, int slot, const MicroBatch& inputs) override {
    inner_->fill(replica, slot, inputs);
    if (!hasSlot(inputs, kDropoutKey)) return;  // rates 0: no dropout ops
    const std::span<std::int32_t> key = inputs.get<std::int32_t>(kDropoutKey);
    key[0] = static_cast<std::int32_t>(step_);
    key[1] = static_cast<std::int32_t>(replica * g_.perReplica() + slot * g_.microBatch);
  }
  void endStep() override { inner_->endStep(); }
  std::vector<std::string> corruptFiles() const override { return inner_->corruptFiles(); }

 private:
  std::unique_ptr<BatchSource> inner_;
  BatchGeometry g_;
  std::int64_t step_ = 0;
};

class EfficientNetData : public TaskData {
 public:
  explicit EfficientNetData(std::unique_ptr<TaskData> images) : images_(std::move(images)) {}
  std::int64_t trainSamples() const override { return images_->trainSamples(); }
  std::int64_t evalSamples() const override { return images_->evalSamples(); }
  std::unique_ptr<BatchSource> trainEpoch(int epoch, const BatchGeometry& g) const override {
    return std::make_unique<DropoutKeySource>(images_->trainEpoch(epoch, g), g);
  }
  std::unique_ptr<EvalSource> evaluation(std::int64_t batch,
                                         const std::string& context) const override {
    return images_->evaluation(batch, context);
  }
  std::unique_ptr<Metric> metric() const override { return images_->metric(); }

 private:
  std::unique_ptr<TaskData> images_;
};

std::string stringKey(const Json& hp, const char* key, const char* fallback) {
  const auto it = hp.find(key);
  return it != hp.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

std::string efficientNetUnsupported(const Json& hp) {
  const std::string variant = stringKey(hp, keys::kModelVariant, "b4");
  const std::string norm = stringKey(hp, keys::kNormType, "batch_norm");
  if (variant != "b4" && variant != "g16")
    return fmt::format("model_variant \"{}\": the model builds b4 and g16", variant);
  if (norm != "batch_norm" && norm != "group_norm")
    return fmt::format(
        "norm_type \"{}\": the open rules allow it, but models/efficientnet_b4 builds "
        "batch_norm and group_norm only",
        norm);
  return "";
}

en::Config efficientNetConfig(Scale scale, const Json& hp) {
  if (const std::string why = efficientNetUnsupported(hp); !why.empty())
    throw std::invalid_argument(why);
  en::Config c =
      stringKey(hp, keys::kModelVariant, "b4") == "g16" ? en::Config::b4G16() : en::Config::b4();
  if (stringKey(hp, keys::kNormType, "batch_norm") == "group_norm") c.norm = en::Norm::Group;
  c.dropout = hp.value(keys::kDropoutRate, c.dropout);
  c.stochasticDepth = hp.value(keys::kStochasticDepthRate, c.stochasticDepth);
  c.labelSmoothing = hp.value(keys::kLabelSmoothing, 0.0);
  c.bnMomentum = hp.value(keys::kModelBnMomentum, c.bnMomentum);
  c.classifierInitFanOut = hp.value(keys::kModelClassifierInitFanOut, 0);
  if (scale == Scale::kMini) {  // Fashion-MNIST: 28x28x1, 10 classes; the same architecture
    c.inputH = c.inputW = 28;
    c.inputC = 1;
    c.numClasses = 10;
  } else {
    c.inputH = c.inputW = kFullImageSize;
  }
  return c;
}

ModelInstance buildEfficientNet(const ModelRequest& r) {
  if (r.bn_span_replicas != 1)
    throw std::invalid_argument(fmt::format(
        "EfficientNet: batch norm over {} replicas is not built (model_bn_span must be the "
        "micro-batch {})",
        r.bn_span_replicas, r.micro_batch));
  const en::Config config = efficientNetConfig(r.scale, r.hyperparameters);
  auto train = std::make_shared<en::EfficientNetGraph>(
      en::buildTraining(config, r.micro_batch, r.optimizer, r.precision));
  const en::EfficientNetGraph eval = en::buildInference(config, r.micro_batch, r.precision);
  ModelInstance m;
  m.train = en::taskGraph(*train, r.precision.lossScaling);
  m.eval = en::taskGraph(eval);
  if (train->dropoutKey >= 0) {
    // The trainer feeds both graphs the same data inputs; evaluation ignores the key.
    m.eval.inputs.push_back(m.eval.graph.addInput(kDropoutKey, {2}, DType::I32));
  }
  m.weight_tensor_names = train->paramNames();
  m.init = [train](std::uint64_t seed) {
    auto values = en::initWeights(*train, seed);
    models::applyOptimizerStateInit(train->graph, train->optimizer, values);  // 1s, EMA copy
    return values;
  };
  m.variant = "efficientnet_b4";
  m.description = fmt::format(
      "EfficientNet-B4{} ({}, {} parameters, {}x{}x{}, {} classes), models/efficientnet_b4",
      config.groupSize > 1 ? "-G16" : "",
      config.norm == en::Norm::Group ? "group norm" : "batch norm", train->parameterCount(),
      config.inputH, config.inputW, config.inputC, config.numClasses);
  return m;
}

std::unique_ptr<TaskData> makeEfficientNetData(const DataRequest& request) {
  DataRequest r = request;
  r.image_size = kFullImageSize;
  r.resize_size = kFullResizeSize;
  return std::make_unique<EfficientNetData>(makeImageClassificationData(r));
}

}  // namespace ipu::harness
