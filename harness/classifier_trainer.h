// The training loop for image classifiers on the backend: feeds batches from a dataset into a
// compiled training step, evaluates with the inference graph, and moves weights between them by
// name. Used by the mini runs, run_benchmark and the end-to-end tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/error.h"
#include "datasets/image_dataset.h"
#include "datasets/source.h"
#include "ipu_backend/compiler/compiler.h"
#include "ipu_backend/engine/engine.h"
#include "ipu_backend/precision/loss_scaling.h"
#include "ipu_backend/replication/replica_group.h"
#include "models/small_cnn/small_cnn.h"

namespace ipu::harness {

struct TrainerOptions {
  std::int64_t batch = 64;
  EngineMode mode = EngineMode::Fused;
  Target target = Target::mk2();
  bool checkMemory = true;
  std::uint64_t seed = 1;
  // Data parallelism: `batch` is the micro-batch of one replica; a step trains
  // replicas x accumulation x batch samples. `link` joins this process's replicas to other
  // processes' (mpirun); null: every replica runs here.
  int replicas = 1;
  int accumulation = 1;
  bool shardOptimizerState = false;
  replication::RingLink* link = nullptr;
  int threadsPerReplica = 1;
  // Train-time augmentation of in-memory datasets (off by default); its seed and epoch are
  // set per epoch from `seed` and the epoch's number.
  datasets::SmallImageAugment augment;
};

struct EpochStats {
  double meanLoss = 0;
  std::int64_t samples = 0;
  double seconds = 0;
  bool finite = true;  // false: a NaN/Inf loss was seen (training diverged)
  // Loss scaling (16-bit policies): steps skipped for non-finite gradients in this epoch and
  // the scale at its end (1 without loss scaling).
  std::int64_t skippedSteps = 0;
  float lossScale = 1.0f;
  // Source epochs under CorruptPolicy::kSkip: the files found corrupt and replaced (sorted).
  std::vector<std::string> corruptFiles;
};

// The two programs a trainer runs, compiled for opts.target (the replicated training step when
// opts has replicas or accumulation): what a fit check needs, without engines or host tensors.
struct TrainerPrograms {
  std::shared_ptr<Executable> train, eval;
  std::vector<std::string> zeroInitialised;  // variables the replication pass created
};
TrainerPrograms compileTrainerPrograms(const models::ClassifierGraph& train,
                                       const models::ClassifierGraph& eval,
                                       const TrainerOptions& opts);

class ClassifierTrainer {
 public:
  // Compiles both graphs (the compile reports are kept for the caller).
  ClassifierTrainer(models::ClassifierGraph train, models::ClassifierGraph eval,
                    const TrainerOptions& opts);

  // Writes initial values for every variable of the training graph (by name).
  void initialise(const std::map<std::string, std::vector<float>>& values);

  // One pass over a shuffled order of ds (seed, epoch); drops the incomplete last batch.
  // `maxSamples` limits the epoch (0: all). `lr(step)` gives the learning rate of each step.
  // `onStep(step, loss)` is called after every step (progress display); may be empty.
  EpochStats trainEpoch(const datasets::ImageDataset& ds, const datasets::Normalization& norm,
                        int epoch, const std::function<float(std::int64_t)>& lr,
                        std::int64_t maxSamples = 0,
                        const std::function<void(std::int64_t, float)>& onStep = {});

  // Top-1 accuracy over the first `maxSamples` (0: all) samples; the last batch is padded and
  // only its valid samples count.
  double evaluate(const datasets::ImageDataset& ds, const datasets::Normalization& norm,
                  std::int64_t maxSamples = 0);

  // The same two over a Source (ImageNet folders: decoded and augmented on the fly) through a
  // prefetching datasets::Pipeline of `loaderThreads` workers. The epoch order is the
  // pipeline's (seed, epoch); this process decodes only its own replicas' part of each global
  // batch. evaluate's `onBatch` runs after every batch (the run loop's SIGINT check) and returns
  // the number of correct predictions with the samples evaluated.
  EpochStats trainEpoch(std::shared_ptr<const datasets::Source> source, int epoch,
                        const std::function<float(std::int64_t)>& lr, std::int64_t maxSamples,
                        const std::function<void(std::int64_t, float)>& onStep, int loaderThreads,
                        datasets::CorruptPolicy corruptPolicy = datasets::CorruptPolicy::kFail);
  // Under CorruptPolicy::kSkip a corrupt evaluation image is not scored and nothing stands in
  // for it: `samples` counts the images scored, `skipped` (named in skippedFiles) the others.
  // `context` names the evaluation in error messages ("evaluation after epoch 4").
  struct Accuracy {
    std::int64_t correct = 0, samples = 0, skipped = 0;
    std::vector<std::string> skippedFiles;  // in evaluation order
    double top1() const { return samples ? static_cast<double>(correct) / samples : 0.0; }
  };
  Accuracy evaluate(std::shared_ptr<const datasets::Source> source, std::int64_t maxSamples,
                    int loaderThreads, const std::function<void()>& onBatch = {},
                    datasets::CorruptPolicy corruptPolicy = datasets::CorruptPolicy::kFail,
                    const std::string& context = "evaluation");

  const Executable& trainExecutable() const { return *trainExe_; }
  const Executable& evalExecutable() const { return *evalExe_; }
  std::shared_ptr<const Executable> trainExecutablePtr() const { return trainExe_; }
  std::shared_ptr<const Executable> evalExecutablePtr() const { return evalExe_; }
  // The first local replica's engine (every replica holds the same weights).
  Engine& trainEngine() { return group_ ? group_->engine(0) : *trainEngine_; }
  std::int64_t stepsDone() const { return steps_; }
  std::int64_t evalRunsDone() const { return evalRuns_; }  // inference program runs
  // Samples one step trains over every replica: replicas x accumulation x micro-batch.
  std::int64_t globalBatch() const { return opts_.batch * opts_.replicas * opts_.accumulation; }
  replication::ReplicaGroup* replicaGroup() { return group_.get(); }
  // The host side of loss scaling: current scale, skipped steps, overflow events, and what
  // the last step decided (lastReport()). Without loss scaling: scale 1, never skips.
  const precision::LossScaler& lossScaler() const { return scaler_; }

 private:
  void syncWeightsToEval();
  void setUpReplicas();
  // One weight update on the inputs already filled (images_/labels_, or the replicas' buffers);
  // returns the step's loss (mean over the micro-batches of this process's replicas).
  float step(const std::function<float(std::int64_t)>& lr, EpochStats& st);
  // Top-1 hits among the first labels.size() rows of logits_; rows labelled < 0 are not scored.
  std::int64_t countCorrect(std::span<const std::int32_t> labels) const;

  models::ClassifierGraph train_, eval_;
  TrainerOptions opts_;
  std::shared_ptr<Executable> trainExe_, evalExe_;
  std::unique_ptr<Engine> trainEngine_, evalEngine_;
  std::vector<float> images_;
  std::vector<std::int32_t> labels_;
  std::vector<float> logits_;
  float loss_ = 0, lr_ = 0;
  precision::LossScaler scaler_;
  float scale_ = 1, inverseScale_ = 1, overflow_ = 0;
  std::int64_t steps_ = 0;
  std::int64_t evalRuns_ = 0;
  // Replicated training (replicas or accumulation > 1): per local replica, A micro-batches.
  std::unique_ptr<replication::ReplicaGroup> group_;
  std::vector<std::string> zeroInitialised_;
  std::vector<std::vector<float>> replicaImages_;
  std::vector<std::vector<std::int32_t>> replicaLabels_;
  std::vector<std::vector<float>> replicaLosses_;
  std::vector<float> replicaLr_;
  std::vector<float> replicaScale_, replicaInverseScale_;  // S and 1/S per micro-batch slot
  std::vector<std::vector<float>> replicaOverflow_;        // [local replica][micro-batch slot]
};

// Copies every variable of dst's graph from the same-named variable of src (converted when
// the two store it in different dtypes).
void copyVariables(const Engine& src, Engine& dst);

}  // namespace ipu::harness
