// The one MLPerf logger of the suite. It writes the lines the official checker
// (`python -m mlperf_logging.compliance_checker`) reads:
//
//   :::MLLOG {"namespace": "", "time_ms": 1636168322050, "event_type": "POINT_IN_TIME",
//             "key": "seed", "value": 1, "metadata": {"file": "harness/train.cpp", "lineno": 42}}
//
// (one line in the file). Keys appear in exactly that order, with Python's json.dumps spacing
// (", " and ": "), as mlperf_logging's own logger prints them.
//
// metadata.file is the call site's path relative to the repository root (e.g.
// "harness/train_loop.cpp"): the root is found from this library's own source path, so it needs
// no build flag; a call site outside the repository gets its basename.
//
// Rules the logger enforces, because the checker fails a log that breaks them:
//  - each hyperparameter once (isOnceKey): an identical duplicate is dropped with a warning, a
//    different value throws std::logic_error naming the key and both values;
//  - init_stop, run_start and run_stop at most once per log (one logger per result_<i>.txt);
//  - only rank 0 writes: loggers of other ranks are no-ops.
// Every line is written and flushed before the call returns (optionally fsync'ed too), so a
// crash loses no earlier line. All methods are thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <mutex>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ipu::harness {

using Json = nlohmann::ordered_json;

// MLPerf log keys (names as in mlperf_logging.mllog.constants). Use these, not literals.
namespace keys {
// Submission information.
inline constexpr char kSubmissionBenchmark[] = "submission_benchmark";
inline constexpr char kSubmissionDivision[] = "submission_division";
inline constexpr char kSubmissionOrg[] = "submission_org";
inline constexpr char kSubmissionPlatform[] = "submission_platform";
inline constexpr char kSubmissionStatus[] = "submission_status";
// Run structure.
inline constexpr char kCacheClear[] = "cache_clear";
inline constexpr char kInitStart[] = "init_start";
inline constexpr char kInitStop[] = "init_stop";
inline constexpr char kRunStart[] = "run_start";
inline constexpr char kRunStop[] = "run_stop";
inline constexpr char kBlockStart[] = "block_start";
inline constexpr char kBlockStop[] = "block_stop";
inline constexpr char kEpochStart[] = "epoch_start";
inline constexpr char kEpochStop[] = "epoch_stop";
inline constexpr char kEvalStart[] = "eval_start";
inline constexpr char kEvalStop[] = "eval_stop";
inline constexpr char kEvalAccuracy[] = "eval_accuracy";
inline constexpr char kWeightsInitialization[] = "weights_initialization";
inline constexpr char kTrainSamples[] = "train_samples";
inline constexpr char kEvalSamples[] = "eval_samples";
inline constexpr char kTrainedSamples[] = "trained_samples";
// Common hyperparameters.
inline constexpr char kSeed[] = "seed";
inline constexpr char kGlobalBatchSize[] = "global_batch_size";
inline constexpr char kGradientAccumulationSteps[] = "gradient_accumulation_steps";
inline constexpr char kOptName[] = "opt_name";
inline constexpr char kModelBnSpan[] = "model_bn_span";
inline constexpr char kMaxSequenceLength[] = "max_sequence_length";
// ResNet, LARS.
inline constexpr char kLarsOptBaseLearningRate[] = "lars_opt_base_learning_rate";
inline constexpr char kLarsOptEndLearningRate[] = "lars_opt_end_learning_rate";
inline constexpr char kLarsOptLrDecayPolyPower[] = "lars_opt_learning_rate_decay_poly_power";
inline constexpr char kLarsOptLrDecaySteps[] = "lars_opt_learning_rate_decay_steps";
inline constexpr char kLarsEpsilon[] = "lars_epsilon";
inline constexpr char kLarsOptLrWarmupEpochs[] = "lars_opt_learning_rate_warmup_epochs";
inline constexpr char kLarsOptMomentum[] = "lars_opt_momentum";
inline constexpr char kLarsOptWeightDecay[] = "lars_opt_weight_decay";
// ResNet, SGD with momentum.
inline constexpr char kSgdOptBaseLearningRate[] = "sgd_opt_base_learning_rate";
inline constexpr char kSgdOptEndLearningRate[] = "sgd_opt_end_learning_rate";
inline constexpr char kSgdOptLrDecayPolyPower[] = "sgd_opt_learning_rate_decay_poly_power";
inline constexpr char kSgdOptLrDecaySteps[] = "sgd_opt_learning_rate_decay_steps";
inline constexpr char kSgdOptWeightDecay[] = "sgd_opt_weight_decay";
inline constexpr char kSgdOptMomentum[] = "sgd_opt_momentum";
inline constexpr char kOptLrWarmupEpochs[] = "opt_learning_rate_warmup_epochs";
// BERT, LAMB ("opt_epsilon" up to ruleset 1.1.0, "opt_lamb_epsilon" later).
inline constexpr char kOptBaseLearningRate[] = "opt_base_learning_rate";
inline constexpr char kOptEpsilon[] = "opt_epsilon";
inline constexpr char kOptLambEpsilon[] = "opt_lamb_epsilon";
inline constexpr char kOptLrTrainingSteps[] = "opt_learning_rate_training_steps";
inline constexpr char kOptLrWarmupSteps[] = "opt_learning_rate_warmup_steps";
inline constexpr char kNumWarmupSteps[] = "num_warmup_steps";
inline constexpr char kStartWarmupStep[] = "start_warmup_step";
inline constexpr char kOptLambBeta1[] = "opt_lamb_beta_1";
inline constexpr char kOptLambBeta2[] = "opt_lamb_beta_2";
inline constexpr char kOptLambWeightDecayRate[] = "opt_lamb_weight_decay_rate";
inline constexpr char kOptLambLrDecayPolyPower[] = "opt_lamb_learning_rate_decay_poly_power";
// Generic optimizer keys (EfficientNet's RMSprop; not checked by any MLPerf ruleset).
inline constexpr char kOptWeightDecay[] = "opt_weight_decay";
inline constexpr char kOptLrDecayFactor[] = "opt_learning_rate_decay_factor";
inline constexpr char kOptLrDecayEpochs[] = "opt_learning_rate_decay_epochs";
inline constexpr char kOptRmspropDecay[] = "opt_rmsprop_decay";
inline constexpr char kOptRmspropMomentum[] = "opt_rmsprop_momentum";
inline constexpr char kOptRmspropEpsilon[] = "opt_rmsprop_epsilon";
inline constexpr char kLabelSmoothing[] = "label_smoothing";
// EfficientNet-B4's rules of our own (docs/rules/efficientnet_b4.md; mllog constants where
// the official package has one: model_eval_ema_factor).
inline constexpr char kModelEvalEmaFactor[] = "model_eval_ema_factor";
inline constexpr char kOptWeightDecaySkipNorm[] = "opt_weight_decay_skip_norm";
inline constexpr char kDropoutRate[] = "dropout_rate";
inline constexpr char kStochasticDepthRate[] = "stochastic_depth_rate";
inline constexpr char kModelVariant[] = "model_variant";
inline constexpr char kNormType[] = "norm_type";
// "full" | "mini": which of the rules' two fixed recipes the log follows (logged first of them).
inline constexpr char kBenchmarkScale[] = "benchmark_scale";
// Batch norm's running statistics: running = m x running + (1 - m) x batch (torchvision: 0.9).
inline constexpr char kModelBnMomentum[] = "model_bn_momentum";
// The classifier weight's init range U(+-1/sqrt(value)) (torchvision: the number of classes).
inline constexpr char kModelClassifierInitFanOut[] = "model_classifier_init_fan_out";
}  // namespace keys

// Metadata keys and values.
namespace meta {
inline constexpr char kFile[] = "file";
inline constexpr char kLineno[] = "lineno";
inline constexpr char kEpochNum[] = "epoch_num";
inline constexpr char kFirstEpochNum[] = "first_epoch_num";
inline constexpr char kEpochCount[] = "epoch_count";
inline constexpr char kSamplesCount[] = "samples_count";
inline constexpr char kStatus[] = "status";
inline constexpr char kTensor[] = "tensor";
inline constexpr char kStatusSuccess[] = "success";
inline constexpr char kStatusAborted[] = "aborted";
}  // namespace meta

enum class EventType { kPointInTime, kIntervalStart, kIntervalEnd };
const char* toString(EventType type);  // "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"

// Keys that must appear at most once per log: submission_*, seed, batch sizes, sample counts,
// model_bn_span, max_sequence_length, BERT warmup steps and every opt_* / lars_* / sgd_* key.
bool isOnceKey(std::string_view key);

// Python json.dumps(obj) of a JSON value: ", " and ": " separators, ASCII-escaped strings.
std::string dumpPythonStyle(const Json& value);

struct MlLoggerOptions {
  std::filesystem::path path;    // the log file; empty: no file (echo only)
  bool append = false;           // append to an existing file instead of truncating it
  int rank = 0;                  // only rank 0 writes; every other rank's logger is a no-op
  std::ostream* echo = nullptr;  // also copy each line here (e.g. &std::cout)
  bool fsync_each_line = false;  // fsync(2) after each flush: survives a host crash too
  bool print_warnings = true;    // warnings also go to stderr (they are always kept, see below)
  std::string ns;                // "namespace" field; MLPerf reference loggers leave it ""
  // Milliseconds since the Unix epoch; default: std::chrono::system_clock. Tests inject one.
  std::function<std::int64_t()> clock;
};

class MlLogger {
 public:
  explicit MlLogger(MlLoggerOptions options);
  ~MlLogger();
  MlLogger(const MlLogger&) = delete;
  MlLogger& operator=(const MlLogger&) = delete;

  // POINT_IN_TIME. `metadata` holds event extras (epoch_num, status, tensor...); file and
  // lineno of the caller are added in front of them.
  void event(std::string_view key, const Json& value = nullptr,
             const Json& metadata = Json::object(),
             std::source_location where = std::source_location::current());
  // INTERVAL_START / INTERVAL_END.
  void start(std::string_view key, const Json& value = nullptr,
             const Json& metadata = Json::object(),
             std::source_location where = std::source_location::current());
  void end(std::string_view key, const Json& value = nullptr, const Json& metadata = Json::object(),
           std::source_location where = std::source_location::current());

  bool enabled() const { return enabled_; }  // false on ranks other than 0
  int rank() const { return options_.rank; }
  const std::filesystem::path& path() const { return options_.path; }
  std::vector<std::string> warnings() const;  // every warning so far, in order
  std::int64_t linesWritten() const;

  // The full line (without newline) for one event; the logger writes exactly this.
  static std::string formatLine(std::string_view ns, std::int64_t timeMs, EventType type,
                                std::string_view key, const Json& value, const Json& metadata,
                                const std::source_location& where);
  // metadata.file for a call site: path relative to the repository root, else the basename.
  static std::string callSiteFile(const std::source_location& where);

 private:
  void emit(EventType type, std::string_view key, const Json& value, const Json& metadata,
            const std::source_location& where);
  void warn(std::string message);

  MlLoggerOptions options_;
  bool enabled_ = false;
  std::FILE* file_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Json> once_values_;        // once-key -> first value
  std::unordered_map<std::string, std::string> once_sites_;  // once-key -> "file:line"
  std::vector<std::string> warnings_;
  std::int64_t lines_ = 0;
};

}  // namespace ipu::harness
