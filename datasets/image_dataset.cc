#include "datasets/image_dataset.h"

#include <fmt/format.h>

#include "datasets/error.h"
#include "datasets/rng.h"

namespace datasets {

void Normalization::check(int channels) const {
  if (mean.size() != static_cast<size_t>(channels) ||
      stddev.size() != static_cast<size_t>(channels)) {
    throw DatasetError(fmt::format("normalisation: expected {} mean/std values, got {}/{}",
                                   channels, mean.size(), stddev.size()));
  }
  for (float s : stddev) {
    if (!(s > 0.f)) throw DatasetError(fmt::format("normalisation: std must be > 0, got {}", s));
  }
}

NormalizationLut::NormalizationLut(const Normalization& norm, int channels) {
  norm.check(channels);
  table_.resize(256 * static_cast<size_t>(channels));
  for (int c = 0; c < channels; ++c) {
    const float inv = 1.f / norm.stddev[c];
    for (int v = 0; v < 256; ++v) table_[256 * c + v] = (v / 255.f - norm.mean[c]) * inv;
  }
}

ImageDataset makeSyntheticDataset(const SyntheticSpec& spec) {
  if (spec.count < 0 || spec.height <= 0 || spec.width <= 0 || spec.channels <= 0 ||
      spec.numClasses <= 0) {
    throw DatasetError(fmt::format("synthetic dataset: invalid shape count={} {}x{}x{} classes={}",
                                   spec.count, spec.height, spec.width, spec.channels,
                                   spec.numClasses));
  }
  ImageDataset ds;
  ds.count = spec.count;
  ds.height = spec.height;
  ds.width = spec.width;
  ds.channels = spec.channels;
  ds.numClasses = spec.numClasses;
  ds.pixels.resize(ds.imageElems() * spec.count);
  ds.labels.resize(spec.count);
  Rng rng(hashSeed({spec.seed, 0x5EED}));
  // 8 pixels per RNG draw.
  size_t i = 0;
  for (; i + 8 <= ds.pixels.size(); i += 8) {
    uint64_t v = rng.next();
    for (int k = 0; k < 8; ++k, v >>= 8) ds.pixels[i + k] = static_cast<uint8_t>(v);
  }
  for (; i < ds.pixels.size(); ++i) ds.pixels[i] = static_cast<uint8_t>(rng.next());
  for (auto& l : ds.labels) l = static_cast<int32_t>(rng.uniformInt(0, spec.numClasses - 1));
  return ds;
}

namespace {

// The checks of both fillBatch forms, before anything is written: buffer sizes, then indices.
void checkBatch(const ImageDataset& ds, std::span<const int64_t> indices, std::span<float> out,
                std::span<int32_t> labels) {
  const size_t elems = ds.imageElems();
  if (out.size() != indices.size() * elems || labels.size() != indices.size()) {
    throw DatasetError(fmt::format(
        "fillBatch: buffer sizes do not match: {} samples need {} floats and {} labels, got {} "
        "and {}",
        indices.size(), indices.size() * elems, indices.size(), out.size(), labels.size()));
  }
  for (const int64_t idx : indices) {
    if (idx < 0 || idx >= ds.count) {
      throw DatasetError(
          fmt::format("fillBatch: sample index {} outside 0..{}", idx, ds.count - 1));
    }
  }
}

}  // namespace

void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices,
               const NormalizationLut& lut, std::span<float> out, std::span<int32_t> labels) {
  checkBatch(ds, indices, out, labels);
  const size_t elems = ds.imageElems();
  const int c = ds.channels;
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t idx = indices[s];
    const uint8_t* src = ds.image(idx);
    float* dst = out.data() + s * elems;
    if (c == 1) {
      const float* t = lut.channel(0);
      for (size_t i = 0; i < elems; ++i) dst[i] = t[src[i]];
    } else {
      for (size_t i = 0; i < elems; i += c) {
        for (int k = 0; k < c; ++k) dst[i + k] = lut.channel(k)[src[i + k]];
      }
    }
    labels[s] = ds.labels[idx];
  }
}

void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices, const Normalization& norm,
               std::span<float> out, std::span<int32_t> labels) {
  fillBatch(ds, indices, NormalizationLut(norm, ds.channels), out, labels);
}

void fillBatch(const ImageDataset& ds, std::span<const int64_t> indices,
               const NormalizationLut& lut, const SmallImageAugment& aug, std::span<float> out,
               std::span<int32_t> labels) {
  if (!aug.enabled()) return fillBatch(ds, indices, lut, out, labels);
  if (aug.padding < 0 || aug.padding >= ds.height || aug.padding >= ds.width) {
    throw DatasetError(
        fmt::format("augmentation: padding {} must be >= 0 and below the image size {}x{}",
                    aug.padding, ds.height, ds.width));
  }
  checkBatch(ds, indices, out, labels);
  const int h = ds.height, w = ds.width, c = ds.channels;
  const size_t elems = ds.imageElems();
  for (size_t s = 0; s < indices.size(); ++s) {
    labels[s] = ds.labels[indices[s]];
    Rng rng(hashSeed({aug.seed, aug.epoch, static_cast<uint64_t>(indices[s]), 0xA06ull}));
    const bool flip = aug.flip && rng.bernoulli(0.5);
    const int dy =
        aug.padding > 0 ? static_cast<int>(rng.uniformInt(-aug.padding, aug.padding)) : 0;
    const int dx =
        aug.padding > 0 ? static_cast<int>(rng.uniformInt(-aug.padding, aug.padding)) : 0;
    const uint8_t* src = ds.image(indices[s]);
    float* dst = out.data() + s * elems;
    // out(y, x) = flipped(y + dy, x + dx), 0-valued pixels outside the image.
    for (int y = 0; y < h; ++y) {
      const int sy = y + dy;
      for (int x = 0; x < w; ++x) {
        const int fx = x + dx;
        const int sx = flip ? w - 1 - fx : fx;
        const bool inside = sy >= 0 && sy < h && fx >= 0 && fx < w;
        float* px = dst + (static_cast<size_t>(y) * w + x) * c;
        for (int k = 0; k < c; ++k) {
          const uint8_t v = inside ? src[(static_cast<size_t>(sy) * w + sx) * c + k] : 0;
          px[k] = lut.channel(k)[v];
        }
      }
    }
  }
}

}  // namespace datasets
