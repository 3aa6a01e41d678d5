// What the pipeline batches from: a random-access set of samples, each written as normalised
// NHWC float32 straight into its batch slot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "datasets/image_dataset.h"
#include "datasets/rng.h"

namespace datasets {

struct SampleShape {
  int height = 0;
  int width = 0;
  int channels = 0;
  size_t elems() const { return static_cast<size_t>(height) * width * channels; }
  bool operator==(const SampleShape&) const = default;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  // Shape of every sample load() writes.
  virtual SampleShape shape() const = 0;
  virtual int numClasses() const = 0;
  // Writes sample `index` into outNHWC[shape().elems()] and its label into *label. `rng` is the
  // sample's own generator (seeded per (seed, epoch, index)), for augmentation. Must be safe to
  // call concurrently. Throws CorruptSampleError for a bad sample, DatasetError otherwise.
  virtual void load(int64_t index, Rng& rng, float* outNHWC, int32_t* label) const = 0;
  // Human-readable name of a sample for error messages (file name where there is one).
  virtual std::string describe(int64_t index) const;
};

// Samples of an in-memory uint8 dataset, normalised (no augmentation).
class InMemorySource : public Source {
 public:
  InMemorySource(std::shared_ptr<const ImageDataset> data, const Normalization& norm);
  int64_t size() const override { return data_->count; }
  SampleShape shape() const override { return {data_->height, data_->width, data_->channels}; }
  int numClasses() const override { return data_->numClasses; }
  void load(int64_t index, Rng& rng, float* outNHWC, int32_t* label) const override;
  const ImageDataset& data() const { return *data_; }

 private:
  std::shared_ptr<const ImageDataset> data_;
  NormalizationLut lut_;
};

// Procedural random samples of any shape, generated on demand from (seed, index): throughput runs
// at ImageNet shape without holding the images in memory. Values are already "normalised"
// (uniform in [-2, 2)); labels uniform in 0..classes-1.
class SyntheticSource : public Source {
 public:
  explicit SyntheticSource(const SyntheticSpec& spec);
  int64_t size() const override { return spec_.count; }
  SampleShape shape() const override { return {spec_.height, spec_.width, spec_.channels}; }
  int numClasses() const override { return spec_.numClasses; }
  void load(int64_t index, Rng& rng, float* outNHWC, int32_t* label) const override;

 private:
  SyntheticSpec spec_;
};

}  // namespace datasets
