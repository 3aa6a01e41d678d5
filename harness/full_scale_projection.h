// Modeled time-to-train of a benchmark at full scale on the pod a user asked for: the published
// IPU configuration of the full-scale preset (replicas, micro-batch, accumulation, epochs,
// precision), the full model's training and evaluation programs compiled for IPU-Mk2 (in
// segments, to bound host memory) and priced by the cost model, and cost::projectTimeToTrain
// (all-reduce over the pod's IPU-Links / GW-Links, evaluation on the benchmark's schedule).
// Only one replica's program is compiled: no replica runs on the host, so any pod size projects
// on one ordinary machine (run_benchmark --project-only).
// Nothing is fitted to published results; the published MLPerf v1.1 time, where there is one,
// is printed beside the projection for comparison.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/mllog.h"  // Json
#include "harness/pod_presets.h"
#include "harness/report_pages.h"
#include "ipu_backend/cost/pipeline_cost.h"
#include "ipu_backend/cost/time_to_train.h"

namespace ipu::harness {

// Tile memory of one compiled program (what the verdict and the reports quote).
struct ProgramMemory {
  bool fits = false;
  int worst_tile = -1;
  std::int64_t worst_tile_bytes = 0, capacity = 0;
  std::int64_t always_live = 0;            // on the worst tile: variables, code, vertex state
  std::int64_t code_and_vertex_state = 0;  // part of always_live
  std::int64_t peak_not_always_live = 0;   // on the worst tile
  std::int64_t peak_live_bytes = 0;        // not always live, all tiles, at the fullest set
  // Always live, all tiles: code, vertex state and variables, what loading the program writes.
  std::int64_t always_live_all_tiles = 0;
  int tiles_over = 0;
  std::string peak_compute_set;  // of the worst tile
  std::string largest_occupant;  // of the worst tile at its peak
  Json json() const;
};

// Whether one replica's programs, exactly as a run would compile them (the preset's precision
// and optimizer, replicated with gradient accumulation, recomputation from the published
// checkpoints), fit in the tile memory of an IPU-Mk2.
struct FitVerdict {
  bool train_fits = false, eval_fits = false;
  // The first program that does not fit ("training" or "evaluation"; empty when both fit), its
  // worst tile, that tile's bytes and the capacity, and the compiler's message.
  std::string program;
  int tile = -1;
  std::int64_t bytes = 0, capacity = 0;
  std::string message;
  // Non-empty when the check could not compile the exact configuration and checked a stated
  // stand-in (batch norm per replica); says why.
  std::string deviation;
  double seconds = 0;  // host time of the check
  // The training program's recomputation checkpoints (the published configuration's) and the
  // share of the forward pass's multiply-accumulates it runs a second time.
  std::vector<std::string> recomputation_checkpoints;
  double recomputed_forward_fraction = 0;
  ProgramMemory training, evaluation;
  // The same training program without recomputation (FitOptions::compare_without_recomputation).
  std::optional<ProgramMemory> training_without_recomputation;
  bool fits() const { return train_fits && eval_fits; }
};

struct FitOptions {
  bool recompute = true;                       // the published checkpoints
  bool compare_without_recomputation = false;  // also check the training program without them
};

// The fit check of one preset (what --project-only prints; the benchmarks time it).
FitVerdict checkFit(const PodPreset& preset, const FitOptions& options = {},
                    const ProgramReportSink& report = {});

// One weight update of the whole system, in seconds: the parts sum to TimeToTrain::stepSeconds.
struct StepBreakdown {
  double compute = 0, exchange = 0, sync = 0;  // the micro-batches (forward + backward)
  double bn_statistics = 0;  // batch-norm statistics summed across replicas (model_bn_span)
  double host_io = 0;        // host stream time not hidden behind the device (0 when hidden)
  double host_io_total = 0;  // host stream time of the step, overlapped or not
  double weight_update = 0;  // the optimizer, once per step
  double collectives = 0;    // the gradient all-reduce over IPU-Links / GW-Links
  double pipeline_ramp = 0;  // pipeline fill and drain (0 without pipelining)
  double sum() const {
    return compute + exchange + sync + bn_statistics + host_io + weight_update + collectives +
           pipeline_ramp;
  }
};

// A pipelined replica (BERT-Large): Graphcore's placement, every IPU's program compiled for the
// Mk2 (tile memory checked, not required) and priced by cost::estimatePipelineStep.
struct IpuFit {
  int ipu = 0;
  bool fits = false;
  int worst_tile = -1;
  std::int64_t worst_tile_bytes = 0, capacity = 0;
  std::int64_t stash_bytes = 0, off_chip_state_bytes = 0;
};

struct PipelineProjection {
  std::string placement;  // the stages and their IPUs
  int stages = 0;
  bool optimizer_state_off_chip = false;
  std::vector<IpuFit> ipus;
  cost::PipelineStepCost step;  // one weight update of one replica
  // One evaluation: its micro-batches through the pipeline's forward stages (fill included).
  double evaluation_seconds = 0;
};

// BERT's progress in samples: MLPerf's reference convergence point for the global batch,
// rounded up to the rules' evaluation interval (a run stops at an evaluation).
struct SampleSchedule {
  double rcp_samples = 0;
  std::int64_t eval_interval = 0;
  int evaluations = 0;
  std::int64_t trained_samples = 0;  // evaluations x eval_interval
};

struct FullScaleProjection {
  Benchmark benchmark = Benchmark::kResNet50;
  std::string system;  // "IPU-POD16"
  PodPreset preset;    // the full-scale preset projected (replicas, batch, epochs, precision)
  std::int64_t parameters = 0;
  FitVerdict fit;
  StepBreakdown breakdown;
  cost::TimeToTrain time;
  std::optional<PipelineProjection> pipeline;  // pipelined presets (BERT-Large)
  std::optional<SampleSchedule> samples;       // BERT: samples instead of epochs
  double model_seconds = 0;                    // host time spent compiling and pricing
  std::optional<double> published_minutes;     // MLPerf Training v1.1, Graphcore, closed
  // Graphcore's steady-state samples per second in those logs (a comparison, not an input).
  std::optional<double> published_throughput;
  std::string describe() const;  // the lines run_benchmark prints
  Json json() const;             // the same, machine-readable (--json)
};

// The published MLPerf Training v1.1 time of `benchmark` on the pod (Graphcore, closed), if any.
std::optional<double> publishedMinutes(Benchmark benchmark, int podSize);
// Graphcore's steady-state training throughput in its v1.1 logs (samples/s), if derived.
std::optional<double> publishedThroughput(Benchmark benchmark, int podSize);

// Every pod size in `podSizes` (each must have a full-scale preset); programs shared by several
// pod sizes are priced once. ResNet-50 (one IPU per replica) and BERT-Large (Graphcore's v1.1
// pipelines: minutes and ~5 GB per pod size); EfficientNet-B4 has no full-scale projection yet
// (throws Refusal naming it).
// `report`, when set, receives every program the fit check compiles (run_benchmark --report).
std::vector<FullScaleProjection> projectFullScale(Benchmark benchmark,
                                                  const std::vector<int>& podSizes,
                                                  const ProgramReportSink& report = {});
FullScaleProjection projectFullScale(Benchmark benchmark, int podSize);

}  // namespace ipu::harness
