// In-memory uint8 image datasets (Fashion-MNIST, synthetic) and the normalising batch fill used by
// the training loop.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace datasets {

// Per-channel normalisation on [0, 1] pixel values: out = (px / 255 - mean[c]) / std[c].
struct Normalization {
  std::vector<float> mean;
  std::vector<float> stddev;

  static Normalization imageNet() { return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}; }
  static Normalization fashionMnist() { return {{0.2860f}, {0.3530f}}; }
  // Plain px / 255.
  static Normalization unit(int channels) {
    return {std::vector<float>(channels, 0.f), std::vector<float>(channels, 1.f)};
  }
  // Validates (sizes match `channels`, stddev > 0); throws DatasetError otherwise.
  void check(int channels) const;
};

// 256-entry lookup table per channel: turns normalisation into one load per output value.
class NormalizationLut {
 public:
  NormalizationLut(const Normalization& norm, int channels);
  const float* channel(int c) const { return table_.data() + 256 * c; }

 private:
  std::vector<float> table_;
};

// Images stored NHWC uint8, labels int32.
struct ImageDataset {
  int64_t count = 0;
  int height = 0;
  int width = 0;
  int channels = 0;
  int numClasses = 0;
  std::vector<uint8_t> pixels;  // count * height * width * channels
  std::vector<int32_t> labels;  // count

  size_t imageElems() const { return static_cast<size_t>(height) * width * channels; }
  const uint8_t* image(int64_t i) const { return pixels.data() + imageElems() * i; }
};

struct SyntheticSpec {
  int64_t count = 1024;
  int height = 224;
  int width = 224;
  int channels = 3;
  int numClasses = 1000;
  uint64_t seed = 0;
};

// Uniform random pixels and labels, deterministic for spec.seed. Memory: count*H*W*C bytes; for
// huge shapes use SyntheticSource (source.h), which generates samples on demand.
ImageDataset makeSyntheticDataset(const SyntheticSpec& spec);

// Writes the samples `indices` of `ds` normalised into `out` (NHWC float32, exactly
// indices.size() * imageElems() values) and their labels into `labels`. No intermediate copies.
void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices,
               const NormalizationLut& lut, std::span<float> out, std::span<int32_t> labels);
void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices, const Normalization& norm,
               std::span<float> out, std::span<int32_t> labels);

// Train-time augmentation for small in-memory images (Fashion-MNIST), the usual CIFAR-style
// recipe: a random horizontal flip, then a random translation by up to `padding` pixels each way
// (a crop of the image zero-padded by `padding`: the padding is pixel value 0, i.e. background,
// normalised like any other pixel). Each sample draws from its own generator seeded by (seed,
// epoch, dataset index), so a batch is the same whatever the replica split or thread count.
struct SmallImageAugment {
  bool flip = false;
  int padding = 0;  // >= 0 and below the image's height and width
  uint64_t seed = 0;
  uint64_t epoch = 0;
  bool enabled() const { return flip || padding > 0; }
};

// fillBatch with `aug` applied to every sample (a disabled `aug` is plain fillBatch).
void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices,
               const NormalizationLut& lut, const SmallImageAugment& aug, std::span<float> out,
               std::span<int32_t> labels);

}  // namespace datasets
