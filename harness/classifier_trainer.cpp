#include "harness/classifier_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

namespace ipu::harness {

void copyVariables(const Engine& src, Engine& dst) {
  const Graph& sg = src.executable().graph;
  for (const Tensor& t : dst.executable().graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    int s = sg.find(t.name);
    if (s < 0) continue;  // e.g. optimizer state only exists in the training graph
    if (sg.tensor(s).dtype != t.dtype) {
      dst.writeTensor(t.name, src.readFloats(s));
      continue;
    }
    std::vector<std::byte> buf(static_cast<size_t>(t.bytes()));
    src.readTensor(s, buf.data(), buf.size());
    dst.writeTensor(t.id, buf.data(), buf.size());
  }
}

ClassifierTrainer::ClassifierTrainer(models::ClassifierGraph train, models::ClassifierGraph eval,
                                     const TrainerOptions& opts)
    : train_(std::move(train)), eval_(std::move(eval)), opts_(opts), scaler_(train_.lossScaling) {
  CompileOptions co;
  co.checkMemory = opts.checkMemory;
  trainExe_ = std::make_shared<Executable>(compile(train_.graph, opts.target, co));
  evalExe_ = std::make_shared<Executable>(compile(eval_.graph, opts.target, co));
  trainEngine_ = std::make_unique<Engine>(trainExe_, opts.mode);
  evalEngine_ = std::make_unique<Engine>(evalExe_, opts.mode);
  const Shape& img = train_.graph.tensor(train_.images).shape;
  images_.resize(static_cast<size_t>(numElements(img)));
  labels_.resize(static_cast<size_t>(img[0]));
  logits_.resize(static_cast<size_t>(train_.graph.tensor(train_.logits).elements()));
  for (auto [engine, cg] : {std::pair{trainEngine_.get(), &train_}, {evalEngine_.get(), &eval_}}) {
    engine->connectInput(cg->images, images_.data());
    engine->connectInput(cg->labels, labels_.data());
    engine->connectOutput(cg->loss, &loss_);
    engine->connectOutput(cg->logits, logits_.data());
  }
  trainEngine_->connectInput(train_.lr, &lr_);
  if (train_.lossScale >= 0) {
    trainEngine_->connectInput(train_.lossScale, &scale_);
    trainEngine_->connectInput(train_.lossScaleInverse, &inverseScale_);
    trainEngine_->connectOutput(train_.overflow, &overflow_);
  }
  trainEngine_->setRoundingSeed(opts.seed);
}

void ClassifierTrainer::initialise(const std::map<std::string, std::vector<float>>& values) {
  for (const Tensor& t : train_.graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    auto it = values.find(t.name);
    if (it == values.end())
      throw std::invalid_argument(fmt::format("no initial value for variable '{}' {}", t.name,
                                              shapeStr(t.shape)));
    trainEngine_->writeTensor(t.name, it->second);  // rounded to 16-bit variables' dtype
  }
}

EpochStats ClassifierTrainer::trainEpoch(const datasets::ImageDataset& ds,
                                         const datasets::Normalization& norm, int epoch,
                                         const std::function<float(std::int64_t)>& lr,
                                         std::int64_t maxSamples,
                                         const std::function<void(std::int64_t, float)>& onStep) {
  const std::int64_t b = static_cast<std::int64_t>(labels_.size());
  std::vector<std::int64_t> order(static_cast<size_t>(ds.count));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opts_.seed * 1000003ULL + static_cast<std::uint64_t>(epoch));
  std::shuffle(order.begin(), order.end(), rng);
  std::int64_t n = maxSamples > 0 ? std::min(maxSamples, ds.count) : ds.count;
  datasets::NormalizationLut lut(norm, ds.channels);
  EpochStats st;
  auto t0 = std::chrono::steady_clock::now();
  double lossSum = 0;
  std::int64_t steps = 0;
  for (std::int64_t i = 0; i + b <= n; i += b) {
    datasets::fillBatch(ds, std::span<const std::int64_t>(order.data() + i, static_cast<size_t>(b)),
                        lut, images_, labels_);
    lr_ = lr(steps_);
    scale_ = scaler_.scale();
    inverseScale_ = scaler_.inverseScale();
    trainEngine_->run();
    // The overflow flag is 0, or NaN when some gradient was not finite (the step was skipped).
    if (train_.overflow >= 0 && !scaler_.update(overflow_ != 0.0f)) ++st.skippedSteps;
    ++steps_;
    ++steps;
    if (!std::isfinite(loss_)) st.finite = false;
    lossSum += loss_;
    if (onStep) onStep(steps_, loss_);
  }
  st.samples = steps * b;
  st.lossScale = scaler_.scale();
  st.meanLoss = steps ? lossSum / static_cast<double>(steps) : 0.0;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void ClassifierTrainer::syncWeightsToEval() { copyVariables(*trainEngine_, *evalEngine_); }

double ClassifierTrainer::evaluate(const datasets::ImageDataset& ds,
                                   const datasets::Normalization& norm, std::int64_t maxSamples) {
  syncWeightsToEval();
  const std::int64_t b = static_cast<std::int64_t>(labels_.size());
  const std::int64_t classes = static_cast<std::int64_t>(logits_.size()) / b;
  std::int64_t n = maxSamples > 0 ? std::min(maxSamples, ds.count) : ds.count;
  datasets::NormalizationLut lut(norm, ds.channels);
  std::vector<std::int64_t> idx(static_cast<size_t>(b));
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; i += b) {
    std::int64_t valid = std::min(b, n - i);
    for (std::int64_t k = 0; k < b; ++k) idx[k] = i + std::min(k, valid - 1);  // pad by repeating
    datasets::fillBatch(ds, idx, lut, images_, labels_);
    evalEngine_->run();
    for (std::int64_t k = 0; k < valid; ++k) {
      const float* row = logits_.data() + k * classes;
      std::int64_t arg = std::max_element(row, row + classes) - row;
      correct += arg == labels_[k];
    }
  }
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

}  // namespace ipu::harness
