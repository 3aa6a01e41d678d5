// Internal: our depthwise convolution weight gradient (one channel per group, f32, NHWC).
// oneDNN 2.6 has a dedicated depthwise weight-gradient kernel only for some shapes: its 5x5
// ones (EfficientNet's) fall back to its generic direct kernel at ~1.6 GMAC/s, a fifth of an
// EfficientNet-B4 step at 380x380; this loop runs them vectorised over the channels.
#pragma once

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused::detail {

// A depthwise convolution: groups == C == K (one input and one output channel per group).
bool depthwiseShape(const Conv2dShape& s);

// dw[c, r, s] = sum over n, oh, ow of x[n, ih, iw, c] * dy[n, oh, ow, c] (ih, iw the tap's
// input pixel; padding reads as 0). The rows (n, oh) are split over the OpenMP team into
// per-thread partial sums, added in thread order: the same bits for a given thread count.
class DepthwiseWeightGrad {
 public:
  explicit DepthwiseWeightGrad(const Conv2dShape& s);
  void run(const float* x, const float* dy, float* dw) const;

 private:
  float* partials() const;  // this thread's buffer of team x R x S x C partial sums

  Conv2dShape s_;
  int team_ = 1;
};

}  // namespace ipu::kernels::fused::detail
