// Loss scaling for 16-bit training: the loss (hence every gradient) is multiplied by S so small
// gradients do not underflow f16; gradients are unscaled (x 1/S) before the weight update.
//
//   Static(S)   S never changes (Graphcore's ResNet-50 "16.16" runs use S = 128).
//   Dynamic     start at S0; on a step whose gradients contain Inf/NaN, multiply S by the backoff
//               factor (0.5) and skip the step; after `growthInterval` consecutive clean steps
//               multiply S by the growth factor (2). S is clamped to [minScale, maxScale].
//   None        S = 1 (f32 / bf16 training); the finiteness check still applies.
// In every mode a non-finite step is skipped by default (applying it would write Inf/NaN into
// the weights); set skipNonFiniteSteps = false to count overflows but apply anyway.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ipu_backend/precision/half.h"

namespace ipu::precision {

enum class LossScalingMode : std::uint8_t { None, Static, Dynamic };

struct LossScalingConfig {
  LossScalingMode mode = LossScalingMode::None;
  float scale = 1.0f;  // Static: the scale; Dynamic: the initial scale
  float backoffFactor = 0.5f;
  float growthFactor = 2.0f;
  i64 growthInterval = 2000;  // clean steps between two growths
  float minScale = 1.0f;
  float maxScale = 16777216.0f;  // 2^24
  bool skipNonFiniteSteps = true;

  static LossScalingConfig none() { return {}; }
  static LossScalingConfig fixed(float s) {
    LossScalingConfig c;
    c.mode = LossScalingMode::Static;
    c.scale = s;
    return c;
  }
  static LossScalingConfig dynamic(float initial = 65536.0f, i64 interval = 2000) {
    LossScalingConfig c;
    c.mode = LossScalingMode::Dynamic;
    c.scale = initial;
    c.growthInterval = interval;
    return c;
  }
  bool operator==(const LossScalingConfig&) const = default;
};

// What one update() decided.
struct LossScaleStepReport {
  i64 step = 0;            // 0-based index of the step this report is about
  float scaleUsed = 1.0f;  // the scale the step's gradients were computed with
  float nextScale = 1.0f;  // the scale for the next step
  bool overflow = false;   // gradients contained Inf or NaN
  bool applied = true;     // false: the optimizer must skip this step
  bool scaleChanged = false;
};

class LossScaler {
 public:
  // Throws std::invalid_argument for a non-positive / non-finite scale, factors outside
  // (0,1) / (1,inf), growthInterval < 1, or minScale > maxScale.
  explicit LossScaler(const LossScalingConfig& config = {});

  float scale() const { return scale_; }
  float inverseScale() const { return 1.0f / scale_; }
  const LossScalingConfig& config() const { return config_; }

  // Record the outcome of the current step; returns whether to apply it.
  bool update(bool overflow);
  const LossScaleStepReport& lastReport() const { return last_; }

  i64 steps() const { return steps_; }
  i64 skippedSteps() const { return skipped_; }
  i64 overflowEvents() const { return overflows_; }
  // Steps since the last overflow (all steps when none happened yet).
  i64 stepsSinceLastOverflow() const { return sinceOverflow_; }

 private:
  LossScalingConfig config_;
  float scale_ = 1.0f;
  i64 steps_ = 0, skipped_ = 0, overflows_ = 0, sinceOverflow_ = 0;
  i64 cleanStreak_ = 0;  // clean steps since the last scale change (drives growth)
  LossScaleStepReport last_;
};

// ---- finiteness (true when no element is Inf or NaN; an empty array is finite) ---------------
bool allFinite(const float* g, i64 n);
bool allFinite(const f16* g, i64 n);
bool allFinite(const bf16* g, i64 n);
bool allFinite(std::span<const std::span<const float>> tensors);
bool allFinite(std::span<const std::span<const f16>> tensors);

// ---- host-side unscaling: g *= 1/scale (exact for power-of-two scales) ------------------------
void unscale(float* g, i64 n, float scale);
// f16 in place: widen, multiply, round back RNE (exact for power-of-two scales unless the
// result becomes subnormal).
void unscale(f16* g, i64 n, float scale);
// f16 gradients -> unscaled f32 (for f32 master weights, "16.32").
void unscaleToF32(const f16* in, float* out, i64 n, float scale);

std::string toString(LossScalingMode m);

}  // namespace ipu::precision
