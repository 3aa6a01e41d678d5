// LAMB's per-weight arithmetic before the trust ratio (optimizers/ lowers it to these ops; the
// engine's update group, engine/host_fusion.h, runs them) in one loop over the elements:
//   gc = g * clip
//   m  = m_keep * m + m_factor * (m_c * gc)        (apply_update; unchanged when m_skipped)
//   v  = v_keep * v + v_factor * (v_c * (gc * gc)) (apply_update; unchanged when v_skipped)
//   u  = (m / m_correction) / (sqrt(v / v_correction) + eps) + decay * w
// Each product, quotient and sum rounded in that order, as the unary / binary element functions
// and apply_update's loop round them (this kernel is compiled without fused multiply-add): the
// results are the ops' to the bit. Running the ops one after another over cache-sized chunks
// (a load / store pass each, g, m, v and w read in bursts) took ~3x as long on Zen 4.
#pragma once

#include <cstdint>

namespace ipu::kernels {

using i64 = std::int64_t;

struct LambMoments {
  const float* g = nullptr;
  float clip = 1.0f;
  float* m = nullptr;
  float mKeep = 0.0f, mFactor = 1.0f, mC = 1.0f;
  bool mSkipped = false;
  float* v = nullptr;
  float vKeep = 0.0f, vFactor = 1.0f, vC = 1.0f;
  bool vSkipped = false;
  float mCorrection = 1.0f, vCorrection = 1.0f, eps = 0.0f;
  const float* w = nullptr;
  float decay = 0.0f;
  float* u = nullptr;
};

// Elements [begin, begin + count).
void lambMoments(const LambMoments& a, i64 begin, i64 count);

}  // namespace ipu::kernels
