// The data side of a training task: what a benchmark feeds the trainer and how its quality is
// measured. A benchmark's registry entry makes one per run (harness/benchmark_registry.h); the
// run loop trains epochs (or a samples-counted stream of them) from trainEpoch(), evaluates
// through evaluation() and scores with metric(). Image classification is one such task
// (harness/image_task.h); BERT's masked LM will be another, on the same trainer and run loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "datasets/error.h"
#include "datasets/image_dataset.h"
#include "datasets/image_folder.h"
#include "harness/trainer.h"

namespace ipu::harness {

// What a run asks of its data: where it is, how much of it, and how to read it.
struct DataRequest {
  std::filesystem::path data_dir;
  // Full scale: the ImageNet folders as makePlan scanned them (empty at mini scale).
  std::shared_ptr<const datasets::ImageFolderIndex> imagenet_train, imagenet_val;
  std::int64_t train_samples = 0;  // per epoch, 0: all
  std::int64_t eval_samples = 0;   // 0: all
  std::uint64_t seed = 1;          // the run's: shuffling and augmentation
  int loader_threads = 2;
  datasets::CorruptPolicy corrupt_policy = datasets::CorruptPolicy::kFail;
  datasets::SmallImageAugment augment;  // in-memory images only
  // Image folders: the square output size and, for evaluation, the shorter side before the
  // centre crop (ResNet-50 224 / 256; EfficientNet-B4 380 / 412, crop padding 32).
  int image_size = 224;
  int resize_size = 256;
  // Text (BERT): the model's vocabulary (every token id must be below it) and the open
  // division's averaging of the masked-LM metric per sequence (closed: per token).
  std::int64_t vocab_size = 0;
  bool per_sequence = false;
};

class TaskData {
 public:
  virtual ~TaskData() = default;
  // Samples one training epoch covers and one evaluation scores (before skips).
  virtual std::int64_t trainSamples() const = 0;
  virtual std::int64_t evalSamples() const = 0;
  // Training epoch `epoch` (from 1) for the trainer's replicas, in whole global batches.
  virtual std::unique_ptr<BatchSource> trainEpoch(int epoch, const BatchGeometry& g) const = 0;
  // One pass over the evaluation set in micro-batches of `batch`; `context` names the pass in
  // error messages ("evaluation after epoch 4").
  virtual std::unique_ptr<EvalSource> evaluation(std::int64_t batch,
                                                 const std::string& context) const = 0;
  virtual std::unique_ptr<Metric> metric() const = 0;
};

}  // namespace ipu::harness
