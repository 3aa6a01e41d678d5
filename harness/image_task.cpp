#include "harness/image_task.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "datasets/fashion_mnist.h"
#include "datasets/pipeline.h"

namespace ipu::harness {
namespace {

constexpr char kImages[] = "images";
constexpr char kLabels[] = "labels";

// The model's image input must hold what the data delivers: refuse a mismatch by name.
void checkImageSize(const HostSlot& images, std::int64_t rows, std::int64_t elemsPerImage,
                    const char* what) {
  if (images.elements() != rows * elemsPerImage)
    throw std::invalid_argument(fmt::format(
        "{}: the model's input '{}' {} holds {} values per image, the data set's images {}", what,
        images.name, shapeStr(images.shape), images.elements() / std::max<std::int64_t>(1, rows),
        elemsPerImage));
}

class ImageEpochSource : public BatchSource {
 public:
  ImageEpochSource(const datasets::ImageDataset& ds, const datasets::Normalization& norm,
                   const BatchGeometry& g, std::uint64_t seed, int epoch, std::int64_t samples,
                   datasets::SmallImageAugment augment)
      : ds_(ds), lut_(norm, ds.channels), aug_(augment), g_(g) {
    order_.resize(static_cast<size_t>(ds.count));
    std::iota(order_.begin(), order_.end(), 0);
    std::mt19937_64 rng(seed * 1000003ULL + static_cast<std::uint64_t>(epoch));
    std::shuffle(order_.begin(), order_.end(), rng);
    n_ = samples > 0 ? std::min(samples, ds.count) : ds.count;
    aug_.seed = seed;
    aug_.epoch = static_cast<std::uint64_t>(epoch);
  }
  bool beginStep(std::int64_t) override {
    begin_ = step_++ * g_.globalBatch();
    return begin_ + g_.globalBatch() <= n_;
  }
  void fill(int replica, int slot, const MicroBatch& in) override {
    const HostSlot& images = in[kImages];
    checkImageSize(images, g_.microBatch, ds_.height * ds_.width * ds_.channels, "training");
    const std::int64_t at = begin_ + replica * g_.perReplica() + slot * g_.microBatch;
    datasets::fillBatch(
        ds_, std::span<const std::int64_t>(order_.data() + at, static_cast<size_t>(g_.microBatch)),
        lut_, aug_, images.as<float>(), in.get<std::int32_t>(kLabels));
  }

 private:
  const datasets::ImageDataset& ds_;
  datasets::NormalizationLut lut_;
  datasets::SmallImageAugment aug_;
  BatchGeometry g_;
  std::vector<std::int64_t> order_;
  std::int64_t n_ = 0, begin_ = 0, step_ = 0;
};

class ImageEvalSource : public EvalSource {
 public:
  ImageEvalSource(const datasets::ImageDataset& ds, const datasets::Normalization& norm,
                  std::int64_t batch, std::int64_t samples)
      : ds_(ds),
        lut_(norm, ds.channels),
        batch_(batch),
        n_(samples > 0 ? std::min(samples, ds.count) : ds.count),
        idx_(static_cast<size_t>(batch)) {}
  bool next(const MicroBatch& in, std::vector<bool>& scored) override {
    if (i_ >= n_) return false;
    const std::int64_t valid = std::min(batch_, n_ - i_);
    for (std::int64_t k = 0; k < batch_; ++k) idx_[k] = i_ + std::min(k, valid - 1);  // pad
    const HostSlot& images = in[kImages];
    checkImageSize(images, batch_, ds_.height * ds_.width * ds_.channels, "evaluation");
    datasets::fillBatch(ds_, idx_, lut_, images.as<float>(), in.get<std::int32_t>(kLabels));
    for (std::int64_t k = valid; k < batch_; ++k) scored[static_cast<size_t>(k)] = false;
    i_ += batch_;
    return true;
  }

 private:
  const datasets::ImageDataset& ds_;
  datasets::NormalizationLut lut_;
  std::int64_t batch_, n_, i_ = 0;
  std::vector<std::int64_t> idx_;
};

class PipelineEpochSource : public BatchSource {
 public:
  PipelineEpochSource(std::shared_ptr<const datasets::Source> source, const BatchGeometry& g,
                      std::uint64_t seed, int epoch, std::int64_t samples, int threads,
                      datasets::CorruptPolicy policy)
      : g_(g),
        pipeline_(std::move(source), options(g, seed, threads, policy),
                  static_cast<std::uint64_t>(epoch)) {
    steps_ = samples > 0 ? std::min<std::int64_t>(samples / g.globalBatch(), pipeline_.numBatches())
                         : pipeline_.numBatches();
  }
  bool beginStep(std::int64_t) override {
    if (taken_ >= steps_) return false;
    ++taken_;
    batch_ = pipeline_.next();
    return batch_ != nullptr;
  }
  void fill(int replica, int slot, const MicroBatch& in) override {
    const size_t elems = batch_->shape.elems();
    const HostSlot& images = in[kImages];
    checkImageSize(images, g_.microBatch, static_cast<std::int64_t>(elems), "training");
    const size_t off =
        static_cast<size_t>((replica - g_.firstReplica) * g_.perReplica() + slot * g_.microBatch);
    const size_t n = static_cast<size_t>(g_.microBatch);
    std::copy_n(batch_->images.data() + off * elems, n * elems, images.as<float>().data());
    std::copy_n(batch_->labels.data() + off, n, in.get<std::int32_t>(kLabels).data());
  }
  // One copy into the engines' input buffers: the batch returns to the pipeline at once.
  void endStep() override { batch_.reset(); }
  std::vector<std::string> corruptFiles() const override { return pipeline_.corruptFiles(); }

 private:
  static datasets::PipelineOptions options(const BatchGeometry& g, std::uint64_t seed, int threads,
                                           datasets::CorruptPolicy policy) {
    datasets::PipelineOptions po =
        datasets::PipelineOptions::train(static_cast<int>(g.globalBatch()), seed, threads);
    po.sliceBegin = static_cast<int>(g.firstReplica * g.perReplica());
    po.sliceSize = static_cast<int>(g.localReplicas * g.perReplica());
    po.corruptPolicy = policy;
    return po;
  }
  BatchGeometry g_;
  datasets::Pipeline pipeline_;
  std::int64_t steps_ = 0, taken_ = 0;
  datasets::BatchPtr batch_;
};

class PipelineEvalSource : public EvalSource {
 public:
  PipelineEvalSource(std::shared_ptr<const datasets::Source> source, std::int64_t batch,
                     std::int64_t samples, int threads, datasets::CorruptPolicy policy,
                     const std::string& context)
      : source_(source),
        batch_(batch),
        samples_(samples),
        pipeline_(std::move(source), options(batch, threads, policy, context), 0) {}
  bool next(const MicroBatch& in, std::vector<bool>& scored) override {
    datasets::BatchPtr batch = pipeline_.next();
    if (!batch) return false;
    const std::int64_t valid =
        samples_ > 0 ? std::min<std::int64_t>(batch->validCount, samples_ - positions_)
                     : batch->validCount;
    if (valid <= 0) return false;
    const HostSlot& images = in[kImages];
    checkImageSize(images, batch_, static_cast<std::int64_t>(batch->shape.elems()), "evaluation");
    std::copy(batch->images.begin(), batch->images.end(), images.as<float>().begin());
    // Pad slots and skipped images are labelled -1 by the pipeline: the graph gets a valid
    // class for them, the metric leaves them out.
    const std::span<std::int32_t> labels = in.get<std::int32_t>(kLabels);
    for (std::int64_t k = 0; k < batch_; ++k) {
      const std::int32_t label = k < valid ? batch->labels[k] : -1;
      labels[k] = std::max(label, 0);
      scored[static_cast<size_t>(k)] = label >= 0;
      if (k < valid && batch->labels[k] < 0) {
        ++skipped_;
        skippedFiles_.push_back(
            source_->describe(pipeline_.order()[batch->index * batch_ + k]));  // slot k
      }
    }
    positions_ += valid;
    return true;
  }
  std::int64_t skipped() const override { return skipped_; }
  std::vector<std::string> skippedFiles() const override { return skippedFiles_; }

 private:
  static datasets::PipelineOptions options(std::int64_t batch, int threads,
                                           datasets::CorruptPolicy policy,
                                           const std::string& context) {
    datasets::PipelineOptions po =
        datasets::PipelineOptions::eval(static_cast<int>(batch), threads);
    po.corruptPolicy = policy;
    po.context = context;
    return po;
  }
  std::shared_ptr<const datasets::Source> source_;
  std::int64_t batch_, samples_, positions_ = 0, skipped_ = 0;
  std::vector<std::string> skippedFiles_;
  datasets::Pipeline pipeline_;
};

class ImageClassificationData : public TaskData {
 public:
  explicit ImageClassificationData(const DataRequest& r) : r_(r) {
    if (r.imagenet_train) {
      datasets::ImageFolderOptions train;
      train.transform = datasets::ImageTransform::kTrain;
      train.cropSize = r.image_size;
      datasets::ImageFolderOptions eval;
      eval.transform = datasets::ImageTransform::kEval;
      eval.cropSize = r.image_size;
      eval.resizeSize = r.resize_size;
      trainSource_ = std::make_shared<datasets::ImageFolderSource>(*r.imagenet_train, train);
      evalSource_ = std::make_shared<datasets::ImageFolderSource>(*r.imagenet_val, eval);
      trainCount_ = trainSource_->size();
      evalCount_ = evalSource_->size();
      return;
    }
    train_ = datasets::loadFashionMnist(r.data_dir, datasets::Split::kTrain);
    eval_ = datasets::loadFashionMnist(r.data_dir, datasets::Split::kTest);
    norm_ = datasets::Normalization::fashionMnist();
    trainCount_ = r.train_samples > 0 ? std::min(r.train_samples, train_.count) : train_.count;
    evalCount_ = r.eval_samples > 0 ? std::min(r.eval_samples, eval_.count) : eval_.count;
  }
  std::int64_t trainSamples() const override { return trainCount_; }
  std::int64_t evalSamples() const override { return evalCount_; }
  std::unique_ptr<BatchSource> trainEpoch(int epoch, const BatchGeometry& g) const override {
    if (trainSource_)
      return pipelineEpochSource(trainSource_, g, r_.seed, epoch, trainCount_, r_.loader_threads,
                                 r_.corrupt_policy);
    return imageEpochSource(train_, norm_, g, r_.seed, epoch, trainCount_, r_.augment);
  }
  std::unique_ptr<EvalSource> evaluation(std::int64_t batch,
                                         const std::string& context) const override {
    if (evalSource_)
      return pipelineEvalSource(evalSource_, batch, evalCount_, r_.loader_threads,
                                r_.corrupt_policy, context);
    return imageEvalSource(eval_, norm_, batch, evalCount_);
  }
  std::unique_ptr<Metric> metric() const override { return std::make_unique<TopOneAccuracy>(); }

 private:
  DataRequest r_;
  datasets::ImageDataset train_, eval_;
  datasets::Normalization norm_;
  std::shared_ptr<const datasets::Source> trainSource_, evalSource_;
  std::int64_t trainCount_ = 0, evalCount_ = 0;
};

}  // namespace

std::unique_ptr<BatchSource> imageEpochSource(const datasets::ImageDataset& ds,
                                              const datasets::Normalization& norm,
                                              const BatchGeometry& g, std::uint64_t seed, int epoch,
                                              std::int64_t samples,
                                              datasets::SmallImageAugment augment) {
  return std::make_unique<ImageEpochSource>(ds, norm, g, seed, epoch, samples, augment);
}

std::unique_ptr<EvalSource> imageEvalSource(const datasets::ImageDataset& ds,
                                            const datasets::Normalization& norm, std::int64_t batch,
                                            std::int64_t samples) {
  return std::make_unique<ImageEvalSource>(ds, norm, batch, samples);
}

std::unique_ptr<BatchSource> pipelineEpochSource(std::shared_ptr<const datasets::Source> source,
                                                 const BatchGeometry& g, std::uint64_t seed,
                                                 int epoch, std::int64_t samples, int threads,
                                                 datasets::CorruptPolicy policy) {
  return std::make_unique<PipelineEpochSource>(std::move(source), g, seed, epoch, samples, threads,
                                               policy);
}

std::unique_ptr<EvalSource> pipelineEvalSource(std::shared_ptr<const datasets::Source> source,
                                               std::int64_t batch, std::int64_t samples,
                                               int threads, datasets::CorruptPolicy policy,
                                               const std::string& context) {
  return std::make_unique<PipelineEvalSource>(std::move(source), batch, samples, threads, policy,
                                              context);
}

EpochStats trainImageEpoch(Trainer& trainer, const datasets::ImageDataset& ds,
                           const datasets::Normalization& norm, int epoch,
                           const std::function<float(std::int64_t)>& lr, std::int64_t maxSamples,
                           const std::function<void(std::int64_t, float)>& onStep) {
  ImageEpochSource source(ds, norm, trainer.geometry(), trainer.options().seed, epoch, maxSamples,
                          trainer.options().augment);
  return trainer.train(source, 0, lr, onStep);
}

double evaluateImageTopOne(Trainer& trainer, const datasets::ImageDataset& ds,
                           const datasets::Normalization& norm, std::int64_t maxSamples) {
  ImageEvalSource source(ds, norm, trainer.options().batch, maxSamples);
  TopOneAccuracy top1;
  return trainer.evaluate(source, top1).metric.value();
}

std::unique_ptr<TaskData> makeImageClassificationData(const DataRequest& request) {
  return std::make_unique<ImageClassificationData>(request);
}

}  // namespace ipu::harness
