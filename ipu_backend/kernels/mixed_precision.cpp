#include "ipu_backend/kernels/mixed_precision.h"

namespace ipu::kernels {

void scaledSgdMomentumUpdate(float lr, float momentum, float weightDecay, bool nesterov,
                             float inverseScale, float overflow, float* w, float* v, const float* g,
                             i64 count) {
  if (overflow != 0.0f) return;  // NaN compares unequal too
  for (i64 i = 0; i < count; ++i) {
    const float grad = g[i] * inverseScale + weightDecay * w[i];
    if (momentum == 0.0f) {
      w[i] -= lr * grad;
      continue;
    }
    v[i] = momentum * v[i] + grad;
    w[i] -= lr * (nesterov ? grad + momentum * v[i] : v[i]);
  }
}

}  // namespace ipu::kernels
