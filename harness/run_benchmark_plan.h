// From run_benchmark's command line to a checked plan. Every check that can refuse a request
// runs here, before anything is written: an unimplemented benchmark or scale, a pod preset that
// needs replication, an illegal or unknown --config key, a closed-division rule, a missing data
// set, and the compile step that says whether the configuration fits in tile memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/result_package.h"
#include "harness/run_loop.h"

namespace ipu::harness {

struct CliOptions {
  std::string benchmark = "resnet50";
  std::string division = "closed";
  int pod_size = 1;
  std::string scale = "mini";
  std::string data_dir;  // empty: the scale's default
  std::string results_dir = "results";
  std::string org = "ipu_mlperf";
  std::string system_name;  // empty: defaultSystemId(pod size)
  int runs = 1;
  std::uint64_t seed = 1;
  std::string config;  // JSON file
  int max_epochs = 0;  // 0: the preset's epochs
  std::string engine = "fused";
  int threads = 2;
  bool skip_memory_check = false;
  bool shard_optimizer_state = false;  // replicated tensor sharding of the momentum
  std::string precision;               // fp32 | fp16 | bf16 | 16.16 | 16.32; empty: the preset's
  std::string loss_scaling;         // none | static:S | dynamic[:S[:interval]]; empty: see makePlan
  bool project_full_scale = false;  // also print the modeled full-scale time-to-train
  bool project_only = false;        // only the projection: no runs, no package (--project-only)
  bool all_pod_sizes = false;       // --project-only for every pod size of the benchmark
  bool json = false;                // --project-only: JSON on stdout, the text on stderr
  std::string on_corrupt_image = "fail";  // full scale: fail | skip (reported by file name)
  int loader_threads = 0;                 // full scale: JPEG decoding threads (0: --threads)
  std::string report_dir;  // --report: the fit check's programs as report pages (empty: none)
  // Pipelining (a replica over several IPUs) and recomputation; see TrainerPipeline.
  int ipus_per_replica = 1;
  std::string pipeline_splits;      // op or layer names, comma-separated
  std::string pipeline_stage_ipus;  // stage -> IPU, comma-separated; empty: stage s on IPU s
  std::string pipeline_schedule = "grouped";  // grouped | interleaved | sequential
  bool pipeline_auto = false;                 // search the split points (cost::autoSplit)
  bool recompute = false;                     // checkpoints at every stage boundary
};

// The ImageNet folders of `dataDir` for --scale full: train/ and val/ scanned (val labelled by
// train's sorted synsets), at most `maxClasses` classes. Throws Refusal naming the folder, what
// was expected and the layout.
struct ImageNetIndex {
  std::shared_ptr<const datasets::ImageFolderIndex> train, val;
};
ImageNetIndex scanImageNet(const std::filesystem::path& dataDir, datasets::CorruptPolicy policy,
                           int maxClasses);

// The precision policy a preset asks for: its precision ("FP32", "FP16.16", "FP16.32", "FP16",
// "BF16") and loss scaling ({"static", S}, {"dynamic", S0}, {"none"}). Throws Refusal naming an
// unknown value.
precision::PrecisionPolicy precisionPolicyOf(const PodPreset& preset);

// A refused request; `exit_code` is what run_benchmark returns.
class Refusal : public std::runtime_error {
 public:
  explicit Refusal(const std::string& message, int exit_code = 1 /* kExitRefused */)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exitCode() const { return exit_code_; }

 private:
  int exit_code_;
};

struct BenchmarkPlan {
  CliOptions cli;
  Benchmark benchmark = Benchmark::kResNet50;
  Division division = Division::kClosed;
  Scale scale = Scale::kMini;
  RunPlan run;
  PackageLayout layout;
  std::string model_description;
  std::vector<std::uint64_t> seeds;  // one per run, distinct
  precision::PrecisionPolicy precision;
  // What preflightCompile compiles: the run's trainer options for the target IPU with the
  // tile-memory check. At full scale the fused engine then runs a plan for a small target (it
  // executes whole ops; the Mk2 plan of 224x224 images takes gigabytes and a minute to build).
  TrainerOptions fit_check;
  // Set by preflightCompile: the cost model's price of one run of the compiled training program
  // (one weight update of one replica, collectives included) and of one evaluation batch.
  double modeled_step_seconds = 0, modeled_eval_seconds = 0;
  // Set by preflightCompile under --report: the report pages written, and the training
  // program's view (the runs' pages add their curves to it).
  std::vector<std::filesystem::path> report_pages;
  nlohmann::json report_train_view;
  bool pipeline_auto = false;        // preflightCompile searches the splits
  std::string pipeline_description;  // set by preflightCompile: placement and per-IPU memory
};

// makePlan in its steps, each testable alone; each throws Refusal naming what it refuses.

// 1. The command line alone: names parsed, ranges checked, the benchmark implemented.
struct CliChoice {
  Benchmark benchmark = Benchmark::kResNet50;
  Division division = Division::kClosed;
  Scale scale = Scale::kMini;
  datasets::CorruptPolicy corrupt_policy = datasets::CorruptPolicy::kFail;
  EngineMode engine = EngineMode::Fused;
  TrainerPipeline pipeline;  // splits empty under --pipeline-auto (found by preflightCompile)
  bool pipeline_auto = false;
};
CliChoice validateCli(const CliOptions& cli);

// The pipeline flags parsed and checked against each other (a stage map for more stages than
// IPUs, IPUs in range, --recompute with split points); the schedule's rule on the accumulation
// count is checkPipelineAccumulation's, once the preset's count is known.
// `checkpoints`: the benchmark's published recomputation checkpoints, what --recompute without
// split points uses (ResNet-50: Graphcore's six, models::publishedRecomputationCheckpoints);
// null (validateCli, before the benchmark's model is known): that check waits for makePlan.
void resolvePipeline(const CliOptions& cli, CliChoice& choice,
                     const std::vector<std::string>* checkpoints = nullptr);
void checkPipelineAccumulation(const CliChoice& choice, int accumulation);

// 2. The pod preset with the user's --config applied, the run settings, and the precision
// policy (the preset's, or --precision / --loss-scaling, which resolvePrecision writes back
// into the preset so that the logs and the system description say what runs).
struct ResolvedPreset {
  PodPreset preset;
  RunSettings settings;
  precision::PrecisionPolicy precision;
  // The pipeline keys of --config (ipus_per_replica, pipeline_splits, pipeline_stage_ipus,
  // pipeline_schedule, pipeline_auto, recompute): the flags' equivalents; a flag given on the
  // command line wins. pipelineFlagsOf folds them into the options resolvePipeline reads.
  Json pipeline_keys = Json::object();
};
CliOptions pipelineFlagsOf(const CliOptions& cli, const Json& pipelineKeys);
ResolvedPreset resolvePreset(const CliOptions& cli, const CliChoice& choice);
precision::PrecisionPolicy resolvePrecision(const CliOptions& cli, PodPreset& preset);

// 3. The data set: Fashion-MNIST's files at mini scale; the ImageNet folders scanned at full.
struct ResolvedData {
  std::filesystem::path dir;
  std::shared_ptr<const datasets::ImageFolderIndex> imagenet_train, imagenet_val;
};
ResolvedData resolveData(const CliOptions& cli, Scale scale, datasets::CorruptPolicy policy);

// 4. The MLPerf hyperparameters the log will carry, checked against the division's rules and
// the harness's rules on the run settings.
Json resolveHyperparameters(const CliChoice& choice, const ResolvedPreset& preset,
                            const ResolvedData& data);

// 5. The model request: the optimizer of the hyperparameters (optimizerOf), the precision, batch
// norm over model_bn_span / micro-batch replicas (refused unless whole replicas dividing the
// pod's), and --shard-optimizer-state only for optimizers that can be sharded.
// optimizerOf: opt_name onto ipu_backend/optimizers (sgd_opt_*, lars_opt_* with TensorFlow's
// trust coefficient, opt_lamb_* with the reference's clipping to global norm 1, opt_rmsprop_*,
// adam), plus a weight EMA from model_eval_ema_factor or "ipu_weight_ema_decay" (our key),
// with TensorFlow's num_updates warm-up.
OptimizerOptions optimizerOf(const Json& hp);
ModelRequest modelRequestOf(const PodPreset& preset, const Json& hp, Scale scale,
                            const precision::PrecisionPolicy& policy);
ModelRequest resolveModel(const CliOptions& cli, Scale scale, const ResolvedPreset& preset,
                          const Json& hp);

// 6. The learning-rate schedule of the optimizer's keys (sgd / lars: polynomial decay in
// epochs; lamb: polynomial decay in samples, warm-up and decay given in steps of the global
// batch; rmsprop / adam: warm-up in epochs then exponential decay), the benchmark's evaluation
// cadence (evalCadenceOf: ResNet every eval_period epochs; BERT every
// bertEvalIntervalSamples), and the budget (--max-epochs or the preset's epochs).
struct ResolvedSchedule {
  LrSchedule lr;
  EvalCadence cadence;
  int max_epochs = 1;
  std::int64_t max_samples = 0;
};
ResolvedSchedule resolveSchedule(Benchmark benchmark, const CliOptions& cli,
                                 const PodPreset& preset, const Json& hp,
                                 const RunSettings& settings);
EvalCadence evalCadenceOf(Benchmark benchmark, const RunSettings& settings,
                          std::int64_t globalBatch, Scale scale = Scale::kFull);

// The keys --config accepts besides the preset's (run settings, see RunSettings).
Json runSettingKeys(const PodPreset& preset);

// All of the above, then the results layout and the trainer options. Throws Refusal for every
// request that cannot run; writes nothing.
BenchmarkPlan makePlan(const CliOptions& cli);

// Builds and compiles the model once: a CompileError (the configuration does not fit in tile
// memory) becomes a Refusal that names the tile and the bytes. Sets plan.model_description and
// the modeled step times; returns the seconds it took.
double preflightCompile(BenchmarkPlan& plan);

}  // namespace ipu::harness
