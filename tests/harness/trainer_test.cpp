// The model-agnostic trainer on a fake task that is not an image classifier: three data inputs
// (f32 features, i32 labels, f32 per-row weights, as a masked LM's positions carry weights), a
// weighted-accuracy metric (counted like masked-LM accuracy, not top-1 over rows), a
// samples-counted schedule and evaluation cadence across epochs, replicas x accumulation, and a
// weight EMA that evaluation reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "harness/schedule.h"
#include "harness/trainer.h"
#include "ipu_backend/compiler/autodiff.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"

namespace ipu::harness {
namespace {

constexpr std::int64_t kFeatures = 4, kClasses = 3;

// logits = features x w + bias; loss = mean over rows of weight x cross-entropy.
models::TaskGraph buildFake(std::int64_t b, bool training, const OptimizerOptions& opt = {}) {
  models::TaskGraph t;
  t.graph = Graph(training ? "fake_train" : "fake_eval");
  Builder bl(t.graph);
  const int x = bl.input("features", {b, kFeatures});
  const int labels = bl.input("labels", {b}, DType::I32);
  const int weights = bl.input("weights", {b});
  const int w = bl.variable("w", {kFeatures, kClasses});
  const int bias = bl.variable("bias", {kClasses});
  const int logits = bl.dense(x, w, bias, "logits");
  const int perRow = bl.mul(bl.softmaxCrossEntropy(logits, labels), weights);
  t.loss = bl.reduceMean(perRow, {0}, false, "loss");
  t.graph.markOutput(t.loss);
  t.graph.markOutput(logits);
  t.inputs = {x, labels, weights};
  t.outputs = {{"logits", logits}};
  t.parameters = {w, bias};
  if (training) {
    t.lr = t.graph.addInput("lr", {});
    t.optimizer =
        appendOptimizer(t.graph, appendBackward(t.graph, t.loss, {w, bias}).grads, t.lr, opt);
    t.state = t.optimizer.stateVariables;
  }
  return t;
}

// Sample k of the fake data set: features from a hash, the class a fixed linear rule picks,
// weight 0 on every third sample (not scored, not trained: a masked LM's padding positions).
struct Sample {
  float x[kFeatures];
  std::int32_t label;
  float weight;
};
Sample sample(std::int64_t k) {
  Sample s;
  std::uint64_t h = static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ULL + 12345;
  for (float& v : s.x) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 32;
    v = static_cast<float>((h >> 11) % 2001) / 1000.0f - 1.0f;
  }
  const float score[kClasses] = {s.x[0] + s.x[1], s.x[2] - s.x[0], s.x[3] - s.x[1]};
  s.label = static_cast<std::int32_t>(std::max_element(score, score + kClasses) - score);
  s.weight = k % 3 == 0 ? 0.0f : 1.0f;
  return s;
}

void fillRows(const MicroBatch& in, std::int64_t first) {
  const auto x = in.get<float>("features");
  const auto labels = in.get<std::int32_t>("labels");
  const auto weights = in.get<float>("weights");
  for (std::int64_t r = 0; r < in.rows(); ++r) {
    const Sample s = sample(first + r);
    std::copy(s.x, s.x + kFeatures, x.begin() + r * kFeatures);
    labels[r] = s.label;
    weights[r] = s.weight;
  }
}

// An epoch of `steps` global batches; records every call.
class FakeEpoch : public BatchSource {
 public:
  FakeEpoch(const BatchGeometry& g, int epoch, std::int64_t steps,
            std::vector<std::tuple<int, std::int64_t, std::int64_t>>* log = nullptr)
      : g_(g), epoch_(epoch), steps_(steps), log_(log) {}
  bool beginStep(std::int64_t globalStep) override {
    if (step_ >= steps_) return false;
    if (log_) log_->emplace_back(epoch_, step_, globalStep);
    base_ = (static_cast<std::int64_t>(epoch_) * 1000 + step_++) * g_.globalBatch();
    return true;
  }
  void fill(int replica, int slot, const MicroBatch& in) override {
    fills.emplace_back(replica, slot);
    fillRows(in, base_ + replica * g_.perReplica() + slot * g_.microBatch);
  }
  std::vector<std::pair<int, int>> fills;

 private:
  BatchGeometry g_;
  int epoch_;
  std::int64_t steps_, step_ = 0, base_ = 0;
  std::vector<std::tuple<int, std::int64_t, std::int64_t>>* log_;
};

// The first `n` samples from 900000 on, padded to whole batches (padding not scored).
class FakeEval : public EvalSource {
 public:
  explicit FakeEval(std::int64_t n) : n_(n) {}
  bool next(const MicroBatch& in, std::vector<bool>& scored) override {
    if (i_ >= n_) return false;
    fillRows(in, 900000 + i_);
    for (std::int64_t r = n_ - i_; r < in.rows(); ++r) scored[static_cast<size_t>(r)] = false;
    i_ += in.rows();
    return true;
  }

 private:
  std::int64_t n_, i_ = 0;
};

// Accuracy over weighted positions (masked-LM accuracy's form): sum of weight x hit over the sum
// of weights of the scored rows.
class WeightedAccuracy : public Metric {
 public:
  std::string name() const override { return "weighted_accuracy"; }
  std::vector<std::string> outputs() const override { return {"logits"}; }
  void reset() override { hits_ = total_ = 0; }
  void accumulate(const MicroBatch& in, const MicroBatch& out,
                  const std::vector<bool>& scored) override {
    const auto labels = in.get<const std::int32_t>("labels");
    const auto weights = in.get<const float>("weights");
    const auto logits = out.get<const float>("logits");
    for (size_t r = 0; r < labels.size(); ++r) {
      if (!scored[r]) continue;
      const float* row = logits.data() + r * kClasses;
      hits_ += weights[r] * ((std::max_element(row, row + kClasses) - row) == labels[r]);
      total_ += weights[r];
    }
  }
  MetricValue result() const override { return {hits_, total_}; }

 private:
  double hits_ = 0, total_ = 0;
};

std::map<std::string, std::vector<float>> initFake(const Graph& g) {
  std::map<std::string, std::vector<float>> v;
  for (const Tensor& t : g.tensors())
    if (t.kind == TensorKind::Variable) v[t.name].assign(static_cast<size_t>(t.elements()), 0.0f);
  v["w"] = {0.1f, -0.2f, 0.05f, 0.0f, 0.1f, -0.1f, 0.2f, 0.0f, -0.05f, -0.1f, 0.0f, 0.1f};
  return v;
}

TrainerOptions smallTarget(std::int64_t batch) {
  TrainerOptions o;
  o.batch = batch;
  o.target = Target::small(16, 256 * 1024);
  return o;
}

TEST(Trainer, FeedsNamedInputsOfAnyDtypeAndScoresWithTheTasksMetric) {
  kernels::fused::setNumThreads(1);
  Trainer trainer(buildFake(8, true), buildFake(8, false), smallTarget(8));
  trainer.initialise(initFake(trainer.trainExecutable().graph));
  FakeEpoch epoch(trainer.geometry(), 1, 60);
  std::vector<float> losses;
  const EpochStats st = trainer.train(
      epoch, 0, [](std::int64_t) { return 0.5f; },
      [&](std::int64_t, float l) { losses.push_back(l); });
  ASSERT_EQ(st.steps, 60);
  EXPECT_EQ(st.samples, 480);
  ASSERT_TRUE(st.finite);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "the fake task is learnable";

  // The metric against a plain recomputation from the trained weights.
  WeightedAccuracy metric;
  FakeEval eval(36);  // 4 full batches + 4 rows: the last batch padded
  const EvalResult r = trainer.evaluate(eval, metric);
  EXPECT_EQ(r.rows, 36);
  EXPECT_EQ(trainer.evalRunsDone(), 5);
  const std::vector<float> w = trainer.trainEngine().readFloats("w");
  const std::vector<float> bias = trainer.trainEngine().readFloats("bias");
  double hits = 0, total = 0;
  for (std::int64_t k = 0; k < 36; ++k) {
    const Sample s = sample(900000 + k);
    double logit[kClasses];
    for (std::int64_t c = 0; c < kClasses; ++c) {
      logit[c] = bias[c];
      for (std::int64_t f = 0; f < kFeatures; ++f) logit[c] += s.x[f] * w[f * kClasses + c];
    }
    hits += s.weight * ((std::max_element(logit, logit + kClasses) - logit) == s.label);
    total += s.weight;
  }
  EXPECT_EQ(r.metric.denominator, total) << "weight-0 rows and padding are not scored";
  EXPECT_NEAR(r.metric.numerator, hits, 1.0) << "at most one near-tie may round differently";
  EXPECT_GT(r.metric.value(), 0.8);
}

TEST(Trainer, ReplicasAndAccumulationSplitTheSameGlobalBatch) {
  kernels::fused::setNumThreads(1);
  std::vector<float> weights[2];
  for (int k = 0; k < 2; ++k) {
    const std::int64_t b = k == 0 ? 16 : 4;
    TrainerOptions o = smallTarget(b);
    o.replicas = k == 0 ? 1 : 2;
    o.accumulation = k == 0 ? 1 : 2;
    Trainer trainer(buildFake(b, true), buildFake(b, false), o);
    trainer.initialise(initFake(trainer.trainExecutable().graph));
    EXPECT_EQ(trainer.globalBatch(), k == 0 ? 16 : 8 * 2);
    std::vector<std::tuple<int, std::int64_t, std::int64_t>> log;
    FakeEpoch epoch(trainer.geometry(), 1, 3, &log);
    trainer.train(epoch, 0, [](std::int64_t) { return 0.3f; });
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(std::get<2>(log.back()), 2) << "the trainer's global step";
    if (k == 1) {
      const std::vector<std::pair<int, int>> perStep = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
      ASSERT_EQ(epoch.fills.size(), 12u);
      for (size_t i = 0; i < 12; ++i) EXPECT_EQ(epoch.fills[i], perStep[i % 4]) << i;
    }
    weights[k] = trainer.trainEngine().readFloats("w");
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < weights[0].size(); ++i)
    EXPECT_NEAR(weights[0][i], weights[1][i], 1e-5) << i;
}

TEST(Trainer, SamplesCountedScheduleAndCadenceTrainAcrossEpochs) {
  kernels::fused::setNumThreads(1);
  Trainer trainer(buildFake(8, true), buildFake(8, false), smallTarget(8));
  trainer.initialise(initFake(trainer.trainExecutable().graph));
  const std::int64_t gbs = trainer.globalBatch();
  // BERT-like: 100 samples of warm-up, decay to 0 over 400 samples from step 0; evaluate every
  // 40 samples; a budget of 100 samples; epochs of 3 steps (24 samples).
  LrSchedule lr;
  lr.unit = ProgressUnit::kSamples;
  lr.decay_from_start = true;
  lr.base = 0.4;
  lr.end = 0;
  lr.power = 1;
  lr.warmup = 16;
  lr.decay = 400;
  const StepClock clock{3, gbs};
  const EvalCadence cadence{ProgressUnit::kSamples, 4, 0, 40};
  std::vector<std::tuple<int, std::int64_t, std::int64_t>> log;
  ConcatenatedSource stream(
      [&](int k) { return std::make_unique<FakeEpoch>(trainer.geometry(), k + 1, 3, &log); });
  std::vector<float> rates;
  const auto rate = [&](std::int64_t step) {
    rates.push_back(static_cast<float>(lr.at(step, clock)));
    return rates.back();
  };
  std::vector<std::int64_t> evaluatedAt;
  WeightedAccuracy metric;
  for (const TrainBlock& block : cadence.blocks(100)) {
    const std::int64_t endStep = (block.last() + 1 + gbs - 1) / gbs;  // whole steps
    trainer.train(stream, endStep - trainer.stepsDone(), rate);
    FakeEval eval(16);
    trainer.evaluate(eval, metric);
    evaluatedAt.push_back(trainer.stepsDone() * gbs);
  }
  EXPECT_EQ(evaluatedAt, (std::vector<std::int64_t>{40, 80, 104}));
  ASSERT_EQ(rates.size(), 13u);
  EXPECT_FLOAT_EQ(rates[0], 0.0f);  // warm-up from 0: step 0 of 2
  EXPECT_FLOAT_EQ(rates[1], 0.2f);
  EXPECT_FLOAT_EQ(rates[2], 0.4f * (1.0f - 16.0f / 400.0f));  // decay counted from step 0
  EXPECT_FLOAT_EQ(rates[12], 0.4f * (1.0f - 96.0f / 400.0f));
  // Epoch after epoch, each from its start, the global step running on.
  ASSERT_EQ(log.size(), 13u);
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(std::get<0>(log[i]), static_cast<int>(i / 3) + 1) << i;
    EXPECT_EQ(std::get<1>(log[i]), static_cast<std::int64_t>(i % 3)) << i;
    EXPECT_EQ(std::get<2>(log[i]), static_cast<std::int64_t>(i)) << i;
  }
  EXPECT_EQ(stream.part(), 4);
}

// Trains 3 steps of R replicas x G micro-batches of 2 (threads), pipelined over 2 IPUs or not;
// returns the losses, the model's variables and the evaluation's metric.
struct FakeRun {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> variables;
  MetricValue metric;
};
FakeRun trainFake(int replicas, int accumulation, const TrainerPipeline& pipeline,
                  EngineMode mode) {
  TrainerOptions o = smallTarget(2);
  o.replicas = replicas;
  o.accumulation = accumulation;
  o.mode = mode;
  o.pipeline = pipeline;
  Trainer trainer(buildFake(2, true), buildFake(2, false), o);
  EXPECT_EQ(trainer.pipelinedExecutable() != nullptr, pipeline.pipelined());
  const Graph& g = trainer.pipelinedExecutable() ? trainer.pipelinedExecutable()->graph
                                                 : trainer.trainExecutable().graph;
  trainer.initialise(initFake(g));
  FakeRun run;
  FakeEpoch epoch(trainer.geometry(), 1, 3);
  trainer.train(
      epoch, 0, [](std::int64_t) { return 0.3f; },
      [&](std::int64_t, float l) { run.losses.push_back(l); });
  for (const std::string& name : trainer.modelVariables())
    run.variables[name] = trainer.readVariable(name);
  WeightedAccuracy metric;
  FakeEval eval(12);
  run.metric = trainer.evaluate(eval, metric).metric;
  return run;
}

void expectSameBits(const FakeRun& a, const FakeRun& b) {
  ASSERT_EQ(a.losses.size(), 3u);
  EXPECT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), 3 * sizeof(float)));
  ASSERT_EQ(a.variables.size(), b.variables.size());
  for (const auto& [name, v] : a.variables) {
    const std::vector<float>& w = b.variables.at(name);
    ASSERT_EQ(v.size(), w.size()) << name;
    EXPECT_EQ(0, std::memcmp(v.data(), w.data(), v.size() * sizeof(float))) << name;
  }
  EXPECT_EQ(a.metric.numerator, b.metric.numerator);
  EXPECT_EQ(a.metric.denominator, b.metric.denominator);
}

TEST(Trainer, PipelinedReplicasGiveTheUnpipelinedBitsInFusedAndTileModes) {
  kernels::fused::setNumThreads(1);
  TrainerPipeline twoIpus;
  twoIpus.ipus = 2;
  twoIpus.splits = {"logits"};  // the dense layer on IPU 0, the loss on IPU 1
  for (EngineMode mode : {EngineMode::Fused, EngineMode::Tile}) {
    SCOPED_TRACE(mode == EngineMode::Fused ? "fused" : "tile");
    const FakeRun plain = trainFake(2, 4, {}, mode);
    ASSERT_NE(plain.variables.at("w"), initFake(Graph()).at("w")) << "training moved the weights";
    expectSameBits(trainFake(2, 4, twoIpus, mode), plain);
  }
  // Recomputation from the split's checkpoint on one IPU: the same bits too.
  TrainerPipeline recompute;
  recompute.splits = {"logits"};
  recompute.recompute = true;
  expectSameBits(trainFake(1, 4, recompute, EngineMode::Fused),
                 trainFake(1, 4, {}, EngineMode::Fused));
}

TEST(Trainer, APipelineSplitNamingNoOpIsRefused) {
  TrainerOptions o = smallTarget(2);
  o.accumulation = 4;
  o.pipeline.ipus = 2;
  o.pipeline.splits = {"no_such_layer"};
  EXPECT_THROW(Trainer(buildFake(2, true), buildFake(2, false), o), pipeline::PipelineError);
  o.pipeline.ipus = 1;
  o.pipeline.recompute = true;
  EXPECT_THROW(Trainer(buildFake(2, true), buildFake(2, false), o), pipeline::PipelineError);
}

TEST(Trainer, RmsPropStateStartsAtOneAndEvaluationReadsTheWeightEma) {
  kernels::fused::setNumThreads(1);
  OptimizerOptions opt;
  opt.kind = "rmsprop";
  opt.emaDecay = 0.9;
  const models::TaskGraph train = buildFake(8, true, opt);
  auto values = initFake(train.graph);
  models::applyOptimizerStateInit(train.graph, train.optimizer, values);
  EXPECT_EQ(values.at("w/rms"), std::vector<float>(12, 1.0f)) << "TensorFlow's ms starts at 1";
  EXPECT_EQ(values.at("w/momentum"), std::vector<float>(12, 0.0f));
  EXPECT_EQ(values.at("w/ema"), values.at("w")) << "the average starts at the weight";
  Trainer trainer(train, buildFake(8, false), smallTarget(8));
  trainer.initialise(values);
  FakeEpoch epoch(trainer.geometry(), 1, 5);
  trainer.train(epoch, 0, [](std::int64_t) { return 0.05f; });
  WeightedAccuracy metric;
  FakeEval eval(8);
  trainer.evaluate(eval, metric);
  const std::vector<float> ema = trainer.trainEngine().readFloats("w/ema");
  EXPECT_NE(ema, trainer.trainEngine().readFloats("w")) << "the average lags the weight";
  EXPECT_EQ(trainer.evalEngine().readFloats("w"), ema) << "evaluation reads the average";
}

TEST(Trainer, WarmedUpEmaCountsTheTrainersSteps) {
  kernels::fused::setNumThreads(1);
  OptimizerOptions opt;
  opt.kind = "rmsprop";
  opt.emaDecay = 0.9999;
  opt.emaWarmup = true;
  const models::TaskGraph train = buildFake(8, true, opt);
  auto values = initFake(train.graph);
  models::applyOptimizerStateInit(train.graph, train.optimizer, values);
  EXPECT_EQ(values.at(kOptimizerEmaUpdates), std::vector<float>(1, 0.0f));
  const std::vector<float> w0 = values.at("w");
  Trainer trainer(train, buildFake(8, false), smallTarget(8));
  trainer.initialise(values);
  FakeEpoch epoch(trainer.geometry(), 1, 5);
  trainer.train(epoch, 0, [](std::int64_t) { return 0.05f; });
  EXPECT_EQ(trainer.trainEngine().readFloats(kOptimizerEmaUpdates), std::vector<float>(1, 5.0f));
  // With the warm-up the average has left the initial weights (0.9999 alone: 5e-4 of the way).
  const std::vector<float> ema = trainer.trainEngine().readFloats("w/ema");
  const std::vector<float> w = trainer.trainEngine().readFloats("w");
  double towards = 0, moved = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    towards += std::fabs(ema[i] - w0[i]);
    moved += std::fabs(w[i] - w0[i]);
  }
  EXPECT_GT(towards, 0.3 * moved);
}

TEST(Trainer, AWrongNameOrDtypeIsAClearError) {
  std::vector<std::byte> bytes(32);
  const MicroBatch mb({HostSlot{"labels", DType::I32, {8}, bytes}});
  try {
    (void)mb.get<float>("labels");
    FAIL() << "i32 read as float";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'labels' holds i32"), std::string::npos) << e.what();
  }
  try {
    (void)mb["token_ids"];
    FAIL() << "absent tensor";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("it has: labels"), std::string::npos) << e.what();
  }
  const models::TaskGraph g = buildFake(4, false);
  EXPECT_THROW((void)g.output("mlm_predictions"), std::invalid_argument);
  // The two graphs must agree on their data inputs.
  EXPECT_THROW(Trainer(buildFake(8, true), buildFake(4, false), smallTarget(8)),
               std::invalid_argument);
}

}  // namespace
}  // namespace ipu::harness
