// Image classification as a training task: data inputs "images" (f32 [b,H,W,C]) and "labels"
// (i32 [b]), top-1 accuracy on the output "logits". Two data paths:
//   in memory   an ImageDataset (Fashion-MNIST): each epoch a shuffled order (seed, epoch),
//               optional flip / translation (datasets::SmallImageAugment), incomplete last
//               batch dropped; evaluation in order, the last batch padded and not scored there.
//   folders     datasets::Source (ImageNet folders, decoded and augmented on the fly) through a
//               prefetching datasets::Pipeline; this process decodes only its replicas' slice
//               of each global batch; corrupt images per datasets::CorruptPolicy.
#pragma once

#include <memory>

#include "datasets/image_dataset.h"
#include "datasets/source.h"
#include "harness/task.h"

namespace ipu::harness {

// Epoch `epoch` of an in-memory dataset: the first `samples` (0: all) of its shuffled order.
std::unique_ptr<BatchSource> imageEpochSource(const datasets::ImageDataset& ds,
                                              const datasets::Normalization& norm,
                                              const BatchGeometry& g, std::uint64_t seed, int epoch,
                                              std::int64_t samples,
                                              datasets::SmallImageAugment augment = {});
// The first `samples` (0: all) of an in-memory dataset, in order.
std::unique_ptr<EvalSource> imageEvalSource(const datasets::ImageDataset& ds,
                                            const datasets::Normalization& norm, std::int64_t batch,
                                            std::int64_t samples = 0);
// Epoch `epoch` of a Source through a Pipeline of `threads` workers; at most `samples` (0: all).
std::unique_ptr<BatchSource> pipelineEpochSource(std::shared_ptr<const datasets::Source> source,
                                                 const BatchGeometry& g, std::uint64_t seed,
                                                 int epoch, std::int64_t samples, int threads,
                                                 datasets::CorruptPolicy policy);
// One evaluation pass over a Source: under CorruptPolicy::kSkip a corrupt image is not scored
// and nothing stands in for it (skipped() and skippedFiles() name them).
std::unique_ptr<EvalSource> pipelineEvalSource(std::shared_ptr<const datasets::Source> source,
                                               std::int64_t batch, std::int64_t samples,
                                               int threads, datasets::CorruptPolicy policy,
                                               const std::string& context);

// In-memory training and top-1 through a trainer, for tools, tests and benchmarks: epoch `epoch`
// of `ds` (the trainer's seed and augmentation; the first maxSamples, 0: all) and top-1 over the
// first maxSamples of `ds` (0: all).
EpochStats trainImageEpoch(Trainer& trainer, const datasets::ImageDataset& ds,
                           const datasets::Normalization& norm, int epoch,
                           const std::function<float(std::int64_t)>& lr,
                           std::int64_t maxSamples = 0,
                           const std::function<void(std::int64_t, float)>& onStep = {});
double evaluateImageTopOne(Trainer& trainer, const datasets::ImageDataset& ds,
                           const datasets::Normalization& norm, std::int64_t maxSamples = 0);

// The classification task of a run: Fashion-MNIST from data_dir (mini) or the ImageNet folders
// (full), loaded when made (inside the timed run).
std::unique_ptr<TaskData> makeImageClassificationData(const DataRequest& request);

}  // namespace ipu::harness
