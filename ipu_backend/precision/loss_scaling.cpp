#include "ipu_backend/precision/loss_scaling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace ipu::precision {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("LossScaler: " + what);
}

// Non-finite <=> |bits| >= the Inf pattern, so a max-reduction over magnitudes decides; it
// vectorises cleanly. Blocks let a non-finite gradient stop the scan early.
template <typename Bits, Bits kInf, typename T>
bool allFiniteBits(const T* g, i64 n) {
  constexpr Bits kAbs = static_cast<Bits>(~Bits{0} >> 1);
  constexpr i64 kBlock = 4096;
  for (i64 i = 0; i < n; i += kBlock) {
    const i64 end = std::min(n, i + kBlock);
    Bits m = 0;
    for (i64 k = i; k < end; ++k) m = std::max<Bits>(m, std::bit_cast<Bits>(g[k]) & kAbs);
    if (m >= kInf) return false;
  }
  return true;
}

}  // namespace

std::string toString(LossScalingMode m) {
  switch (m) {
    case LossScalingMode::None:
      return "none";
    case LossScalingMode::Static:
      return "static";
    case LossScalingMode::Dynamic:
      return "dynamic";
  }
  return "?";
}

LossScaler::LossScaler(const LossScalingConfig& c) : config_(c) {
  const bool dyn = c.mode == LossScalingMode::Dynamic;
  if (c.mode == LossScalingMode::None) config_.scale = 1.0f;
  check(std::isfinite(config_.scale) && config_.scale > 0,
        "scale must be positive and finite, got " + std::to_string(c.scale));
  if (dyn) {
    check(c.backoffFactor > 0 && c.backoffFactor < 1,
          "backoff factor must be in (0, 1), got " + std::to_string(c.backoffFactor));
    check(std::isfinite(c.growthFactor) && c.growthFactor > 1,
          "growth factor must be > 1, got " + std::to_string(c.growthFactor));
    check(c.growthInterval >= 1,
          "growth interval must be >= 1, got " + std::to_string(c.growthInterval));
    check(c.minScale > 0 && c.minScale <= c.maxScale && std::isfinite(c.maxScale),
          "need 0 < minScale <= maxScale < inf");
    config_.scale = std::clamp(config_.scale, c.minScale, c.maxScale);
  }
  scale_ = config_.scale;
  last_.scaleUsed = last_.nextScale = scale_;
  last_.step = -1;
}

bool LossScaler::update(bool overflow) {
  LossScaleStepReport r;
  r.step = steps_++;
  r.scaleUsed = scale_;
  r.overflow = overflow;
  r.applied = !(overflow && config_.skipNonFiniteSteps);
  if (overflow) {
    ++overflows_;
    sinceOverflow_ = 0;
    cleanStreak_ = 0;
    if (config_.mode == LossScalingMode::Dynamic)
      scale_ = std::max(scale_ * config_.backoffFactor, config_.minScale);
  } else {
    ++sinceOverflow_;
    if (config_.mode == LossScalingMode::Dynamic && ++cleanStreak_ >= config_.growthInterval) {
      scale_ = std::min(scale_ * config_.growthFactor, config_.maxScale);
      cleanStreak_ = 0;
    }
  }
  if (!r.applied) ++skipped_;
  r.nextScale = scale_;
  r.scaleChanged = scale_ != r.scaleUsed;
  last_ = r;
  return r.applied;
}

bool allFinite(const float* g, i64 n) {
  return allFiniteBits<std::uint32_t, 0x7f800000u>(g, n);
}
bool allFinite(const f16* g, i64 n) {
  return allFiniteBits<std::uint16_t, 0x7c00u>(g, n);
}
bool allFinite(const bf16* g, i64 n) {
  return allFiniteBits<std::uint16_t, 0x7f80u>(g, n);
}
bool allFinite(std::span<const std::span<const float>> tensors) {
  for (auto t : tensors)
    if (!allFinite(t.data(), static_cast<i64>(t.size()))) return false;
  return true;
}
bool allFinite(std::span<const std::span<const f16>> tensors) {
  for (auto t : tensors)
    if (!allFinite(t.data(), static_cast<i64>(t.size()))) return false;
  return true;
}

void unscale(float* g, i64 n, float scale) {
  const float inv = 1.0f / scale;
  for (i64 i = 0; i < n; ++i) g[i] *= inv;
}

void unscale(f16* g, i64 n, float scale) {
  const float inv = 1.0f / scale;
  constexpr i64 kBlock = 256;
  float tmp[kBlock];
  for (i64 i = 0; i < n; i += kBlock) {
    const i64 m = std::min(kBlock, n - i);
    toFloat(g + i, tmp, m);
    for (i64 k = 0; k < m; ++k) tmp[k] *= inv;
    toF16(tmp, g + i, m);
  }
}

void unscaleToF32(const f16* in, float* out, i64 n, float scale) {
  const float inv = 1.0f / scale;
  toFloat(in, out, n);
  for (i64 i = 0; i < n; ++i) out[i] *= inv;
}

}  // namespace ipu::precision
