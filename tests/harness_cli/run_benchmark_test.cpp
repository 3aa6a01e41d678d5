// Unit tests of run_benchmark's pieces: the benchmark registry (and its adapter from
// models/resnet50 to the trainer's graph struct), the evaluation schedule, the LR schedule and
// the request checks. The binary itself is tested by test_run_benchmark.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "datasets/fashion_mnist.h"
#include "harness/benchmark_registry.h"
#include "harness/mlperf_events.h"
#include "harness/run_benchmark_plan.h"
#include "harness/run_loop.h"
#include "models/efficientnet_b4/efficientnet.h"

namespace ipu::harness {
namespace {

TEST(RunBenchmarkRegistry, EveryBenchmarkHasAnEntry) {
  for (Benchmark b : allBenchmarks()) {
    const BenchmarkEntry& e = findBenchmarkEntry(b);
    EXPECT_EQ(e.variant, referenceModelVariant(b));
    if (e.implemented) {
      EXPECT_TRUE(e.build) << toString(b);
    } else {
      EXPECT_NE(e.not_implemented.find("not written yet"), std::string::npos) << toString(b);
    }
  }
  EXPECT_TRUE(findBenchmarkEntry(Benchmark::kResNet50).implemented);
  EXPECT_TRUE(findBenchmarkEntry(Benchmark::kBertLarge).implemented);
  EXPECT_FALSE(findBenchmarkEntry(Benchmark::kBertLarge).full_scale);  // pipelining
  EXPECT_TRUE(findBenchmarkEntry(Benchmark::kEfficientNetB4).implemented);
}

TEST(RunBenchmarkRegistry, EfficientNetMiniIsB4WithTorchvisionNamesAndEmaForEvaluation) {
  ModelRequest r;
  r.micro_batch = 2;
  r.optimizer.kind = "rmsprop";
  r.optimizer.emaDecay = 0.9999;
  r.hyperparameters =
      mlperfHyperparameters(findPreset(Benchmark::kEfficientNetB4, 1, Scale::kMini));
  // The mini recipe's classifier starts at the 1000-class head's range.
  const auto miniInit = findBenchmarkEntry(Benchmark::kEfficientNetB4).build(r).init(7);
  float head = 0;
  for (float x : miniInit.at("classifier.1.weight")) head = std::max(head, std::abs(x));
  EXPECT_LE(head, 1 / std::sqrt(1000.0f));
  // The full recipe's dropout and stochastic depth (the mini recipe has none).
  r.hyperparameters["dropout_rate"] = 0.4;
  r.hyperparameters["stochastic_depth_rate"] = 0.2;
  const ModelInstance m = findBenchmarkEntry(Benchmark::kEfficientNetB4).build(r);
  EXPECT_EQ(m.weight_tensor_names.size(), 418u);  // B4's, as the closed ruleset lists them
  EXPECT_EQ(m.train.graph.tensor(m.train.input("images")).shape, (Shape{2, 28, 28, 1}));
  // Dropout and stochastic depth: a key per micro-batch, fed to both graphs.
  EXPECT_EQ(m.eval.graph.tensor(m.eval.input("dropout_key")).shape, (Shape{2}));
  const auto values = m.init(7);
  // RMSProp's mean square starts at 1, the EMA at the weight; norm scales 1, shifts 0.
  const std::string w = "features.0.0.weight";
  EXPECT_EQ(values.at(w + "/ema"), values.at(w));
  EXPECT_EQ(values.at(w + "/rms"), std::vector<float>(values.at(w).size(), 1.0f));
  EXPECT_EQ(values.at(w + "/momentum"), std::vector<float>(values.at(w).size(), 0.0f));
  EXPECT_EQ(values.at("features.0.1.weight"), std::vector<float>(48, 1.0f));  // stem 48
  // Weight decay skips exactly the norm layers' parameters.
  const Graph& g = m.train.graph;
  EXPECT_TRUE(models::efficientnet::isNormParameter(g.tensor(g.get("features.0.1.bias"))));
  EXPECT_FALSE(models::efficientnet::isNormParameter(g.tensor(g.get("classifier.1.bias"))));
  EXPECT_FALSE(
      models::efficientnet::isNormParameter(g.tensor(g.get("features.1.0.block.1.fc1.bias"))));
  // G16 with group norm: the open variant, no running statistics.
  r.hyperparameters["model_variant"] = "g16";
  r.hyperparameters["norm_type"] = "group_norm";
  const ModelInstance g16 = findBenchmarkEntry(Benchmark::kEfficientNetB4).build(r);
  EXPECT_NE(g16.description.find("G16 (group norm"), std::string::npos) << g16.description;
  r.hyperparameters["norm_type"] = "layer_norm_proxy_norm";
  EXPECT_THROW(findBenchmarkEntry(Benchmark::kEfficientNetB4).build(r), std::invalid_argument);
}

// The BERT mini model is the reference code with all 24 layers: the log names the 398 tensors of
// closed_bert.yaml, and the initial values cover every variable (weights, LAMB's m and v).
TEST(RunBenchmarkRegistry, BertMiniLogsThe398TensorsAndInitialisesEveryVariable) {
  ModelRequest r;
  r.micro_batch = 2;
  r.optimizer =
      optimizerOf(mlperfHyperparameters(findPreset(Benchmark::kBertLarge, 1, Scale::kMini)));
  r.text = {128, 20, 3, 512};
  const ModelInstance m = findBenchmarkEntry(Benchmark::kBertLarge).build(r);
  EXPECT_EQ(m.weight_tensor_names, bertLargeCanonicalTensorNames());
  EXPECT_EQ(m.eval.graph.tensor(m.eval.output("mlm_correct")).shape, (Shape{2 * 20}));
  EXPECT_EQ(m.train.graph.tensor(m.train.input("cls_rows")).shape, (Shape{2 * 3}));
  const auto init = m.init(7);
  for (const Tensor& t : m.train.graph.tensors()) {
    if (t.kind == TensorKind::Variable) {
      EXPECT_TRUE(init.count(t.name)) << t.name;
    }
  }
}

TEST(RunBenchmarkRegistry, RealResNet50LogsTheCanonicalTensorsAndInitialisesEveryVariable) {
  ModelRequest r;
  r.micro_batch = 2;
  const ModelInstance m = findBenchmarkEntry(Benchmark::kResNet50).build(r);
  EXPECT_EQ(m.variant, "resnet50");
  EXPECT_EQ(m.weight_tensor_names, resnet50CanonicalTensorNames());  // the 1.1.0 ruleset's 161
  for (const models::TaskGraph* g : {&m.train, &m.eval}) {
    ASSERT_EQ(g->inputs.size(), 2u);
    EXPECT_EQ(g->graph.tensor(g->input("images")).shape, (Shape{2, 28, 28, 1}));
    EXPECT_EQ(g->graph.tensor(g->input("labels")).dtype, DType::I32);
    EXPECT_EQ(g->graph.tensor(g->output("logits")).shape, (Shape{2, 10}));
    EXPECT_GE(g->loss, 0);
    EXPECT_THROW(g->input("token_ids"), std::invalid_argument);
  }
  EXPECT_EQ(m.train.optimizer.stateVariables.size(), 161u) << "one momentum per parameter";
  EXPECT_GE(m.train.lr, 0);
  EXPECT_EQ(m.train.parameters.size(), 161u);
  const auto init = m.init(7);
  for (const Tensor& t : m.train.graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    ASSERT_TRUE(init.count(t.name)) << t.name;
    EXPECT_EQ(static_cast<std::int64_t>(init.at(t.name).size()), t.elements()) << t.name;
  }
}

TEST(RunBenchmarkEvalBlocks, ResNetScheduleAndOpenPeriods) {
  auto firsts = [](const std::vector<EpochBlock>& v) {
    std::vector<std::pair<int, int>> out;
    for (const EpochBlock& b : v) out.emplace_back(b.first_epoch, b.last_epoch());
    return out;
  };
  using P = std::vector<std::pair<int, int>>;
  EXPECT_EQ(firsts(evalBlocks(3, 4, 1)), (P{{1, 1}, {2, 3}}));
  EXPECT_EQ(firsts(evalBlocks(8, 4, 0)), (P{{1, 4}, {5, 8}}));
  EXPECT_EQ(firsts(evalBlocks(5, 2, 0)), (P{{1, 2}, {3, 4}, {5, 5}}));
  EXPECT_EQ(firsts(evalBlocks(3, 1, 0)), (P{{1, 1}, {2, 2}, {3, 3}}));
}

TEST(RunBenchmarkLrSchedule, WarmupThenPolynomialDecayToTheEndRate) {
  LrSchedule s{0.1, 0.0001, 2, 1, 5};    // epochs
  const StepClock c{10, 64};             // 10 steps an epoch
  EXPECT_NEAR(s.at(0, c), 0.01, 1e-12);  // warmup: (0 + 1) / 10 of the base
  EXPECT_NEAR(s.at(9, c), 0.1, 1e-12);   // end of warmup
  EXPECT_NEAR(s.at(10, c), 0.1, 1e-12);  // decay starts at the base
  EXPECT_NEAR(s.at(30, c), (0.1 - 0.0001) * 0.25 + 0.0001, 1e-12);  // halfway, power 2
  EXPECT_NEAR(s.at(50, c), 0.0001, 1e-12);
  EXPECT_NEAR(s.at(500, c), 0.0001, 1e-12);  // past the decay: the end rate
}

// BERT's LAMB schedule: warm-up and decay in samples, decay counted from step 0 to 0.
TEST(RunBenchmarkLrSchedule, SamplesCountedBertFormAndExponentialDecay) {
  LrSchedule s;
  s.unit = ProgressUnit::kSamples;
  s.decay_from_start = true;
  s.base = 0.004;
  s.end = 0;
  s.power = 1;
  s.warmup = 1000;            // samples: 10 steps of 100
  s.decay = 10000;            // 100 steps
  const StepClock c{7, 100};  // steps per epoch play no part in samples
  EXPECT_NEAR(s.at(0, c), 0.0, 1e-15);
  EXPECT_NEAR(s.at(5, c), 0.002, 1e-15);
  EXPECT_NEAR(s.at(10, c), 0.004 * 0.9, 1e-15);  // decay from step 0: 10 of 100 gone
  EXPECT_NEAR(s.at(50, c), 0.002, 1e-15);
  EXPECT_NEAR(s.at(100, c), 0.0, 1e-15);
  LrSchedule e;  // EfficientNet's: x0.97 every 2.4 epochs after a 5-epoch warm-up
  e.base = 0.048;
  e.warmup = 5;
  e.decay_factor = 0.97;
  e.decay_every = 2.4;
  const StepClock ce{10, 64};
  EXPECT_NEAR(e.at(49, ce), 0.048, 1e-15);
  EXPECT_NEAR(e.at(50, ce), 0.048, 1e-15);
  EXPECT_NEAR(e.at(73, ce), 0.048, 1e-15);
  EXPECT_NEAR(e.at(74, ce), 0.048 * 0.97, 1e-15);
  EXPECT_NEAR(e.at(98, ce), 0.048 * 0.97 * 0.97, 1e-15);
}

TEST(RunBenchmarkEvalCadence, EpochsForResNetSamplesForBert) {
  RunSettings st;
  st.eval_offset = 1;
  const EvalCadence r = evalCadenceOf(Benchmark::kResNet50, st, 1024);
  EXPECT_EQ(r.unit, ProgressUnit::kEpochs);
  const auto rb = r.blocks(3);
  ASSERT_EQ(rb.size(), 2u);
  EXPECT_EQ(rb[0].first, 1);
  EXPECT_EQ(rb[0].last(), 1);
  EXPECT_EQ(rb[1].first, 2);
  EXPECT_EQ(rb[1].last(), 3);
  // The rule's examples (BERT_FACTS.md): GBS 256-2048 -> 150,000; 4096 -> 175,000; 16384 ->
  // 325,000.
  EXPECT_EQ(bertEvalIntervalSamples(256), 150000);
  EXPECT_EQ(bertEvalIntervalSamples(2048), 150000);
  EXPECT_EQ(bertEvalIntervalSamples(4096), 175000);
  EXPECT_EQ(bertEvalIntervalSamples(16384), 325000);
  const EvalCadence b = evalCadenceOf(Benchmark::kBertLarge, st, 4096);
  EXPECT_EQ(b.unit, ProgressUnit::kSamples);
  const auto bb = b.blocks(400000);
  ASSERT_EQ(bb.size(), 3u);
  EXPECT_EQ(bb[0].first, 0);
  EXPECT_EQ(bb[0].count, 175000);
  EXPECT_EQ(bb[2].first, 350000);
  EXPECT_EQ(bb[2].count, 50000);  // the last block ends at the budget
  // Mini: the rule / 1,000 in whole global batches (150,184 / 1,000 -> 18 steps of 8).
  EXPECT_EQ(bertMiniEvalIntervalSamples(8), 144);
  EXPECT_EQ(bertMiniEvalIntervalSamples(16), 144);
  EXPECT_EQ(bertMiniEvalIntervalSamples(100000), 100000);  // at least one step
  EXPECT_EQ(evalCadenceOf(Benchmark::kBertLarge, st, 8, Scale::kMini).every_samples, 144);
  // LAMB's warm-up counts from start_warmup_step (the reference): -2 steps shortens it.
  LrSchedule lamb;
  lamb.unit = ProgressUnit::kSamples;
  lamb.decay_from_start = true;
  lamb.base = 1.0;
  lamb.end = 0;
  lamb.power = 1;
  lamb.warmup = 4 * 8;
  lamb.decay = 10 * 8;
  const StepClock c8{1, 8};
  EXPECT_DOUBLE_EQ(lamb.at(1, c8), 0.25);
  lamb.warmup_start = -2 * 8;
  EXPECT_DOUBLE_EQ(lamb.at(1, c8), 0.75);  // (1 + 2) / 4
  EXPECT_DOUBLE_EQ(lamb.at(2, c8), 0.8);   // warm-up over: decay from step 0, 1 - 2 / 10
  const EvalCadence none{ProgressUnit::kSamples, 4, 0, 0};  // no interval
  EXPECT_THROW(none.blocks(10), std::invalid_argument);
}

TEST(RunBenchmarkPlan, DistinctSeedsAndTheSettingsOfThePreset) {
  CliOptions o;
  o.runs = 5;
  o.seed = 40;
  const BenchmarkPlan p = makePlan(o);
  EXPECT_EQ(p.seeds, (std::vector<std::uint64_t>{40, 41, 42, 43, 44}));
  EXPECT_EQ(p.run.settings.eval_period, 4);
  EXPECT_DOUBLE_EQ(p.run.settings.target_accuracy, 0.85);  // the mini preset's target
  EXPECT_EQ(p.run.hyperparameters["train_samples"], 60000);
  EXPECT_EQ(p.run.max_epochs, 8);
  EXPECT_EQ(p.layout.system, "ipu-pod1-emulated");
}

TEST(RunBenchmarkPlan, RunsReplicatedPresetsAndRefusesUnimplementedBenchmarks) {
  CliOptions o;
  o.pod_size = 16;
  const BenchmarkPlan p = makePlan(o);  // 16 replicas of micro-batch 4, in this process
  EXPECT_EQ(p.run.trainer.replicas, 16);
  EXPECT_EQ(p.run.trainer.batch, 4);
  EXPECT_EQ(p.run.trainer.accumulation, 1);
  EXPECT_EQ(p.run.hyperparameters["global_batch_size"], 64);
  o.pod_size = 1;
  o.benchmark = "bert_large";
  o.scale = "full";  // pipelined: refused until the backend runs pipelines
  EXPECT_THROW(makePlan(o), Refusal);
  o.benchmark = "resnet50";
  o.scale = "full";
  EXPECT_THROW(makePlan(o), Refusal);
}

TEST(RunBenchmarkPlanSteps, PipelineFlagsAndConfigKeysReachTheTrainer) {
  CliOptions o;
  o.division = "open";
  o.ipus_per_replica = 2;
  o.pipeline_splits = "stage2_unit1,stage3_unit1";
  o.pipeline_stage_ipus = "0,1,0";
  CliChoice c = validateCli(o);
  EXPECT_EQ(c.pipeline.ipus, 2);
  EXPECT_EQ(c.pipeline.splits, (std::vector<std::string>{"stage2_unit1", "stage3_unit1"}));
  EXPECT_EQ(c.pipeline.stageIpu, (std::vector<int>{0, 1, 0}));
  EXPECT_TRUE(c.pipeline.pipelined());
  // Grouped over 3 stages needs G a multiple of 6.
  EXPECT_THROW(checkPipelineAccumulation(c, 4), Refusal);
  EXPECT_NO_THROW(checkPipelineAccumulation(c, 6));
  // The --config keys: a flag given on the command line wins.
  const std::filesystem::path config =
      std::filesystem::temp_directory_path() / "run_benchmark_test_pipeline_config.json";
  std::ofstream(config) << R"({"gradient_accumulation_steps": 4, "ipus_per_replica": 2,
    "pipeline_splits": "stage3_unit1", "pipeline_schedule": "sequential", "recompute": true})";
  CliOptions k;
  k.division = "open";
  k.config = config.string();
  k.pipeline_schedule = "interleaved";
  const BenchmarkPlan plan = makePlan(k);
  std::filesystem::remove(config);
  const TrainerPipeline& p = plan.run.trainer.pipeline;
  EXPECT_EQ(p.ipus, 2);
  EXPECT_EQ(p.splits, std::vector<std::string>{"stage3_unit1"});
  EXPECT_EQ(p.schedule, pipeline::Schedule::Interleaved);
  EXPECT_TRUE(p.recompute);
  EXPECT_EQ(plan.fit_check.pipeline.splits, p.splits);
}

TEST(RunBenchmarkPrecision, ClosedResNet50PresetsCarryThePublishedIpuSettings) {
  for (int pod : {1, 16, 256}) {
    const auto p = precisionPolicyOf(findPreset(Benchmark::kResNet50, pod, Scale::kFull));
    EXPECT_EQ(p.preset, "16.16") << "POD" << pod;
    EXPECT_EQ(p.compute, DType::F16);
    EXPECT_EQ(p.masterWeights, DType::F16);
    EXPECT_TRUE(p.stochasticRounding);
    EXPECT_EQ(p.lossScaling, precision::LossScalingConfig::fixed(128.0f)) << "static 128";
  }
}

TEST(RunBenchmarkPrecision, FlagsReachThePlanAndTheModel) {
  CliOptions o;
  o.precision = "16.16";
  BenchmarkPlan p = makePlan(o);
  EXPECT_EQ(p.precision.preset, "16.16");
  EXPECT_EQ(p.precision.lossScaling, precision::LossScalingConfig::fixed(128.0f))
      << "--precision alone brings its policy's loss scaling";
  EXPECT_EQ(p.run.model.precision, p.precision);
  o.loss_scaling = "dynamic:1024";
  p = makePlan(o);
  EXPECT_EQ(p.precision.lossScaling.mode, precision::LossScalingMode::Dynamic);
  EXPECT_EQ(p.precision.lossScaling.scale, 1024.0f);
  const ModelInstance r = p.run.entry->build(p.run.model);
  const Graph& rg = r.train.graph;
  EXPECT_EQ(rg.tensor(rg.get("conv0_weight")).dtype, DType::F16);
  EXPECT_EQ(rg.tensor(r.train.output("logits")).dtype, DType::F32) << "logits read back as f32";
  EXPECT_GE(r.train.overflow, 0);
  EXPECT_EQ(r.train.lossScaling.mode, precision::LossScalingMode::Dynamic);
  for (const auto& [name, v] : r.init(1))
    EXPECT_EQ(static_cast<std::int64_t>(v.size()), rg.tensor(rg.get(name)).elements()) << name;
}

// makePlan's steps alone.
TEST(RunBenchmarkPlanSteps, OptimizerOfMapsEveryBackendOptimizer) {
  const OptimizerOptions sgd = optimizerOf(
      Json{{"opt_name", "sgd"}, {"sgd_opt_momentum", 0.8}, {"sgd_opt_weight_decay", 5e-5}});
  EXPECT_EQ(sgd.kind, "sgd");
  EXPECT_EQ(sgd.momentum, 0.8);
  EXPECT_EQ(sgd.weightDecay, 5e-5);
  EXPECT_EQ(sgd.larsEta, 0.0);
  const OptimizerOptions lars = optimizerOf(Json{{"opt_name", "lars"},
                                                 {"lars_opt_momentum", 0.9},
                                                 {"lars_opt_weight_decay", 1e-4},
                                                 {"lars_epsilon", 0.0}});
  EXPECT_EQ(lars.kind, "lars");
  EXPECT_EQ(lars.larsEta, 0.001) << "TensorFlow's trust coefficient";
  EXPECT_EQ(lars.weightDecay, 1e-4);
  const OptimizerOptions lamb = optimizerOf(Json{{"opt_name", "lamb"},
                                                 {"opt_lamb_beta_1", 0.62},
                                                 {"opt_lamb_beta_2", 0.996},
                                                 {"opt_lamb_epsilon", 1e-6},
                                                 {"opt_lamb_weight_decay_rate", 0.01}});
  EXPECT_EQ(lamb.kind, "lamb");
  EXPECT_EQ(lamb.beta1, 0.62);
  EXPECT_EQ(lamb.beta2, 0.996);
  EXPECT_EQ(lamb.weightDecay, 0.01);
  EXPECT_EQ(lamb.maxGradNorm, 1.0) << "the reference clips to global norm 1";
  const OptimizerOptions rms = optimizerOf(Json{{"opt_name", "rmsprop"},
                                                {"opt_rmsprop_decay", 0.9},
                                                {"opt_rmsprop_momentum", 0.9},
                                                {"opt_rmsprop_epsilon", 0.001},
                                                {"opt_weight_decay", 1e-5},
                                                {"ipu_weight_ema_decay", 0.97}});
  EXPECT_EQ(rms.kind, "rmsprop");
  EXPECT_EQ(rms.rho, 0.9);
  EXPECT_EQ(rms.epsilon, 0.001);
  EXPECT_EQ(rms.emaDecay, 0.97);
  EXPECT_TRUE(rms.emaWarmup) << "TensorFlow's EMA with num_updates, as the reference";
  EXPECT_EQ(optimizerOf(Json{{"opt_name", "adam"}}).kind, "adam");
  try {
    optimizerOf(Json{{"opt_name", "adagrad"}});
    FAIL() << "adagrad accepted";
  } catch (const Refusal& e) {
    EXPECT_NE(std::string(e.what()).find("adagrad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lamb"), std::string::npos) << "lists what there is";
  }
}

TEST(RunBenchmarkPlanSteps, EachStepRefusesWhatItOwns) {
  CliOptions o;
  o.runs = 0;
  EXPECT_THROW(validateCli(o), Refusal);
  o.runs = 1;
  o.engine = "gpu";
  EXPECT_THROW(validateCli(o), Refusal);
  o.engine = "fused";
  const CliChoice c = validateCli(o);
  EXPECT_EQ(c.benchmark, Benchmark::kResNet50);
  EXPECT_EQ(c.scale, Scale::kMini);
  o.pod_size = 3;
  EXPECT_THROW(resolvePreset(o, c), Refusal) << "no POD3 preset";
  o.pod_size = 1;
  ResolvedPreset p = resolvePreset(o, c);
  EXPECT_EQ(p.settings.eval_period, 4);
  o.data_dir = "/nonexistent";
  EXPECT_THROW(resolveData(o, Scale::kMini, datasets::CorruptPolicy::kFail), Refusal);
  // An optimizer that cannot be sharded (LARS) under --shard-optimizer-state.
  Json hp = mlperfHyperparameters(p.preset);
  hp["opt_name"] = "lars";
  o.shard_optimizer_state = true;
  EXPECT_THROW(resolveModel(o, Scale::kMini, p, hp), Refusal);
  hp["opt_name"] = "sgd";
  EXPECT_EQ(resolveModel(o, Scale::kMini, p, hp).optimizer.kind, "sgd");
  // LAMB's schedule counts samples: warm-up and training steps times the global batch.
  hp = Json{{"opt_name", "lamb"},
            {"opt_base_learning_rate", 0.002},
            {"opt_learning_rate_warmup_steps", 10},
            {"opt_learning_rate_training_steps", 1000}};
  const ResolvedSchedule s = resolveSchedule(Benchmark::kResNet50, o, p.preset, hp, p.settings);
  EXPECT_EQ(s.lr.unit, ProgressUnit::kSamples);
  EXPECT_TRUE(s.lr.decay_from_start);
  EXPECT_EQ(s.lr.warmup, 10.0 * static_cast<double>(p.preset.global_batch));
  EXPECT_EQ(s.lr.decay, 1000.0 * static_cast<double>(p.preset.global_batch));
}

TEST(EfficientNetTask, DropoutKeyIsTheStepAndTheMicroBatchsFirstGlobalSample) {
  // Fashion-MNIST from Debian's dataset-fashion-mnist (scripts/setup.sh installs it).
  if (!std::filesystem::exists(datasets::kDefaultFashionMnistDir))
    GTEST_SKIP() << datasets::kDefaultFashionMnistDir << " missing: bash scripts/setup.sh";
  DataRequest req;
  req.data_dir = datasets::kDefaultFashionMnistDir;
  req.train_samples = 64;
  req.eval_samples = 8;
  const std::unique_ptr<TaskData> data = findBenchmarkEntry(Benchmark::kEfficientNetB4).data(req);
  BatchGeometry g;
  g.microBatch = 2;
  g.accumulation = 2;
  g.replicas = 2;
  g.localReplicas = 2;
  std::vector<float> images(2 * 28 * 28);
  std::vector<std::int32_t> labels(2), key(2);
  const auto bytes = [](auto& v) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(v[0]));
  };
  const MicroBatch mb({{"images", DType::F32, {2, 28, 28, 1}, bytes(images)},
                       {"labels", DType::I32, {2}, bytes(labels)},
                       {"dropout_key", DType::I32, {2}, bytes(key)}});
  const std::unique_ptr<BatchSource> src = data->trainEpoch(1, g);
  for (std::int64_t step : {0, 1}) {
    ASSERT_TRUE(src->beginStep(step + 5));  // the trainer's global step, across epochs
    for (int r = 0; r < 2; ++r)
      for (int a = 0; a < 2; ++a) {
        src->fill(r, a, mb);
        EXPECT_EQ(key,
                  (std::vector<std::int32_t>{static_cast<std::int32_t>(step + 5), r * 4 + a * 2}));
      }
    src->endStep();
  }
}

}  // namespace
}  // namespace ipu::harness
