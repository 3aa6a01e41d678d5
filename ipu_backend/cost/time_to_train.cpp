#include "ipu_backend/cost/time_to_train.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ipu::cost {

TimeToTrain projectTimeToTrain(const TrainingRun& run, const StepTimes& t, const Target& target,
                               const CollectiveOptions& copts) {
  if (run.microBatch < 1 || run.accumulation < 1 || run.pod.replicas < 1 || run.epochs <= 0)
    throw std::invalid_argument(
        fmt::format("projectTimeToTrain: micro-batch {}, accumulation {}, replicas {}, epochs {}",
                    run.microBatch, run.accumulation, run.pod.replicas, run.epochs));
  TimeToTrain r;
  const double gb = static_cast<double>(run.globalBatch());
  r.steps = static_cast<i64>(std::ceil(run.epochs * static_cast<double>(run.trainSamples) / gb));
  const int p = std::max(1, run.pod.ipusPerReplica);
  const double a = static_cast<double>(run.accumulation);
  if (p == 1) {
    r.computeSeconds = a * t.microBatchSeconds;
  } else {
    const double slot = t.microBatchSeconds / p;  // one micro-batch through one balanced stage
    r.computeSeconds = a * slot;
    r.pipelineSeconds = (2.0 * p - 1.0) * slot;
  }
  r.allReduceSeconds = allReduceSeconds(run.gradientBytes, run.pod, target, copts);
  r.updateSeconds = t.weightUpdateSeconds;
  r.stepSeconds = r.computeSeconds + r.pipelineSeconds + r.allReduceSeconds + r.updateSeconds;
  r.trainSeconds = static_cast<double>(r.steps) * r.stepSeconds;
  const double evals = std::ceil(run.epochs / run.evalEveryEpochs);
  const i64 evalBatch = run.evalBatch > 0 ? run.evalBatch : run.microBatch;
  const double evalSteps = std::ceil(static_cast<double>(run.evalSamples) /
                                     static_cast<double>(run.pod.replicas * evalBatch));
  r.evalSeconds = evals * evalSteps * t.evalStepSeconds;
  r.totalSeconds = r.trainSeconds + r.evalSeconds + run.fixedSeconds;
  r.imagesPerSecond = r.stepSeconds > 0 ? gb / r.stepSeconds : 0.0;
  return r;
}

double resnetRcpEpochs(i64 globalBatch) {
  // (global batch, epochs to converge): MLPerf ResNet RCPs (docs: MLPerf logging).
  static const std::pair<double, double> kRcp[] = {{1632, 35.0},  {3264, 35.15}, {4096, 39.9},
                                                   {8192, 41.9},  {13056, 45.5}, {32768, 56.0},
                                                   {49152, 68.0}, {65536, 84.5}};
  const double b = static_cast<double>(globalBatch);
  if (b <= kRcp[0].first) return kRcp[0].second;
  for (size_t i = 1; i < std::size(kRcp); ++i)
    if (b <= kRcp[i].first) {
      const auto [b0, e0] = kRcp[i - 1];
      const auto [b1, e1] = kRcp[i];
      return e0 + (e1 - e0) * (b - b0) / (b1 - b0);
    }
  return std::end(kRcp)[-1].second;
}

nlohmann::json TimeToTrain::report() const {
  return {{"steps", steps},
          {"step_seconds", stepSeconds},
          {"step_breakdown",
           {{"compute", computeSeconds},
            {"pipeline_fill_drain", pipelineSeconds},
            {"all_reduce", allReduceSeconds},
            {"weight_update", updateSeconds}}},
          {"train_seconds", trainSeconds},
          {"eval_seconds", evalSeconds},
          {"total_seconds", totalSeconds},
          {"total_minutes", totalSeconds / 60.0},
          {"images_per_second", imagesPerSecond}};
}

}  // namespace ipu::cost
