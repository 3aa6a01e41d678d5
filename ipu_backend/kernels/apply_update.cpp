#include "ipu_backend/kernels/apply_update.h"

namespace ipu::kernels {
namespace {

// c * x and f * s with c, f = 1, or 1 * target, are exact: only the number of terms and whether
// the target is read select a loop.
template <int K, bool ReadsTarget>
void loop(float keep, float f, const float* const* x, const float* c, float* t, i64 n) {
  const float *x0 = x[0], *x1 = K > 1 ? x[1] : x[0], *x2 = K > 2 ? x[2] : x[0];
  const float c0 = c[0], c1 = K > 1 ? c[1] : 0.0f, c2 = K > 2 ? c[2] : 0.0f;
#pragma omp simd
  for (i64 i = 0; i < n; ++i) {
    float s = c0 * x0[i];
    if constexpr (K > 1) s = s + c1 * x1[i];
    if constexpr (K > 2) s = s + c2 * x2[i];
    s = f * s;
    if constexpr (ReadsTarget)
      t[i] = keep * t[i] + s;
    else
      t[i] = s;
  }
}

template <int K>
void dispatch(float keep, float f, const float* const* x, const float* c, float* t, i64 n) {
  if (keep == 0.0f)
    loop<K, false>(keep, f, x, c, t, n);
  else
    loop<K, true>(keep, f, x, c, t, n);
}

}  // namespace

void applyUpdate(float keep, float factor, int k, const float* const* x, const float* c,
                 float* target, i64 count) {
  if (k == 1) dispatch<1>(keep, factor, x, c, target, count);
  if (k == 2) dispatch<2>(keep, factor, x, c, target, count);
  if (k == 3) dispatch<3>(keep, factor, x, c, target, count);
}

}  // namespace ipu::kernels
