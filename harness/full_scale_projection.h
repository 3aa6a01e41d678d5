// Modeled time-to-train of a benchmark at full scale on the pod a user asked for: the published
// IPU configuration of the full-scale preset (replicas, micro-batch, accumulation, epochs,
// precision), the full model's training and evaluation programs compiled for IPU-Mk2 (in
// segments, to bound host memory) and priced by the cost model, and cost::projectTimeToTrain
// (all-reduce over the pod's IPU-Links / GW-Links, evaluation on the benchmark's schedule).
// Nothing is fitted to published results; the published MLPerf v1.1 time, where there is one,
// is printed beside the projection for comparison.
#pragma once

#include <optional>
#include <string>

#include "harness/pod_presets.h"
#include "ipu_backend/cost/time_to_train.h"

namespace ipu::harness {

struct FullScaleProjection {
  std::string system;  // "IPU-POD16"
  PodPreset preset;    // the full-scale preset projected (replicas, batch, epochs, precision)
  std::int64_t parameters = 0;
  cost::TimeToTrain time;
  double model_seconds = 0;                 // host time spent compiling and pricing
  std::optional<double> published_minutes;  // MLPerf Training v1.1, Graphcore, closed
  std::string describe() const;             // the lines run_benchmark prints
};

// ResNet-50 only (the other benchmarks have no full model yet: throws Refusal naming them).
FullScaleProjection projectFullScale(Benchmark benchmark, int podSize);

}  // namespace ipu::harness
