#include "harness/run_loop.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>

#include "datasets/fashion_mnist.h"

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

// A run's data, loaded after run_start. Mini: Fashion-MNIST in memory. Full: the ImageNet
// folders, decoded and augmented on the fly (train: random-resized crop + flip; val: resize
// 256, center crop 224).
struct RunData {
  datasets::ImageDataset train, eval;
  datasets::Normalization norm;
  std::shared_ptr<const datasets::Source> trainSource, evalSource;
  std::int64_t trainCount = 0, evalCount = 0;
};

RunData loadRunData(const RunPlan& plan) {
  RunData d;
  if (plan.imagenet_train) {
    datasets::ImageFolderOptions train;
    train.transform = datasets::ImageTransform::kTrain;
    datasets::ImageFolderOptions eval;
    eval.transform = datasets::ImageTransform::kEval;
    d.trainSource = std::make_shared<datasets::ImageFolderSource>(*plan.imagenet_train, train);
    d.evalSource = std::make_shared<datasets::ImageFolderSource>(*plan.imagenet_val, eval);
    d.trainCount = d.trainSource->size();
    d.evalCount = d.evalSource->size();
    return d;
  }
  d.train = datasets::loadFashionMnist(plan.data_dir, datasets::Split::kTrain);
  d.eval = datasets::loadFashionMnist(plan.data_dir, datasets::Split::kTest);
  d.norm = datasets::Normalization::fashionMnist();
  d.trainCount = plan.settings.train_samples > 0
                     ? std::min(plan.settings.train_samples, d.train.count)
                     : d.train.count;
  d.evalCount = plan.settings.eval_samples > 0 ? std::min(plan.settings.eval_samples, d.eval.count)
                                               : d.eval.count;
  return d;
}

// Tracks which intervals are open so that any exit closes them in order and ends the log with
// run_stop (the checker requires init_stop, run_start and run_stop exactly once).
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
  void setFirstBlock(const EpochBlock& b) { first_block_ = b; }
  void blockStart(const EpochBlock& b) {
    logBlockStart(log_, b.first_epoch, b.epoch_count);
    block_ = b.first_epoch;
    any_block_ = true;
  }
  void blockStop() {
    logBlockStop(log_, block_);
    block_ = 0;
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
  // `reason` (aborted runs): logged under kAbortReasonKey just before run_stop. The checker
  // skips keys it does not know, so the log says why without breaking compliance.
  void runStop(bool success, const std::string& reason = "") {
    if (!init_stopped_) initStop();
    if (!run_started_) runStart();
    if (!any_block_) blockStart(first_block_);
    if (eval_ != 0) evalStop();
    if (epoch_ != 0) epochStop();
    if (block_ != 0) blockStop();
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
  }
  void evalStop() {
    logEvalStop(log_, eval_);
    eval_ = 0;
  }

 private:
  MlLogger& log_;
  bool init_stopped_ = false, run_started_ = false, any_block_ = false;
  EpochBlock first_block_;
  int block_ = 0, epoch_ = 0, last_epoch_ = 0, eval_ = 0;
  std::int64_t pending_eval_samples_ = -1, eval_samples_ = -1;
};

}  // namespace

double LrSchedule::at(std::int64_t step, std::int64_t stepsPerEpoch) const {
  const double warmup = static_cast<double>(warmup_epochs) * static_cast<double>(stepsPerEpoch);
  const double decay = static_cast<double>(decay_epochs) * static_cast<double>(stepsPerEpoch);
  const double s = static_cast<double>(step);
  if (s < warmup) return base * (s + 1) / warmup;
  const double span = std::max(1.0, decay - warmup);
  const double p = std::clamp((s - warmup) / span, 0.0, 1.0);
  return (base - end) * std::pow(1.0 - p, power) + end;
}

std::vector<EpochBlock> evalBlocks(int totalEpochs, int period, int offset) {
  if (period == 4) return resnetEvalBlocks(totalEpochs, offset);
  if (totalEpochs < 1 || period < 1 || offset < 0) {
    throw std::invalid_argument(
        fmt::format("evalBlocks: need totalEpochs >= 1, period >= 1, offset >= 0, got {}, {}, {}",
                    totalEpochs, period, offset));
  }
  std::vector<EpochBlock> blocks;
  int first = 1;
  for (int e = 1; e <= totalEpochs; ++e) {
    if (e % period == offset % period || e == totalEpochs) {
      blocks.push_back({first, e - first + 1});
      first = e + 1;
    }
  }
  return blocks;
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

std::string variablesCrc32(const Engine& engine) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<std::byte> buf;
  for (const Tensor& t : engine.executable().graph.tensors()) {
    if (t.kind != TensorKind::Variable) continue;
    buf.resize(static_cast<size_t>(t.bytes()));
    engine.readTensor(t.id, buf.data(), buf.size());
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), buf.size());
  }
  return fmt::format("{:08x}", crc);
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
    const std::vector<EpochBlock> blocks =
        evalBlocks(plan.max_epochs, plan.settings.eval_period, plan.settings.eval_offset);
    state.setFirstBlock(blocks.front());
    if (plan.imagenet_train) {
      std::vector<fs::path> files;
      for (const auto* index : {plan.imagenet_train.get(), plan.imagenet_val.get()})
        for (const auto& sample : index->samples) files.push_back(sample.path);
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
    ClassifierTrainer trainer(model.train, model.eval, to);
    if (stopSignal.load() != 0) throw Interrupted{};
    trainer.initialise(model.init(seed));
    logWeightsInitialization(log, model.weight_tensor_names);
    state.initStop();
    out.init_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - initT0).count();
    if (stopSignal.load() != 0) throw Interrupted{};

    state.runStart();
    out.run_start_ms = *lastMs;
    // The clock runs from here: reading the data set is part of the time to train.
    RunData data = loadRunData(plan);
    if (stopSignal.load() != 0) throw Interrupted{};
    // Samples per step over every replica (and process): R x A x micro-batch.
    const std::int64_t batch = trainer.globalBatch();
    const std::int64_t stepsPerEpoch = data.trainCount / batch;
    if (stepsPerEpoch < 1) {
      throw std::invalid_argument(
          fmt::format("{} training samples per epoch is less than one global batch of {}",
                      data.trainCount, batch));
    }
    ps.steps_per_epoch = stepsPerEpoch;
    const std::int64_t totalSteps = stepsPerEpoch * plan.max_epochs;

    const auto lr = [&](std::int64_t step) {
      return static_cast<float>(plan.lr.at(step, stepsPerEpoch));
    };
    bool reached = false;
    for (const EpochBlock& block : blocks) {
      state.blockStart(block);
      for (int e = block.first_epoch; e <= block.last_epoch(); ++e) {
        state.epochStart(e);
        out.epochs = e;
        ps.epoch = e;
        ps.phase = "train";
        const std::int64_t firstStep = trainer.stepsDone();
        const auto epochT0 = std::chrono::steady_clock::now();
        const auto onStep = [&](std::int64_t step, float loss) {
          out.train_steps = trainer.stepsDone();
          if (!std::isfinite(loss)) throw Diverged{step, loss};
          if (stopSignal.load() != 0) throw Interrupted{};
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - epochT0).count();
          const std::int64_t inEpoch = step - firstStep;
          ps.step = inEpoch;
          ps.loss = loss;
          ps.images_per_second = secs > 0 ? static_cast<double>(inEpoch * batch) / secs : 0;
          ps.eta_seconds =
              ps.images_per_second > 0
                  ? static_cast<double>((totalSteps - step) * batch) / ps.images_per_second
                  : -1;
          progress.update(ps);
        };
        const EpochStats st =
            data.trainSource
                ? trainer.trainEpoch(data.trainSource, e, lr, data.trainCount, onStep,
                                     plan.loader_threads, plan.corrupt_policy)
                : trainer.trainEpoch(data.train, data.norm, e, lr, data.trainCount, onStep);
        if (!st.corruptFiles.empty()) {
          // --on-corrupt-image skip: each replaced by the next image of the epoch, and named.
          log.event("ipu_corrupt_images_skipped", static_cast<std::int64_t>(st.corruptFiles.size()),
                    Json{{"epoch_num", e}, {"files", st.corruptFiles}});
          if (plan.rank == 0)
            fmt::print(stderr, "epoch {}: {} corrupt image(s) skipped, first: {}\n", e,
                       st.corruptFiles.size(), st.corruptFiles.front());
        }
        if (trainer.lossScaler().config().mode != precision::LossScalingMode::None) {
          // Per epoch: the scale now in use, and the steps skipped / overflows so far.
          const precision::LossScaler& ls = trainer.lossScaler();
          Json md{{"epoch_num", e}};
          log.event("ipu_loss_scale", ls.scale(), md);
          log.event("ipu_skipped_steps", ls.skippedSteps(), md);
          log.event("ipu_overflow_events", ls.overflowEvents(), md);
        }
        state.epochStop();
      }
      state.blockStop();
      const int epoch = block.last_epoch();
      ps.phase = "eval";
      progress.update(ps, true);
      state.evalStart(epoch);
      // Checked after every evaluation batch, so that a signal is honoured within a batch.
      const auto onBatch = [&] {
        if (stopSignal.load() != 0) throw Interrupted{};
      };
      std::int64_t correct = 0, scored = data.evalCount;
      if (data.evalSource) {
        const std::string context = fmt::format("evaluation after epoch {}", epoch);
        const ClassifierTrainer::Accuracy acc =
            trainer.evaluate(data.evalSource, data.evalCount, plan.loader_threads, onBatch,
                             plan.corrupt_policy, context);
        correct = acc.correct;
        scored = acc.samples;
        if (state.evalSamplesDeferred()) state.evalSamples(scored, epoch);
        if (acc.skipped > 0) {
          // --on-corrupt-image skip: not scored, nothing in their place; counted and named.
          log.event("ipu_corrupt_eval_images_skipped", acc.skipped,
                    Json{{"epoch_num", epoch}, {"files", acc.skippedFiles}});
          if (plan.rank == 0)
            fmt::print(stderr,
                       "{}: {} of {} validation image(s) corrupt, skipped and not scored (the "
                       "accuracy is over the other {}), first: {}\n",
                       context, acc.skipped, acc.skipped + acc.samples, acc.samples,
                       acc.skippedFiles.front());
          const std::int64_t total = acc.skipped + acc.samples;
          const double limit = plan.settings.max_corrupt_eval_fraction;
          if (static_cast<double>(acc.skipped) > limit * static_cast<double>(total)) {
            throw std::runtime_error(fmt::format(
                "{}: {} of {} validation images are corrupt ({:.3g}%), more than the limit of "
                "{:.3g}% (max_corrupt_eval_fraction): an accuracy over the rest would not be "
                "comparable. First: {}. Replace or remove the files (the log names them all), "
                "or raise max_corrupt_eval_fraction with --config",
                context, acc.skipped, total, 100.0 * static_cast<double>(acc.skipped) / total,
                100.0 * limit, acc.skippedFiles.front()));
          }
        }
      } else {
        correct = std::llround(trainer.evaluate(data.eval, data.norm, data.evalCount, onBatch) *
                               static_cast<double>(data.evalCount));
      }
      out.eval_runs = trainer.evalRunsDone();
      if (scored <= 0) throw std::runtime_error("the evaluation scored no image");
      const double accuracy = static_cast<double>(correct) / static_cast<double>(scored);
      state.evalStop();
      logEvalAccuracy(log, accuracy, epoch);
      out.accuracy = accuracy;
      ps.last_accuracy = accuracy;
      if (accuracy >= plan.settings.target_accuracy) {
        reached = true;
        break;
      }
    }
    out.status = reached ? RunStatus::kSuccess : RunStatus::kTargetNotReached;
    if (!reached) {
      out.message = fmt::format("the target accuracy {} was not reached in {} epoch(s)",
                                plan.settings.target_accuracy, plan.max_epochs);
    }
    log.event("ipu_weights_crc32", variablesCrc32(trainer.trainEngine()),
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
