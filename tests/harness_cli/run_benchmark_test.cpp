// Unit tests of run_benchmark's pieces: the benchmark registry (and its adapter from
// models/resnet50 to the trainer's graph struct), the evaluation schedule, the LR schedule and
// the request checks. The binary itself is tested by test_run_benchmark.py.
#include <gtest/gtest.h>

#include <set>

#include "harness/benchmark_registry.h"
#include "harness/mlperf_events.h"
#include "harness/run_benchmark_plan.h"
#include "harness/run_loop.h"

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
  EXPECT_FALSE(findBenchmarkEntry(Benchmark::kBertLarge).implemented);
  EXPECT_FALSE(findBenchmarkEntry(Benchmark::kEfficientNetB4).implemented);
}

TEST(RunBenchmarkRegistry, RealResNet50LogsTheCanonicalTensorsAndInitialisesEveryVariable) {
  ModelRequest r;
  r.micro_batch = 2;
  const ModelInstance m = findBenchmarkEntry(Benchmark::kResNet50).build(r);
  EXPECT_FALSE(m.stand_in);
  EXPECT_EQ(m.variant, "resnet50");
  EXPECT_EQ(m.weight_tensor_names, resnet50CanonicalTensorNames());  // the 1.1.0 ruleset's 161
  for (const ::models::ClassifierGraph* g : {&m.train, &m.eval}) {
    EXPECT_EQ(g->graph.tensor(g->images).shape, (Shape{2, 28, 28, 1}));
    EXPECT_GE(g->labels, 0);
    EXPECT_GE(g->logits, 0);
    EXPECT_GE(g->loss, 0);
  }
  EXPECT_GE(m.train.lr, 0);
  EXPECT_EQ(m.train.parameters.size(), 161u);
  const auto init = m.init(7);
  for (const Tensor& t : m.train.graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    ASSERT_TRUE(init.count(t.name)) << t.name;
    EXPECT_EQ(static_cast<std::int64_t>(init.at(t.name).size()), t.elements()) << t.name;
  }
}

TEST(RunBenchmarkRegistry, StandInIsMarked) {
  ModelRequest r;
  r.micro_batch = 4;
  r.choice = ModelChoice::kSmallCnnStandIn;
  const ModelInstance m = findBenchmarkEntry(Benchmark::kResNet50).build(r);
  EXPECT_TRUE(m.stand_in);
  EXPECT_NE(m.description.find("NOT ResNet-50"), std::string::npos);
  EXPECT_EQ(m.weight_tensor_names.size(), m.train.parameters.size());
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
  LrSchedule s{0.1, 0.0001, 2, 1, 5};
  EXPECT_NEAR(s.at(0, 10), 0.01, 1e-12);  // warmup: (0 + 1) / 10 of the base
  EXPECT_NEAR(s.at(9, 10), 0.1, 1e-12);   // end of warmup
  EXPECT_NEAR(s.at(10, 10), 0.1, 1e-12);  // decay starts at the base
  EXPECT_NEAR(s.at(30, 10), (0.1 - 0.0001) * 0.25 + 0.0001, 1e-12);  // halfway, power 2
  EXPECT_NEAR(s.at(50, 10), 0.0001, 1e-12);
  EXPECT_NEAR(s.at(500, 10), 0.0001, 1e-12);  // past the decay: the end rate
}

TEST(RunBenchmarkPlan, DistinctSeedsAndTheSettingsOfThePreset) {
  CliOptions o;
  o.runs = 5;
  o.seed = 40;
  o.model_stand_in = true;
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
  EXPECT_THROW(makePlan(o), Refusal);
  o.benchmark = "resnet50";
  o.scale = "full";
  EXPECT_THROW(makePlan(o), Refusal);
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
  o.model_stand_in = true;
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
  const ModelInstance m = p.run.entry->build(p.run.model);
  EXPECT_EQ(m.train.graph.tensor(m.train.graph.get("conv1_weight")).dtype, DType::F16);
  EXPECT_GE(m.train.overflow, 0) << "the dynamic-scaling graph reports overflow";
  o.model_stand_in = false;  // the reference ResNet-50 under the same policy
  p = makePlan(o);
  const ModelInstance r = p.run.entry->build(p.run.model);
  const Graph& rg = r.train.graph;
  EXPECT_EQ(rg.tensor(rg.get("conv0_weight")).dtype, DType::F16);
  EXPECT_EQ(rg.tensor(r.train.logits).dtype, DType::F32) << "logits read back as f32";
  EXPECT_GE(r.train.overflow, 0);
  EXPECT_EQ(r.train.lossScaling.mode, precision::LossScalingMode::Dynamic);
  for (const auto& [name, v] : r.init(1))
    EXPECT_EQ(static_cast<std::int64_t>(v.size()), rg.tensor(rg.get(name)).elements()) << name;
}

}  // namespace
}  // namespace ipu::harness
