#include "harness/full_scale_projection.h"

#include <chrono>

#include <fmt/format.h>

#include "harness/run_benchmark_plan.h"
#include "ipu_backend/cost/cost_model.h"
#include "models/resnet50/resnet50.h"

namespace ipu::harness {
namespace {

// Ops compiled at a time: bounds host memory to ~1-2 GB for full ResNet-50 at micro-batch 20.
constexpr int kOpsPerSegment = 40;

// MLPerf Training v1.1 ResNet-50 closed, Graphcore (minutes; IPU facts in the design docs).
std::optional<double> publishedResNetMinutes(int podSize) {
  switch (podSize) {
    case 16:
      return 28.33;
    case 64:
      return 8.50;
    case 128:
      return 5.67;
    case 256:
      return 3.795;
    default:
      return std::nullopt;
  }
}

cost::Precision costPrecision(const std::string& preset) {
  if (preset == "FP16.16") return cost::Precision::F16F16;
  if (preset == "FP16.32") return cost::Precision::F16F32;
  return cost::Precision::F32;
}

}  // namespace

FullScaleProjection projectFullScale(Benchmark benchmark, int podSize) {
  if (benchmark != Benchmark::kResNet50)
    throw Refusal(
        fmt::format("--project-full-scale: {} has no full-scale model yet (only "
                    "resnet50 can be projected)",
                    toString(benchmark)));
  const auto t0 = std::chrono::steady_clock::now();
  const PodPreset& p = findPreset(benchmark, podSize, Scale::kFull);
  FullScaleProjection r;
  r.system = podTopology(podSize).name;
  r.preset = p;
  r.published_minutes = publishedResNetMinutes(podSize);

  const Target target = Target::mk2();
  const cost::CostOptions opts{.precision = costPrecision(p.precision)};
  const models::ResNetConfig full = models::ResNetConfig::resnet50();
  // The update is priced as SGD with momentum (LARS, which the published runs use, adds a
  // per-tensor norm: a few more elementwise passes over the weights, small beside the step).
  const models::ResNetGraph train =
      models::buildTraining(full, p.micro_batch, models::resnetSgdOptions());
  r.parameters = train.parameterCount();
  const cost::StepCost step = cost::estimateGraph(train.graph, target, {opts}, kOpsPerSegment)[0];
  const cost::StepCost eval = cost::estimateGraph(models::buildInference(full, p.micro_batch).graph,
                                                  target, {opts}, kOpsPerSegment)[0];
  cost::StepTimes st;
  st.weightUpdateSeconds = step.optimizerCycles / target.clockHz;
  st.microBatchSeconds = std::max(step.deviceSeconds - st.weightUpdateSeconds, step.hostSeconds);
  st.evalStepSeconds = eval.seconds;

  cost::TrainingRun run;
  run.pod = cost::PodShape::pod(p.ipus, p.ipus_per_replica);
  run.microBatch = p.micro_batch;
  run.accumulation = p.gradient_accumulation;
  run.epochs = p.epochs;
  const bool half = opts.precision != cost::Precision::F32;
  run.gradientBytes = r.parameters * (half ? 2 : 4);
  r.time = cost::projectTimeToTrain(run, st, target);
  r.model_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string FullScaleProjection::describe() const {
  std::string s = fmt::format(
      "full-scale projection for {} (cost model, not a measurement): ResNet-50 v1.5 at 224x224 "
      "on ImageNet, the published configuration {} replicas x micro-batch {} x accumulation {} "
      "= global batch {}, {} epochs, {}:\n"
      "  modeled time-to-train {:.2f} min = {} steps x {:.1f} ms (compute {:.1f} ms, "
      "all-reduce {:.1f} ms, update {:.2f} ms) + evaluation {:.1f} s; {:.0f} images/s\n",
      system, preset.replicas, preset.micro_batch, preset.gradient_accumulation,
      preset.global_batch, preset.epochs, preset.precision, time.totalSeconds / 60, time.steps,
      time.stepSeconds * 1e3, time.computeSeconds * 1e3, time.allReduceSeconds * 1e3,
      time.updateSeconds * 1e3, time.evalSeconds, time.imagesPerSecond);
  if (published_minutes)
    s += fmt::format(
        "  published MLPerf Training v1.1 result (Graphcore, closed): {:.2f} min (ratio {:.2f})\n",
        *published_minutes, time.totalSeconds / 60 / *published_minutes);
  s += fmt::format(
      "  priced from the training and evaluation programs compiled for IPU-Mk2 in segments "
      "({:.0f} s on this host)\n",
      model_seconds);
  return s;
}

}  // namespace ipu::harness
