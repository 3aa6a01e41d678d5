// One timed MLPerf run of run_benchmark: the logger on result_<i>.txt and the event sequence
//
//   cache_clear, init_start, submission_*, seed, hyperparameters, (compile, weight init),
//   weights_initialization per tensor, init_stop, run_start, (load the data set),
//   { block_start, { epoch_start, steps, epoch_stop }..., block_stop, eval_start, eval_stop,
//     eval_accuracy }..., run_stop {success | aborted}
//
// under an epoch cadence (ResNet-50). Under a samples cadence (BERT) a block is a number of
// samples trained from the task's epochs as one stream, without epoch_start/stop, and every
// epoch_num (block_start's first_epoch_num and epoch_count, eval_*, run_stop) counts samples.
// The model, data and metric are the benchmark's (BenchmarkEntry::build and ::data): the loop
// knows a training task, not a classifier.
//
// run_stop is "success" as soon as eval_accuracy reaches the target, "aborted" when the epoch
// budget is spent, training diverges (a NaN/Inf loss), SIGINT/SIGTERM arrives, or anything
// throws (e.g. more corrupt validation images than max_corrupt_eval_fraction allows). Every
// path ends with run_stop, so every log is complete and flushed, unless the log itself cannot be
// written (then the outcome says so). A run that trained to its end logs ipu_weights_crc32 (our
// key: CRC-32 of the final weights) just before run_stop, so that two runs can be compared bit
// for bit from their logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "datasets/error.h"
#include "datasets/image_folder.h"
#include "harness/benchmark_registry.h"
#include "harness/mlperf_events.h"
#include "harness/pod_presets.h"
#include "harness/progress.h"
#include "harness/schedule.h"
#include "harness/task.h"
#include "harness/trainer.h"

namespace ipu::harness {

// run_benchmark's own --config keys (not MLPerf hyperparameters; not logged as such).
struct RunSettings {
  std::int64_t train_samples = 0;  // "mini_train_samples": training images per epoch, 0 = all
  std::int64_t eval_samples = 0;   // "mini_eval_samples": evaluation images, 0 = all
  double target_accuracy = 0;      // "mini_target_accuracy": run_stop success at or above it
  bool augment_flip = false;       // "mini_augment_flip": random horizontal flips in training
  int augment_padding = 0;         // "mini_augment_padding": random translation, in pixels
  int eval_period = 4;             // "eval_period": epochs between evaluations (closed: 4)
  int eval_offset = 0;             // "eval_offset": evaluate epoch e when e % period == offset
  // (makePlan turns the two into the run's EvalCadence.)
  // "max_corrupt_eval_fraction" (--on-corrupt-image skip): the share of the validation images
  // that may be corrupt (skipped, not scored) before the run is aborted. 0.001: 50 of
  // ImageNet's 50,000; the accuracy is over the images scored, and the log names the others.
  double max_corrupt_eval_fraction = 0.001;
  // BERT mini, open division: "mini_eval_interval_samples" (0: the mini rule,
  // bertMiniEvalIntervalSamples) and the encoder's shape, "mini_bert_layers", "mini_bert_hidden",
  // "mini_bert_heads", "mini_bert_ffn", "mini_bert_vocab" (0: the closed mini model,
  // harness/bert_task.h bertMiniConfig).
  std::int64_t eval_interval_samples = 0;
  int bert_layers = 0, bert_hidden = 0, bert_heads = 0, bert_ffn = 0, bert_vocab = 0;
};

// Everything a run needs; built once by run_benchmark after every check passed.
struct RunPlan {
  const BenchmarkEntry* entry = nullptr;
  PodPreset preset;      // with the user's --config applied
  Json hyperparameters;  // logged by logHyperparameters, in order
  SubmissionInfo submission;
  ModelRequest model;
  TrainerOptions trainer;  // batch, engine mode, memory check (the seed is set per run)
  LrSchedule lr;
  EvalCadence cadence;
  RunSettings settings;
  std::filesystem::path data_dir;
  // Full scale: the ImageNet train/ and val/ folders as makePlan scanned them (val labelled by
  // train's classes), how a corrupt JPEG is handled, and the decoding threads.
  std::shared_ptr<const datasets::ImageFolderIndex> imagenet_train, imagenet_val;
  datasets::CorruptPolicy corrupt_policy = datasets::CorruptPolicy::kFail;
  int loader_threads = 2;
  int max_epochs = 1;            // the budget of an epoch cadence
  std::int64_t max_samples = 0;  // the budget of a samples cadence
  int rank = 0;                  // MPI rank (mpirun): only rank 0 writes the log
};

// What the run's TaskData is made from (the run's seed; the plan's data, threads and policy).
DataRequest dataRequestOf(const RunPlan& plan, std::uint64_t seed);

// The Fashion-MNIST files of `dir` (the .gz preferred, as loadFashionMnist does); empty when one
// is missing, with `missing` naming it.
std::vector<std::filesystem::path> fashionMnistFiles(const std::filesystem::path& dir,
                                                     std::string* missing = nullptr);

// CRC-32 (zlib) of the model's variables (Trainer::modelVariables, in graph order, read as f32),
// as 8 hex digits: the weights, optimizer state and batch norm statistics, bit for bit, the
// same figure for a pipelined run and an unpipelined one holding the same values.
std::string variablesCrc32(const Trainer& trainer);

enum class RunStatus { kSuccess, kTargetNotReached, kDiverged, kInterrupted, kFailed };
const char* toString(RunStatus status);
const char* signalName(int sig);  // SIGINT, SIGTERM

// What a run's report page draws: the training loss after every step and each evaluation, with
// the host time since run_start and the program runs done (the cost model prices those).
struct RunCurve {
  struct Loss {
    std::int64_t samples = 0;
    double seconds = 0;
    float loss = 0;
  };
  struct Eval {
    std::int64_t samples = 0;
    double seconds = 0;
    double accuracy = 0;
    std::int64_t train_steps = 0, eval_runs = 0;
  };
  std::vector<Loss> losses;
  std::vector<Eval> evals;
};

struct RunOutcome {
  RunStatus status = RunStatus::kFailed;
  std::uint64_t seed = 0;
  int epochs = 0;                  // epochs trained or begun (the last may be partial when aborted)
  std::optional<double> accuracy;  // last eval_accuracy
  std::int64_t run_start_ms = 0, run_stop_ms = 0;  // as logged
  double init_seconds = 0;
  std::int64_t train_steps = 0;  // training program runs (weight updates) done
  std::int64_t eval_runs = 0;    // inference program runs (evaluation batches) done
  std::string message;           // why it aborted
  std::filesystem::path log;
  bool log_complete = true;  // false: the log could not be written to its end (full disk)
  RunCurve curve;
  bool success() const { return status == RunStatus::kSuccess; }
  double minutes() const { return static_cast<double>(run_stop_ms - run_start_ms) / 60000.0; }
};

// Runs one run and writes its complete log to `logPath`. `stopSignal` (the number of the
// SIGINT/SIGTERM received, 0: none) is polled between steps and evaluation chunks. Never throws: a
// log that cannot be written (full disk, quota) ends the run kFailed with log_complete false and
// the reason in `message`.
RunOutcome executeRun(const RunPlan& plan, const std::filesystem::path& logPath, int runIndex,
                      int runCount, std::uint64_t seed, const std::atomic<int>& stopSignal,
                      ProgressLine& progress);

}  // namespace ipu::harness
