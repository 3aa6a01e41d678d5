#include "models/resnet50/golden_weights.h"

#include <cmath>
#include <stdexcept>

namespace ipu::models {
namespace {

constexpr std::uint64_t kGolden = 2654435761u;  // Knuth's multiplicative hash constant

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::uint32_t fmix32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

std::uint32_t goldenBits(std::uint32_t h, i64 i) {
  return fmix32(static_cast<std::uint32_t>(h + static_cast<std::uint64_t>(i) * kGolden));
}

}  // namespace

std::uint32_t fnv1a32(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
  return h;
}

std::vector<float> goldenTensor(const std::string& name, i64 count, const GoldenSpec& spec) {
  const std::uint32_t h = fnv1a32(name);
  std::vector<float> v(static_cast<size_t>(count));
  for (i64 i = 0; i < count; ++i) {
    const double u = static_cast<double>(goldenBits(h, i)) / 4294967296.0 - 0.5;
    v[i] = static_cast<float>(spec.offset + spec.scale * u);
  }
  return v;
}

GoldenSpec goldenSpecFor(const std::string& name, const Shape& shape) {
  if (endsWith(name, "_weight")) {
    // conv [K,R,S,C]: fan_in = R*S*C; dense [in,out]: fan_in = in.
    i64 fanIn = 1;
    if (shape.size() == 4)
      fanIn = shape[1] * shape[2] * shape[3];
    else if (shape.size() == 2)
      fanIn = shape[0];
    else
      throw std::invalid_argument("goldenSpecFor: unexpected weight rank for " + name);
    return {0.0, 2.0 * std::sqrt(3.0 / static_cast<double>(fanIn))};
  }
  // Small last-BN gammas (as zero-init-last-gamma ResNets train): with gamma ~1 the residual
  // stream grows block by block and the float32 gradients of the 16-block net become noisy.
  if (endsWith(name, "_bn3_gamma")) return {0.2, 0.1};
  if (endsWith(name, "_gamma") || endsWith(name, "_running_var")) return {1.0, 0.5};
  if (endsWith(name, "_beta") || endsWith(name, "_bias") || endsWith(name, "_running_mean"))
    return {0.0, 0.2};
  throw std::invalid_argument("goldenSpecFor: no golden spec for " + name);
}

std::vector<float> goldenImages(i64 count) {
  return goldenTensor("images", count, {0.0, 2.0});
}

std::vector<std::int32_t> goldenLabels(i64 n, int classes) {
  const std::uint32_t h = fnv1a32("labels");
  std::vector<std::int32_t> v(static_cast<size_t>(n));
  for (i64 i = 0; i < n; ++i)
    v[i] = static_cast<std::int32_t>(goldenBits(h, i) % static_cast<std::uint32_t>(classes));
  return v;
}

}  // namespace ipu::models
