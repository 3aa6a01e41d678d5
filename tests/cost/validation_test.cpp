// Hold-out validation: project ResNet-50 time-to-train on IPU-POD16/64/128/256 from hardware
// specifications alone and compare with the published MLPerf Training v1.1 Graphcore results
// (docs: IPU facts). Nothing here is fitted to the published times; the test prints the ratios
// and checks only that the projection is well formed.
//
// Compiling full ResNet-50 (micro-batch 20) for 1,472 tiles takes a minute or two even in
// segments, so the test runs only with IPU_COST_VALIDATION=1 (skipped otherwise). With
// IPU_COST_REPORT=<path> it also writes the JSON report there.
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/cost/cost_model.h"
#include "ipu_backend/cost/time_to_train.h"
#include "ipu_backend/ir/op_defs.h"
#include "models/resnet50/resnet50.h"

namespace ipu::cost {
namespace {

// MLPerf Training v1.1, ResNet-50 closed, Graphcore FP16.16 (docs: IPU facts).
struct Published {
  const char* system;
  int ipus;
  i64 microBatch, accumulation, globalBatch;
  double epochs, minutes;
};
constexpr Published kPublished[] = {
    {"IPU-POD16", 16, 20, 10, 3200, 38, 28.33},
    {"IPU-POD64", 64, 20, 3, 3840, 38, 8.50},
    {"IPU-POD128", 128, 20, 2, 5120, 41, 5.67},
    {"IPU-POD256", 256, 20, 2, 10240, 45, 3.795},
};
constexpr i64 kMicroBatch = 20;
// Ops compiled at a time (estimateGraph): bounds host memory to ~1-2 GB for ResNet-50.
constexpr int kOpsPerSegment = 40;

TEST(Validation, ResNet50TimeToTrainAgainstPublishedMlperfV11) {
  if (std::getenv("IPU_COST_VALIDATION") == nullptr)
    GTEST_SKIP() << "set IPU_COST_VALIDATION=1 to compile full ResNet-50 (a minute or two)";
  const Target target = Target::mk2();
  nlohmann::json report;

  // Per-micro-batch costs of the training step and of the evaluation forward pass.
  std::map<ExchangeModel, StepTimes> times;
  i64 params = 0;
  double trainMacs = 0;
  const std::vector<ExchangeModel> models = {ExchangeModel::AsCompiled, ExchangeModel::Planned};
  std::vector<CostOptions> opts;
  for (ExchangeModel em : models) opts.push_back({.precision = Precision::F16F16, .exchange = em});
  {
    auto rg = models::buildTraining(models::ResNetConfig::resnet50(), kMicroBatch,
                                    models::resnetSgdOptions());
    params = rg.parameterCount();
    std::vector<StepCost> costs = estimateGraph(rg.graph, target, opts, kOpsPerSegment);
    for (size_t k = 0; k < models.size(); ++k) {
      const StepCost& sc = costs[k];
      const double update = sc.optimizerCycles / target.clockHz;
      StepTimes& st = times[models[k]];
      st.weightUpdateSeconds = update;
      st.microBatchSeconds = std::max(sc.deviceSeconds - update, sc.hostSeconds);
      trainMacs = sc.macs;
      const char* key = models[k] == ExchangeModel::Planned ? "train_planned" : "train_as_compiled";
      report[key] = sc.report(15);
      fmt::print(
          "{:>18}: compute {:.3g} + exchange {:.3g} + sync {:.3g} cycles = {:.3f} ms "
          "device ({:.3f} ms optimizer), {:.3f} ms host; {:.1f} TFLOP/s of {:.0f} peak "
          "({:.1f}%)\n",
          key, sc.computeCycles, sc.exchangeCycles, sc.syncCycles, sc.deviceSeconds * 1e3,
          update * 1e3, sc.hostSeconds * 1e3, sc.achievedFlops / 1e12, sc.peakFlops / 1e12,
          100 * sc.utilisation);
      for (const KindCycles& kc : cyclesByKind(sc))
        if (kc.exchangeCycles > 0.01 * sc.exchangeCycles)
          fmt::print(
              "    by kind {:<28} phase {}: {:>4} sets, compute {:.3f} ms, exchange {:.3f} ms\n",
              opName(kc.kind), kc.phase, kc.sets, kc.computeCycles / target.clockHz * 1e3,
              kc.exchangeCycles / target.clockHz * 1e3);
      for (const auto& row : report[key]["compute_sets"]["most_expensive"])
        fmt::print("    {:<48} compute {:>9.0f} exchange {:>10.0f}\n",
                   row["name"].get<std::string>(), row["compute_cycles"].get<double>(),
                   row["exchange_cycles"].get<double>());
    }
  }
  {
    auto ig = models::buildInference(models::ResNetConfig::resnet50(), kMicroBatch);
    std::vector<StepCost> costs = estimateGraph(ig.graph, target, opts, kOpsPerSegment);
    for (size_t k = 0; k < models.size(); ++k) times[models[k]].evalStepSeconds = costs[k].seconds;
  }
  // Compute-only bound: the MACs at the 16.16 peak, nothing else (per micro-batch).
  const double peakMacs = macsPerCycle(target, Precision::F16F16) *
                          static_cast<double>(target.numTiles) * target.clockHz;
  StepTimes bound{.microBatchSeconds = trainMacs / peakMacs,
                  .weightUpdateSeconds = 0,
                  .evalStepSeconds = trainMacs / 3 / peakMacs};
  fmt::print("ResNet-50: {} parameters, {:.3g} training MACs per image\n", params,
             trainMacs / kMicroBatch);

  fmt::print("\n{:<11} {:>6} {:>9} | {:>22} | {:>22} | {:>22}\n", "system", "epochs", "published",
             "as compiled (ratio)", "planned exch. (ratio)", "peak-MAC bound (ratio)");
  for (const Published& p : kPublished) {
    TrainingRun run;
    run.pod = PodShape::pod(p.ipus);
    run.microBatch = p.microBatch;
    run.accumulation = p.accumulation;
    run.epochs = p.epochs;
    run.gradientBytes = params * 2;  // fp16 gradients
    ASSERT_EQ(run.globalBatch(), p.globalBatch);
    std::string line = fmt::format("{:<11} {:>6} {:>9.2f}", p.system, p.epochs, p.minutes);
    nlohmann::json row = {{"published_minutes", p.minutes},
                          {"rcp_epochs", resnetRcpEpochs(p.globalBatch)}};
    auto add = [&](const char* key, const StepTimes& st) {
      TimeToTrain ttt = projectTimeToTrain(run, st, target);
      const double minutes = ttt.totalSeconds / 60;
      EXPECT_TRUE(std::isfinite(minutes) && minutes > 0) << p.system << " " << key;
      line += fmt::format(" | {:>12.2f} ({:>6.2f}x)", minutes, minutes / p.minutes);
      row[key] = ttt.report();
      row[key]["ratio_to_published"] = minutes / p.minutes;
    };
    add("as_compiled", times[ExchangeModel::AsCompiled]);
    add("planned", times[ExchangeModel::Planned]);
    add("peak_mac_bound", bound);
    report["systems"][p.system] = row;
    fmt::print("{}\n", line);
  }
  if (const char* path = std::getenv("IPU_COST_REPORT")) std::ofstream(path) << report.dump(2);
}

}  // namespace
}  // namespace ipu::cost
