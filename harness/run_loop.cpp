#include "harness/run_loop.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <memory>

namespace ipu::harness {
namespace {

namespace fs = std::filesystem;

// Thrown from the trainer's per-step callback: the only way to leave trainEpoch between steps.
struct Interrupted {};
constexpr char kAbortReasonKey[] = "run_abort_reason";  // not an MLPerf key: ours
struct Diverged {
  std::int64_t step;
  float loss;
};

std::int64_t nowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Drops the page cache of the data files: the closed rules want data to start on durable
// storage, and this needs no root (unlike /proc/sys/vm/drop_caches). Advisory: errors ignored.
void dropFileCaches(const std::vector<fs::path>& files) {
  for (const fs::path& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// MLPerf's epoch_num fields are ints; a samples cadence counts samples in them.
int epochNum(std::int64_t n) {
  if (n < 0 || n > std::numeric_limits<int>::max())
    throw std::out_of_range(fmt::format("epoch_num {} does not fit the log's int field", n));
  return static_cast<int>(n);
}

// Tracks which intervals are open so that any exit closes them in order and ends the log with
// run_stop (the checker requires init_stop, run_start and run_stop exactly once). Numbers are
// epochs, or samples under a samples cadence.
class LogState {
 public:
  explicit LogState(MlLogger& log) : log_(log) {}
  void initStop() {
    logInitStop(log_);
    init_stopped_ = true;
  }
  void runStart() {
    logRunStart(log_);
    run_started_ = true;
  }
  // The run's first block: an abort before it started (during the compile, the weight init or
  // the data load) still opens and closes it, as the checker requires at least one block.
  void setFirstBlock(const TrainBlock& b) { first_block_ = b; }
  void blockStart(const TrainBlock& b) {
    logBlockStart(log_, epochNum(b.first), epochNum(b.count));
    block_ = epochNum(b.first);
    block_open_ = any_block_ = true;
  }
  void blockStop() {
    logBlockStop(log_, block_);
    block_open_ = false;
  }
  void epochStart(int e) {
    logEpochStart(log_, e);
    epoch_ = e;
    last_epoch_ = e;
  }
  void epochStop() {
    logEpochStop(log_, epoch_);
    epoch_ = 0;
  }
  // Samples cadence: the samples trained so far (run_stop's epoch_num).
  void samplesTrained(std::int64_t n) { last_epoch_ = epochNum(n); }
  // `reason` (aborted runs): logged under kAbortReasonKey just before run_stop. The checker
  // skips keys it does not know, so the log says why without breaking compliance.
  void runStop(bool success, const std::string& reason = "") {
    if (!init_stopped_) initStop();
    if (!run_started_) runStart();
    if (!any_block_) blockStart(first_block_);
    if (eval_open_) evalStop();
    if (epoch_ != 0) epochStop();
    if (block_open_) blockStop();
    if (pending_eval_samples_ >= 0) evalSamples(pending_eval_samples_, last_epoch_);
    if (!success && !reason.empty()) log_.event(kAbortReasonKey, reason);
    logRunStop(log_, success, last_epoch_);
  }
  int lastEpoch() const { return last_epoch_; }
  // eval_samples, when corrupt validation images may be skipped, is what the first evaluation
  // scored: logged then (the checker wants it once, anywhere), or at run_stop as the folder's
  // count if no evaluation came. A later evaluation scoring another number aborts the run.
  void deferEvalSamples(std::int64_t folderCount) { pending_eval_samples_ = folderCount; }
  bool evalSamplesDeferred() const { return pending_eval_samples_ >= 0 || eval_samples_ >= 0; }
  void evalSamples(std::int64_t scored, int epoch) {
    if (eval_samples_ < 0) {
      log_.event(keys::kEvalSamples, scored);
      eval_samples_ = scored;
      pending_eval_samples_ = -1;
    } else if (scored != eval_samples_) {
      throw std::runtime_error(fmt::format(
          "evaluation after epoch {} scored {} validation images, an earlier one {}: the "
          "validation set changed during the run",
          epoch, scored, eval_samples_));
    }
  }
  void evalStart(int epoch) {
    logEvalStart(log_, epoch);
    eval_ = epoch;
    eval_open_ = true;
  }
  void evalStop() {
    logEvalStop(log_, eval_);
    eval_open_ = false;
  }

 private:
  MlLogger& log_;
  bool init_stopped_ = false, run_started_ = false, any_block_ = false;
  bool block_open_ = false, eval_open_ = false;
  TrainBlock first_block_;
  int block_ = 0, epoch_ = 0, last_epoch_ = 0, eval_ = 0;
  std::int64_t pending_eval_samples_ = -1, eval_samples_ = -1;
};

}  // namespace

DataRequest dataRequestOf(const RunPlan& plan, std::uint64_t seed) {
  DataRequest r;
  r.data_dir = plan.data_dir;
  r.imagenet_train = plan.imagenet_train;
  r.imagenet_val = plan.imagenet_val;
  r.train_samples = plan.settings.train_samples;
  r.eval_samples = plan.settings.eval_samples;
  r.seed = seed;
  r.loader_threads = plan.loader_threads;
  r.corrupt_policy = plan.corrupt_policy;
  r.augment = plan.trainer.augment;
  r.vocab_size = plan.model.text.vocab;
  r.per_sequence = plan.submission.division == "open";
  return r;
}

std::vector<fs::path> fashionMnistFiles(const fs::path& dir, std::string* missing) {
  std::vector<fs::path> files;
  for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::error_code ec;
    const fs::path gz = dir / (std::string(stem) + ".gz"), plain = dir / stem;
    if (fs::is_regular_file(gz, ec)) {
      files.push_back(gz);
    } else if (fs::is_regular_file(plain, ec)) {
      files.push_back(plain);
    } else {
      if (missing != nullptr) *missing = gz.string();
      return {};
    }
  }
  return files;
}

// Over the model's variables by name (as f32 values), so a pipelined run and an unpipelined
// one of the same global batch can be compared: their programs hold different extra variables.
std::string variablesCrc32(const Trainer& trainer) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const std::string& name : trainer.modelVariables()) {
    const std::vector<float> v = trainer.readVariable(name);
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(v.data()), v.size() * sizeof(float));
  }
  return fmt::format("{:08x}", crc);
}

// The placement of a pipelined (or recomputed) run: custom keys the checker accepts.
static void logPipelinePlacement(MlLogger& log, const TrainerPipeline& p,
                                 const pipeline::PipelinedExecutable* pe) {
  if (!pe && !p.recompute) return;
  log.event("ipu_pipeline_ipus_per_replica", pe ? pe->ipus : 1);
  log.event("ipu_pipeline_splits", fmt::format("{}", fmt::join(p.splits, ",")));
  log.event("ipu_pipeline_recompute", p.recompute);
  if (!pe) return;
  log.event("ipu_pipeline_schedule", std::string(pipeline::scheduleName(p.schedule)));
  log.event("ipu_pipeline_stage_ipus", fmt::format("{}", fmt::join(pe->stageIpu, ",")));
  for (const pipeline::IpuProgram& ipu : pe->programs)
    log.event("ipu_pipeline_ipu_peak_tile_bytes", ipu.peakTileBytes,
              Json{{"ipu", ipu.ipu},
                   {"tile", ipu.worstTile},
                   {"stash_bytes", ipu.stashBytes},
                   {"stages", ipu.stages}});
  log.event("ipu_pipeline_inter_ipu_bytes_per_micro_batch", pe->interIpuBytesPerMicroBatch());
}

const char* signalName(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

const char* toString(RunStatus status) {
  switch (status) {
    case RunStatus::kSuccess:
      return "success";
    case RunStatus::kTargetNotReached:
      return "aborted (epoch budget spent before the target)";
    case RunStatus::kDiverged:
      return "aborted (training diverged: NaN/Inf loss)";
    case RunStatus::kInterrupted:
      return "aborted (interrupted by a signal)";
    case RunStatus::kFailed:
      return "aborted (error)";
  }
  return "?";
}

RunOutcome executeRun(const RunPlan& plan, const fs::path& logPath, int runIndex, int runCount,
                      std::uint64_t seed, const std::atomic<int>& stopSignal,
                      ProgressLine& progress) {
  RunOutcome out;
  out.seed = seed;
  out.log = logPath;
  // The logger's clock, remembered so that time-to-train is exactly what the log says.
  auto lastMs = std::make_shared<std::int64_t>(0);
  MlLoggerOptions lo;
  lo.path = logPath;
  lo.rank = plan.rank;
  lo.clock = [lastMs] { return *lastMs = nowMs(); };
  std::unique_ptr<MlLogger> logger;
  try {
    logger = std::make_unique<MlLogger>(lo);
  } catch (const std::exception& e) {
    out.status = RunStatus::kFailed;
    out.message = e.what();
    out.log_complete = false;
    return out;
  }
  MlLogger& log = *logger;
  LogState state(log);
  // Every path ends here. Ending the log may itself fail (full disk): that is reported in the
  // outcome, never thrown, so the caller always learns what happened to this run.
  const auto stop = [&](bool success, const std::string& reason) {
    try {
      state.runStop(success, reason);
    } catch (const std::exception& e) {
      out.log_complete = false;
      if (out.status != RunStatus::kFailed) {
        out.status = RunStatus::kFailed;
        out.message = e.what();
      } else {
        out.message += fmt::format("; then: {}", e.what());
      }
    }
  };

  ProgressState ps;
  ps.run = runIndex + 1;
  ps.runs = runCount;
  ps.max_epochs = plan.max_epochs;
  ps.phase = "init";
  progress.update(ps, true);

  const auto initT0 = std::chrono::steady_clock::now();
  try {
    const bool bySamples = plan.cadence.unit == ProgressUnit::kSamples;
    const std::vector<TrainBlock> blocks =
        plan.cadence.blocks(bySamples ? plan.max_samples : plan.max_epochs);
    state.setFirstBlock(blocks.front());
    if (plan.imagenet_train) {
      std::vector<fs::path> files;
      for (const auto* index : {plan.imagenet_train.get(), plan.imagenet_val.get()})
        for (const auto& sample : index->samples) files.push_back(sample.path);
      dropFileCaches(files);
    } else if (plan.preset.benchmark == Benchmark::kBertLarge) {
      std::vector<fs::path> files;  // the shards of train/ and eval/
      std::error_code ec;
      for (const char* split : {"train", "eval"})
        for (const auto& f : fs::directory_iterator(plan.data_dir / split, ec))
          files.push_back(f.path());
      dropFileCaches(files);
    } else {
      dropFileCaches(fashionMnistFiles(plan.data_dir));
    }
    logCacheClear(log);
    logInitStart(log);
    logSubmissionHeader(log, plan.submission);
    log.event(keys::kSeed, seed);  // the one call site of the seed, for every run
    // Skipped validation images are not scored: eval_samples then counts those scored.
    const bool evalMaySkip =
        plan.imagenet_val && plan.corrupt_policy == datasets::CorruptPolicy::kSkip;
    if (evalMaySkip) {
      Json hp = plan.hyperparameters;
      hp.erase(keys::kEvalSamples);
      logHyperparameters(log, hp);
      state.deferEvalSamples(static_cast<std::int64_t>(plan.imagenet_val->samples.size()));
      log.event("ipu_max_corrupt_eval_fraction", plan.settings.max_corrupt_eval_fraction);
    } else {
      logHyperparameters(log, plan.hyperparameters);
    }
    // Custom keys (the checker accepts keys it does not know): the numeric policy in its
    // canonical string form, and its loss scaling.
    log.event("ipu_precision", plan.model.precision.toString());
    log.event("ipu_loss_scaling", precision::toString(plan.model.precision.lossScaling));
    if (const datasets::SmallImageAugment& aug = plan.trainer.augment; aug.enabled()) {
      log.event("ipu_train_augmentation",
                fmt::format("{}random translation by up to {} px",
                            aug.flip ? "random horizontal flip, " : "", aug.padding));
    }

    // Init: build and compile both graphs, write the initial weights.
    const ModelInstance model = plan.entry->build(plan.model);
    TrainerOptions to = plan.trainer;
    to.seed = seed;
    Trainer trainer(model.train, model.eval, to);
    if (stopSignal.load() != 0) throw Interrupted{};
    trainer.initialise(model.init(seed));
    logPipelinePlacement(log, plan.trainer.pipeline, trainer.pipelinedExecutable());
    logWeightsInitialization(log, model.weight_tensor_names);
    state.initStop();
    out.init_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - initT0).count();
    if (stopSignal.load() != 0) throw Interrupted{};

    state.runStart();
    out.run_start_ms = *lastMs;
    const auto runT0 = std::chrono::steady_clock::now();
    const auto sinceRunStart = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - runT0).count();
    };
    // The clock runs from here: reading the data set is part of the time to train.
    const std::unique_ptr<TaskData> data = plan.entry->data(dataRequestOf(plan, seed));
    const std::unique_ptr<Metric> metric = data->metric();
    if (stopSignal.load() != 0) throw Interrupted{};
    // Samples per step over every replica (and process): R x A x micro-batch.
    const std::int64_t batch = trainer.globalBatch();
    const BatchGeometry geometry = trainer.geometry();
    const std::int64_t stepsPerEpoch = data->trainSamples() / batch;
    if (stepsPerEpoch < 1) {
      throw std::invalid_argument(
          fmt::format("{} training samples per epoch is less than one global batch of {}",
                      data->trainSamples(), batch));
    }
    ps.steps_per_epoch = stepsPerEpoch;
    const StepClock clock{stepsPerEpoch, batch};
    const std::int64_t totalSteps =
        bySamples ? (plan.max_samples + batch - 1) / batch : stepsPerEpoch * plan.max_epochs;
    const auto lr = [&](std::int64_t step) { return static_cast<float>(plan.lr.at(step, clock)); };

    // Trains from `source` (`steps` steps, 0: until it runs dry), with the progress line and
    // the divergence and SIGINT checks after every step; then logs what the epoch (or block)
    // reported: corrupt images replaced, the loss scale.
    const auto trainFrom = [&](BatchSource& source, std::int64_t steps, int epochNumber) {
      const std::int64_t firstStep = trainer.stepsDone();
      const auto t0 = std::chrono::steady_clock::now();
      const auto onStep = [&](std::int64_t step, float loss) {
        out.train_steps = trainer.stepsDone();
        if (!std::isfinite(loss)) throw Diverged{step, loss};
        if (stopSignal.load() != 0) throw Interrupted{};
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::int64_t done = step - firstStep;
        ps.step = bySamples ? step : done;
        ps.loss = loss;
        out.curve.losses.push_back({trainer.stepsDone() * batch, sinceRunStart(), loss});
        ps.images_per_second = secs > 0 ? static_cast<double>(done * batch) / secs : 0;
        ps.eta_seconds =
            ps.images_per_second > 0
                ? static_cast<double>((totalSteps - step) * batch) / ps.images_per_second
                : -1;
        progress.update(ps);
      };
      const EpochStats st = trainer.train(source, steps, lr, onStep);
      if (!st.corruptFiles.empty()) {
        // --on-corrupt-image skip: each replaced by the next image of the epoch, and named.
        log.event("ipu_corrupt_images_skipped", static_cast<std::int64_t>(st.corruptFiles.size()),
                  Json{{"epoch_num", epochNumber}, {"files", st.corruptFiles}});
        if (plan.rank == 0)
          fmt::print(stderr, "epoch {}: {} corrupt image(s) skipped, first: {}\n", epochNumber,
                     st.corruptFiles.size(), st.corruptFiles.front());
      }
      if (trainer.lossScaler().config().mode != precision::LossScalingMode::None) {
        // Per epoch: the scale now in use, and the steps skipped / overflows so far.
        const precision::LossScaler& ls = trainer.lossScaler();
        Json md{{"epoch_num", epochNumber}};
        log.event("ipu_loss_scale", ls.scale(), md);
        log.event("ipu_skipped_steps", ls.skippedSteps(), md);
        log.event("ipu_overflow_events", ls.overflowEvents(), md);
      }
    };
    // A samples cadence trains the task's epochs as one stream (epoch k + 1 after k runs dry).
    ConcatenatedSource stream([&](int k) {
      out.epochs = k + 1;
      ps.epoch = k + 1;
      return data->trainEpoch(k + 1, geometry);
    });

    bool reached = false;
    for (const TrainBlock& block : blocks) {
      state.blockStart(block);
      ps.phase = "train";
      if (bySamples) {
        // Whole steps until the block's samples are trained.
        const std::int64_t endStep = (block.last() + 1 + batch - 1) / batch;
        trainFrom(stream, endStep - trainer.stepsDone(), out.epochs);
        state.samplesTrained(trainer.stepsDone() * batch);
      } else {
        for (int e = static_cast<int>(block.first); e <= block.last(); ++e) {
          state.epochStart(e);
          out.epochs = e;
          ps.epoch = e;
          ps.phase = "train";
          const std::unique_ptr<BatchSource> epoch = data->trainEpoch(e, geometry);
          trainFrom(*epoch, 0, e);
          state.epochStop();
        }
      }
      state.blockStop();
      // The evaluation's epoch_num: the epoch that ends the block, or the samples trained.
      const int epoch = bySamples ? state.lastEpoch() : static_cast<int>(block.last());
      ps.phase = "eval";
      progress.update(ps, true);
      state.evalStart(epoch);
      // Checked after every evaluation batch, so that a signal is honoured within a batch.
      const auto onBatch = [&] {
        if (stopSignal.load() != 0) throw Interrupted{};
      };
      const std::string context =
          fmt::format("evaluation after {} {}", bySamples ? "sample" : "epoch", epoch);
      const std::unique_ptr<EvalSource> source = data->evaluation(plan.trainer.batch, context);
      const EvalResult r = trainer.evaluate(*source, *metric, onBatch);
      const std::int64_t scored = r.rows;
      if (state.evalSamplesDeferred()) state.evalSamples(scored, epoch);
      if (r.skipped > 0) {
        // --on-corrupt-image skip: not scored, nothing in their place; counted and named.
        log.event("ipu_corrupt_eval_images_skipped", r.skipped,
                  Json{{"epoch_num", epoch}, {"files", r.skippedFiles}});
        if (plan.rank == 0)
          fmt::print(stderr,
                     "{}: {} of {} validation image(s) corrupt, skipped and not scored (the "
                     "accuracy is over the other {}), first: {}\n",
                     context, r.skipped, r.skipped + scored, scored, r.skippedFiles.front());
        const std::int64_t total = r.skipped + scored;
        const double limit = plan.settings.max_corrupt_eval_fraction;
        if (static_cast<double>(r.skipped) > limit * static_cast<double>(total)) {
          throw std::runtime_error(fmt::format(
              "{}: {} of {} validation images are corrupt ({:.3g}%), more than the limit of "
              "{:.3g}% (max_corrupt_eval_fraction): an accuracy over the rest would not be "
              "comparable. First: {}. Replace or remove the files (the log names them all), "
              "or raise max_corrupt_eval_fraction with --config",
              context, r.skipped, total, 100.0 * static_cast<double>(r.skipped) / total,
              100.0 * limit, r.skippedFiles.front()));
        }
      }
      out.eval_runs = trainer.evalRunsDone();
      if (r.metric.denominator <= 0) throw std::runtime_error("the evaluation scored no sample");
      const double accuracy = r.metric.value();
      state.evalStop();
      logEvalAccuracy(log, accuracy, epoch);
      out.accuracy = accuracy;
      ps.last_accuracy = accuracy;
      out.curve.evals.push_back({trainer.stepsDone() * batch, sinceRunStart(), accuracy,
                                 trainer.stepsDone(), trainer.evalRunsDone()});
      if (accuracy >= plan.settings.target_accuracy) {
        reached = true;
        break;
      }
    }
    out.status = reached ? RunStatus::kSuccess : RunStatus::kTargetNotReached;
    if (!reached) {
      out.message = bySamples ? fmt::format("the target accuracy {} was not reached in {} samples",
                                            plan.settings.target_accuracy, plan.max_samples)
                              : fmt::format("the target accuracy {} was not reached in {} epoch(s)",
                                            plan.settings.target_accuracy, plan.max_epochs);
    }
    log.event("ipu_weights_crc32", variablesCrc32(trainer),
              Json{{"epoch_num", out.epochs}, {"train_steps", out.train_steps}});
    stop(reached, out.message);
  } catch (const Interrupted&) {
    out.status = RunStatus::kInterrupted;
    out.message = fmt::format("interrupted ({})", signalName(stopSignal.load()));
    stop(false, out.message);
  } catch (const Diverged& d) {
    out.status = RunStatus::kDiverged;
    out.message = fmt::format("training diverged: loss {} at step {} of epoch {}", d.loss, d.step,
                              state.lastEpoch());
    stop(false, out.message);
  } catch (const std::exception& e) {
    out.status = RunStatus::kFailed;
    out.message = e.what();
    stop(false, out.message);
  }
  out.run_stop_ms = *lastMs;
  if (out.run_start_ms == 0) out.run_start_ms = out.run_stop_ms;
  progress.clear();
  return out;
}

}  // namespace ipu::harness
