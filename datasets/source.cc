#include "datasets/source.h"

#include <fmt/format.h>

#include "datasets/error.h"

namespace datasets {

std::string Source::describe(int64_t index) const {
  return fmt::format("sample {}", index);
}

InMemorySource::InMemorySource(std::shared_ptr<const ImageDataset> data, const Normalization& norm)
    : data_(std::move(data)), lut_(norm, data_->channels) {}

void InMemorySource::load(int64_t index, Rng&, float* outNHWC, int32_t* label) const {
  const int64_t idx[1] = {index};
  fillBatch(*data_, idx, lut_, std::span<float>(outNHWC, data_->imageElems()),
            std::span<int32_t>(label, 1));
}

SyntheticSource::SyntheticSource(const SyntheticSpec& spec) : spec_(spec) {
  if (spec.count < 0 || spec.height <= 0 || spec.width <= 0 || spec.channels <= 0 ||
      spec.numClasses <= 0) {
    throw DatasetError(fmt::format("synthetic source: invalid shape count={} {}x{}x{} classes={}",
                                   spec.count, spec.height, spec.width, spec.channels,
                                   spec.numClasses));
  }
}

void SyntheticSource::load(int64_t index, Rng&, float* outNHWC, int32_t* label) const {
  if (index < 0 || index >= spec_.count) {
    throw DatasetError(
        fmt::format("synthetic source: index {} outside 0..{}", index, spec_.count - 1));
  }
  // Content depends on (seed, index) only, not on the epoch: the same sample every epoch.
  Rng r(hashSeed({spec_.seed, static_cast<uint64_t>(index), 0x5A7}));
  *label = static_cast<int32_t>(r.uniformInt(0, spec_.numClasses - 1));
  const size_t n = shape().elems();
  constexpr float kScale = 4.0f / 4294967296.0f;
  for (size_t i = 0; i < n; i += 2) {
    const uint64_t v = r.next();
    outNHWC[i] = static_cast<float>(static_cast<uint32_t>(v)) * kScale - 2.f;
    if (i + 1 < n)
      outNHWC[i + 1] = static_cast<float>(static_cast<uint32_t>(v >> 32)) * kScale - 2.f;
  }
}

}  // namespace datasets
