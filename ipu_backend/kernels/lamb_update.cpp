#include "ipu_backend/kernels/lamb_update.h"

#include <cmath>

namespace ipu::kernels {
namespace {

// apply_update's sum for one addend (kernels/apply_update.cpp): keep == 0 does not read target.
template <bool ReadsTarget>
inline float moment(float keep, float factor, float c, float x, float target) {
  float s = c * x;
  s = factor * s;
  return ReadsTarget ? keep * target + s : s;
}

template <bool MKeep, bool VKeep>
void loop(const LambMoments& a, i64 begin, i64 count) {
  // Locals, not the struct's fields: GCC vectorises the loop only when no store may alias what
  // it reads.
  const float* __restrict g = a.g + begin;
  const float* __restrict w = a.w + begin;
  float* __restrict m = a.m + begin;
  float* __restrict v = a.v + begin;
  float* __restrict u = a.u + begin;
  const float clip = a.clip, mKeep = a.mKeep, mFactor = a.mFactor, mC = a.mC, vKeep = a.vKeep,
              vFactor = a.vFactor, vC = a.vC, mCorrection = a.mCorrection,
              vCorrection = a.vCorrection, eps = a.eps, decay = a.decay;
  const bool mWrite = !a.mSkipped, vWrite = !a.vSkipped;
#pragma omp simd
  for (i64 i = 0; i < count; ++i) {
    const float gc = g[i] * clip;
    float mi = m[i], vi = v[i];
    if (mWrite) mi = moment<MKeep>(mKeep, mFactor, mC, gc, mi);
    if (vWrite) vi = moment<VKeep>(vKeep, vFactor, vC, gc * gc, vi);
    m[i] = mi;
    v[i] = vi;
    const float denominator = std::sqrt(vi / vCorrection) + eps;
    u[i] = (mi / mCorrection) / denominator + decay * w[i];
  }
}

}  // namespace

void lambMoments(const LambMoments& a, i64 begin, i64 count) {
  if (a.mKeep != 0.0f && a.vKeep != 0.0f) return loop<true, true>(a, begin, count);
  if (a.mKeep != 0.0f) return loop<true, false>(a, begin, count);
  if (a.vKeep != 0.0f) return loop<false, true>(a, begin, count);
  loop<false, false>(a, begin, count);
}

}  // namespace ipu::kernels
