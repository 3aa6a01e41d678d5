#include "ipu_backend/cost/time_to_train.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <span>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ipu::cost {

namespace {

// Linear interpolation in (x, y) points sorted by x, clamped at the ends.
double interpolate(std::span<const std::pair<double, double>> points, double x) {
  if (x <= points.front().first) return points.front().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (x <= points[i].first) {
      const auto [x0, y0] = points[i - 1];
      const auto [x1, y1] = points[i];
      return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    }
  return points.back().second;
}
}  // namespace

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
  const HostSide& h = run.host;
  // A replica's images are decoded by the cores of all its IPUs, and stream through the gateway
  // of its first IPU, which the gateway's other IPUs share.
  const double replicaCores = h.coresPerIpu * p;
  if (replicaCores > 0 && h.trainImagesPerCoreSecond > 0)
    r.hostDecodeSeconds =
        static_cast<double>(run.microBatch) / (replicaCores * h.trainImagesPerCoreSecond);
  if (h.gatewayBytesPerSec > 0)
    r.gatewayStreamSeconds = static_cast<double>(run.microBatch) * h.imageBytes *
                             std::max(1, h.ipusPerGateway) / h.gatewayBytesPerSec;
  const double microBatch =
      std::max({t.microBatchSeconds, r.hostDecodeSeconds, r.gatewayStreamSeconds});
  // Micro-batches per step: A, or A + 2P - 1 stage slots of 1/P micro-batch each.
  const double slots = p == 1 ? a : (a + 2.0 * p - 1.0) / p;
  if (p == 1) {
    r.computeSeconds = a * microBatch;
  } else {
    const double slot = microBatch / p;  // one micro-batch through one balanced stage
    r.computeSeconds = a * slot;
    r.pipelineSeconds = (2.0 * p - 1.0) * slot;
  }
  r.hostWaitSeconds = slots * (microBatch - t.microBatchSeconds);
  r.allReduceSeconds = allReduceSeconds(run.gradientBytes, run.pod, target, copts);
  r.updateSeconds = t.weightUpdateSeconds;
  r.stepSeconds = r.computeSeconds + r.pipelineSeconds + r.allReduceSeconds + r.updateSeconds;
  r.trainSeconds = static_cast<double>(r.steps) * r.stepSeconds;
  const double evals = std::ceil(run.epochs / run.evalEveryEpochs);
  const i64 evalBatch = run.evalBatch > 0 ? run.evalBatch : run.microBatch;
  const double evalSteps = std::ceil(static_cast<double>(run.evalSamples) /
                                     static_cast<double>(run.pod.replicas * evalBatch));
  double evalStep = t.evalStepSeconds;
  if (replicaCores > 0 && h.evalImagesPerCoreSecond > 0)
    evalStep = std::max(
        evalStep, static_cast<double>(evalBatch) / (replicaCores * h.evalImagesPerCoreSecond));
  r.evalSeconds = evals * evalSteps * evalStep;
  r.evalHostWaitSeconds = evals * evalSteps * (evalStep - t.evalStepSeconds);
  // One checkpoint per evaluation (saved from one IPU, restored onto every IPU of every
  // gateway before its evaluation); the evaluation program loaded once.
  if (h.gatewayBytesPerSec > 0) {
    const double perGateway = std::max(1, h.ipusPerGateway) / h.gatewayBytesPerSec;
    r.checkpointSaveSeconds = evals * static_cast<double>(h.checkpointBytes) / h.gatewayBytesPerSec;
    r.restoreSeconds = evals * static_cast<double>(h.restoreBytes) * perGateway;
    r.evalProgramLoadSeconds = static_cast<double>(h.evalProgramBytes) * perGateway;
  }
  r.totalSeconds = r.trainSeconds + r.evalSeconds + r.hostTransferSeconds() + run.fixedSeconds;
  r.imagesPerSecond = r.stepSeconds > 0 ? gb / r.stepSeconds : 0.0;
  return r;
}

double resnetRcpEpochs(i64 globalBatch) {
  // (global batch, epochs to converge): MLPerf ResNet RCPs (docs: MLPerf logging).
  static const std::pair<double, double> kRcp[] = {{1632, 35.0},  {3264, 35.15}, {4096, 39.9},
                                                   {8192, 41.9},  {13056, 45.5}, {32768, 56.0},
                                                   {49152, 68.0}, {65536, 84.5}};
  return interpolate(kRcp, static_cast<double>(globalBatch));
}

double bertRcpSamples(i64 globalBatch) {
  static const std::pair<double, double> kRcp[] = {
      {256, 2549220},  {1536, 2776278}, {3072, 2764499}, {4608, 2798080},
      {6144, 3319125}, {8192, 4186112}, {12288, 4465067}};
  return interpolate(kRcp, static_cast<double>(globalBatch));
}

i64 bertEvalIntervalSamples(i64 globalBatch) {
  constexpr i64 kGrain = 25000;
  const double raw = 0.05 * (230.23 * static_cast<double>(globalBatch) + 3'000'000.0);
  return static_cast<i64>(std::floor(raw / kGrain)) * kGrain;
}

nlohmann::json TimeToTrain::report() const {
  return {{"steps", steps},
          {"step_seconds", stepSeconds},
          {"step_breakdown",
           {{"compute", computeSeconds},
            {"pipeline_fill_drain", pipelineSeconds},
            {"host_wait_within_compute", hostWaitSeconds},
            {"all_reduce", allReduceSeconds},
            {"weight_update", updateSeconds}}},
          {"train_seconds", trainSeconds},
          {"eval_seconds", evalSeconds},
          {"eval_host_wait_seconds", evalHostWaitSeconds},
          {"host_micro_batch_seconds",
           {{"decode", hostDecodeSeconds}, {"gateway_stream", gatewayStreamSeconds}}},
          {"host_transfer_seconds",
           {{"checkpoint_saves", checkpointSaveSeconds},
            {"weight_restores", restoreSeconds},
            {"evaluation_program_load", evalProgramLoadSeconds}}},
          {"total_seconds", totalSeconds},
          {"total_minutes", totalSeconds / 60.0},
          {"images_per_second", imagesPerSecond}};
}

}  // namespace ipu::cost
