#include "harness/classifier_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "datasets/pipeline.h"
#include "ipu_backend/replication/replicate.h"

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

TrainerPrograms compileTrainerPrograms(const models::ClassifierGraph& train,
                                       const models::ClassifierGraph& eval,
                                       const TrainerOptions& opts) {
  TrainerPrograms p;
  CompileOptions co;
  co.checkMemory = opts.checkMemory;
  p.eval = std::make_shared<Executable>(compile(eval.graph, opts.target, co));
  if (opts.replicas > 1 || opts.accumulation > 1) {
    // The replicated step: same model graph, cross-replica reduction and accumulation added.
    // Each replica's graph sees its own micro-batch (batch norm statistics per replica).
    const replication::ReplicatedGraph rg = replication::replicate(
        train.graph, {opts.replicas, opts.accumulation, opts.shardOptimizerState});
    rg.configure(co, opts.accumulation);
    p.train = std::make_shared<Executable>(compile(rg.graph, opts.target, co));
    p.zeroInitialised = rg.zeroInitialised;
  } else {
    p.train = std::make_shared<Executable>(compile(train.graph, opts.target, co));
  }
  return p;
}

ClassifierTrainer::ClassifierTrainer(models::ClassifierGraph train, models::ClassifierGraph eval,
                                     const TrainerOptions& opts)
    : train_(std::move(train)), eval_(std::move(eval)), opts_(opts), scaler_(train_.lossScaling) {
  TrainerPrograms programs = compileTrainerPrograms(train_, eval_, opts);
  evalExe_ = std::move(programs.eval);
  trainExe_ = std::move(programs.train);
  zeroInitialised_ = std::move(programs.zeroInitialised);
  evalEngine_ = std::make_unique<Engine>(evalExe_, opts.mode);
  const Shape& img = eval_.graph.tensor(eval_.images).shape;
  images_.resize(static_cast<size_t>(numElements(img)));
  labels_.resize(static_cast<size_t>(img[0]));
  logits_.resize(static_cast<size_t>(eval_.graph.tensor(eval_.logits).elements()));
  if (opts.replicas > 1 || opts.accumulation > 1) {
    setUpReplicas();
  } else {
    trainEngine_ = std::make_unique<Engine>(trainExe_, opts.mode);
    trainEngine_->connectInput(train_.images, images_.data());
    trainEngine_->connectInput(train_.labels, labels_.data());
    trainEngine_->connectOutput(train_.loss, &loss_);
    trainEngine_->connectOutput(train_.logits, logits_.data());
    trainEngine_->connectInput(train_.lr, &lr_);
    if (train_.lossScale >= 0) {
      trainEngine_->connectInput(train_.lossScale, &scale_);
      trainEngine_->connectInput(train_.lossScaleInverse, &inverseScale_);
      trainEngine_->connectOutput(train_.overflow, &overflow_);
    }
    trainEngine_->setRoundingSeed(opts.seed);
  }
  evalEngine_->connectInput(eval_.images, images_.data());
  evalEngine_->connectInput(eval_.labels, labels_.data());
  evalEngine_->connectOutput(eval_.loss, &loss_);
  evalEngine_->connectOutput(eval_.logits, logits_.data());
}

void ClassifierTrainer::setUpReplicas() {
  replication::ReplicaGroupOptions go;
  go.mode = opts_.mode;
  go.replicas = opts_.replicas;
  go.link = opts_.link;
  go.threadsPerReplica = opts_.threadsPerReplica;
  group_ = std::make_unique<replication::ReplicaGroup>(trainExe_, go);
  const Graph& g = trainExe_->graph;
  const int local = group_->localReplicas();
  const std::int64_t micro = opts_.accumulation;
  const Shape& img = g.tensor(g.get(train_.graph.tensor(train_.images).name)).shape;
  replicaImages_.assign(local, std::vector<float>(static_cast<size_t>(numElements(img) * micro)));
  replicaLabels_.assign(local, std::vector<std::int32_t>(static_cast<size_t>(img[0] * micro)));
  replicaLosses_.assign(local, std::vector<float>(static_cast<size_t>(micro)));
  replicaLr_.assign(static_cast<size_t>(micro), 0.0f);
  replicaScale_.assign(static_cast<size_t>(micro), 1.0f);
  replicaInverseScale_.assign(static_cast<size_t>(micro), 1.0f);
  replicaOverflow_.assign(local, std::vector<float>(static_cast<size_t>(micro), 0.0f));
  for (int l = 0; l < local; ++l) {
    Engine& e = group_->engine(l);
    e.connectInput(g.get(train_.graph.tensor(train_.images).name), replicaImages_[l].data());
    e.connectInput(g.get(train_.graph.tensor(train_.labels).name), replicaLabels_[l].data());
    e.connectInput(g.get(train_.graph.tensor(train_.lr).name), replicaLr_.data());
    e.connectOutput(g.get(train_.graph.tensor(train_.loss).name), replicaLosses_[l].data());
    // The same seed on every replica: stochastic rounding of the update then draws the same
    // bits, so the 16-bit weights of all replicas stay identical.
    e.setRoundingSeed(opts_.seed);
    if (train_.lossScale >= 0) {
      // The flag is the graph's (from the reduced gradients): the same on every replica.
      e.connectInput(g.get(train_.graph.tensor(train_.lossScale).name), replicaScale_.data());
      e.connectInput(g.get(train_.graph.tensor(train_.lossScaleInverse).name),
                     replicaInverseScale_.data());
      e.connectOutput(g.get(train_.graph.tensor(train_.overflow).name), replicaOverflow_[l].data());
    }
  }
}

void ClassifierTrainer::initialise(const std::map<std::string, std::vector<float>>& values) {
  const Graph& g = trainExe_->graph;
  for (const Tensor& t : g.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    auto it = values.find(t.name);
    std::vector<float> zeros;
    const bool startsAtZero = std::find(zeroInitialised_.begin(), zeroInitialised_.end(), t.name) !=
                              zeroInitialised_.end();
    if (it == values.end() && !startsAtZero)
      throw std::invalid_argument(
          fmt::format("no initial value for variable '{}' {}", t.name, shapeStr(t.shape)));
    const std::vector<float>* v = it == values.end() ? nullptr : &it->second;
    if (!v || static_cast<std::int64_t>(v->size()) != t.elements()) {
      // A sharded momentum holds 1/R of the model's: it starts at zero like the whole one.
      const bool zero = !v || std::all_of(v->begin(), v->end(), [](float x) { return x == 0; });
      if (!zero)
        throw std::invalid_argument(
            fmt::format("initial value of '{}' has {} elements, the training graph's {} has {}",
                        t.name, v->size(), shapeStr(t.shape), t.elements()));
      zeros.assign(static_cast<size_t>(t.elements()), 0.0f);
      v = &zeros;
    }
    if (group_)
      for (int l = 0; l < group_->localReplicas(); ++l) group_->engine(l).writeTensor(t.name, *v);
    else
      trainEngine_->writeTensor(t.name, *v);  // rounded to 16-bit variables' dtype
  }
}

float ClassifierTrainer::step(const std::function<float(std::int64_t)>& lr, EpochStats& st) {
  if (group_) {
    std::fill(replicaLr_.begin(), replicaLr_.end(), lr(steps_));
    std::fill(replicaScale_.begin(), replicaScale_.end(), scaler_.scale());
    std::fill(replicaInverseScale_.begin(), replicaInverseScale_.end(), scaler_.inverseScale());
    group_->run();
    // The update part streams the flag out once per step, after the last micro-batch.
    if (train_.overflow >= 0 && !scaler_.update(replicaOverflow_[0].back() != 0.0f))
      ++st.skippedSteps;
    double loss = 0;
    for (const auto& ls : replicaLosses_)
      for (float x : ls) loss += x;
    loss_ = static_cast<float>(loss /
                               static_cast<double>(group_->localReplicas() * opts_.accumulation));
  } else {
    lr_ = lr(steps_);
    scale_ = scaler_.scale();
    inverseScale_ = scaler_.inverseScale();
    trainEngine_->run();
    // The overflow flag is 0, or NaN when some gradient was not finite (the step was skipped).
    if (train_.overflow >= 0 && !scaler_.update(overflow_ != 0.0f)) ++st.skippedSteps;
  }
  ++steps_;
  if (!std::isfinite(loss_)) st.finite = false;
  return loss_;
}

EpochStats ClassifierTrainer::trainEpoch(const datasets::ImageDataset& ds,
                                         const datasets::Normalization& norm, int epoch,
                                         const std::function<float(std::int64_t)>& lr,
                                         std::int64_t maxSamples,
                                         const std::function<void(std::int64_t, float)>& onStep) {
  const std::int64_t global = globalBatch(), perReplica = opts_.batch * opts_.accumulation;
  std::vector<std::int64_t> order(static_cast<size_t>(ds.count));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opts_.seed * 1000003ULL + static_cast<std::uint64_t>(epoch));
  std::shuffle(order.begin(), order.end(), rng);
  const std::int64_t n = maxSamples > 0 ? std::min(maxSamples, ds.count) : ds.count;
  datasets::NormalizationLut lut(norm, ds.channels);
  datasets::SmallImageAugment aug = opts_.augment;
  aug.seed = opts_.seed;
  aug.epoch = static_cast<std::uint64_t>(epoch);
  EpochStats st;
  const auto t0 = std::chrono::steady_clock::now();
  double lossSum = 0;
  std::int64_t steps = 0;
  for (std::int64_t i = 0; i + global <= n; i += global) {
    if (group_) {
      // Replica r trains samples [i + r A b, i + (r + 1) A b) of the step, micro-batch after
      // micro-batch: the same global batch whatever R and A split it.
      const int first = group_->firstReplica();
      for (int l = 0; l < group_->localReplicas(); ++l)
        datasets::fillBatch(
            ds,
            std::span<const std::int64_t>(order.data() + i + (first + l) * perReplica,
                                          static_cast<size_t>(perReplica)),
            lut, aug, replicaImages_[l], replicaLabels_[l]);
    } else {
      datasets::fillBatch(
          ds, std::span<const std::int64_t>(order.data() + i, static_cast<size_t>(global)), lut,
          aug, images_, labels_);
    }
    lossSum += step(lr, st);
    ++steps;
    if (onStep) onStep(steps_, loss_);
  }
  st.samples = steps * global;
  st.lossScale = scaler_.scale();
  st.meanLoss = steps ? lossSum / static_cast<double>(steps) : 0.0;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

EpochStats ClassifierTrainer::trainEpoch(std::shared_ptr<const datasets::Source> source, int epoch,
                                         const std::function<float(std::int64_t)>& lr,
                                         std::int64_t maxSamples,
                                         const std::function<void(std::int64_t, float)>& onStep,
                                         int loaderThreads, datasets::CorruptPolicy corruptPolicy) {
  const std::int64_t global = globalBatch(), perReplica = opts_.batch * opts_.accumulation;
  const int local = group_ ? group_->localReplicas() : 1;
  const int first = group_ ? group_->firstReplica() : 0;
  datasets::PipelineOptions po =
      datasets::PipelineOptions::train(static_cast<int>(global), opts_.seed, loaderThreads);
  po.sliceBegin = static_cast<int>(first * perReplica);
  po.sliceSize = static_cast<int>(local * perReplica);
  po.corruptPolicy = corruptPolicy;
  datasets::Pipeline pipeline(std::move(source), po, static_cast<std::uint64_t>(epoch));
  const std::int64_t stepsWanted =
      maxSamples > 0 ? std::min<std::int64_t>(maxSamples / global, pipeline.numBatches())
                     : pipeline.numBatches();
  EpochStats st;
  const auto t0 = std::chrono::steady_clock::now();
  double lossSum = 0;
  std::int64_t steps = 0;
  for (; steps < stepsWanted; ++steps) {
    datasets::BatchPtr b = pipeline.next();
    if (!b) break;
    // One copy into the engines' input buffers (the batch returns to the pipeline at once).
    const size_t elems = b->shape.elems();
    for (int l = 0; l < local; ++l) {
      float* images = group_ ? replicaImages_[l].data() : images_.data();
      std::int32_t* labels = group_ ? replicaLabels_[l].data() : labels_.data();
      const size_t off = static_cast<size_t>(l * perReplica);
      std::copy_n(b->images.data() + off * elems, static_cast<size_t>(perReplica) * elems, images);
      std::copy_n(b->labels.data() + off, static_cast<size_t>(perReplica), labels);
    }
    b.reset();
    lossSum += step(lr, st);
    if (onStep) onStep(steps_, loss_);
  }
  st.corruptFiles = pipeline.corruptFiles();
  st.samples = steps * global;
  st.lossScale = scaler_.scale();
  st.meanLoss = steps ? lossSum / static_cast<double>(steps) : 0.0;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void ClassifierTrainer::syncWeightsToEval() {
  copyVariables(trainEngine(), *evalEngine_);
}

double ClassifierTrainer::evaluate(const datasets::ImageDataset& ds,
                                   const datasets::Normalization& norm, std::int64_t maxSamples) {
  syncWeightsToEval();
  const std::int64_t b = static_cast<std::int64_t>(labels_.size());
  std::int64_t n = maxSamples > 0 ? std::min(maxSamples, ds.count) : ds.count;
  datasets::NormalizationLut lut(norm, ds.channels);
  std::vector<std::int64_t> idx(static_cast<size_t>(b));
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; i += b) {
    std::int64_t valid = std::min(b, n - i);
    for (std::int64_t k = 0; k < b; ++k) idx[k] = i + std::min(k, valid - 1);  // pad by repeating
    datasets::fillBatch(ds, idx, lut, images_, labels_);
    evalEngine_->run();
    ++evalRuns_;
    correct += countCorrect(std::span<const std::int32_t>(labels_).first(valid));
  }
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

std::int64_t ClassifierTrainer::countCorrect(std::span<const std::int32_t> labels) const {
  const std::int64_t b = static_cast<std::int64_t>(labels_.size());
  const std::int64_t classes = static_cast<std::int64_t>(logits_.size()) / b;
  std::int64_t correct = 0;
  for (std::size_t k = 0; k < labels.size(); ++k) {
    if (labels[k] < 0) continue;
    const float* row = logits_.data() + static_cast<std::int64_t>(k) * classes;
    const std::int64_t arg = std::max_element(row, row + classes) - row;
    correct += arg == labels[k];
  }
  return correct;
}

ClassifierTrainer::Accuracy ClassifierTrainer::evaluate(
    std::shared_ptr<const datasets::Source> source, std::int64_t maxSamples, int loaderThreads,
    const std::function<void()>& onBatch, datasets::CorruptPolicy corruptPolicy,
    const std::string& context) {
  syncWeightsToEval();
  const int b = static_cast<int>(labels_.size());
  datasets::PipelineOptions po = datasets::PipelineOptions::eval(b, loaderThreads);
  po.corruptPolicy = corruptPolicy;
  po.context = context;
  datasets::Pipeline pipeline(source, po, 0);
  Accuracy acc;
  std::vector<std::int32_t> scored(static_cast<size_t>(b));  // -1: not scored
  std::int64_t positions = 0;
  while (datasets::BatchPtr batch = pipeline.next()) {
    const std::int64_t valid =
        maxSamples > 0 ? std::min<std::int64_t>(batch->validCount, maxSamples - positions)
                       : batch->validCount;
    if (valid <= 0) break;
    std::copy(batch->images.begin(), batch->images.end(), images_.begin());
    // Pad slots and skipped images are labelled -1 by the pipeline: the graph gets a valid class
    // for them, the count leaves them out.
    for (int k = 0; k < b; ++k) {
      scored[k] = k < valid ? batch->labels[k] : -1;
      labels_[k] = std::max(scored[k], 0);
      if (k < valid && batch->labels[k] < 0) {
        ++acc.skipped;
        acc.skippedFiles.push_back(
            source->describe(pipeline.order()[batch->index * b + k]));  // slot k: position
      }
    }
    positions += valid;
    batch.reset();
    evalEngine_->run();
    ++evalRuns_;
    acc.correct += countCorrect(scored);
    if (onBatch) onBatch();
  }
  acc.samples = positions - acc.skipped;
  return acc;
}

}  // namespace ipu::harness
