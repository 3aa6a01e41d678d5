// Internal: our depthwise convolution weight gradient (one channel per group, NHWC; f32 or bf16
// operands, f32 sums).
// oneDNN 2.6 has a dedicated depthwise weight-gradient kernel only for some shapes: its 5x5
// ones (EfficientNet's) fall back to its generic direct kernel at ~1.6 GMAC/s, a fifth of an
// EfficientNet-B4 step at 380x380 (bf16: two fifths); this loop runs them vectorised over the
// channels.
#pragma once

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused::detail {

// A depthwise convolution: groups == C == K (one input and one output channel per group).
bool depthwiseShape(const Conv2dShape& s);

// dw[c, r, s] = sum over n, oh, ow of x[n, ih, iw, c] * dy[n, oh, ow, c] (ih, iw the tap's
// input pixel; padding reads as 0). The rows (n, oh) are split over the OpenMP team into
// per-thread partial sums, added in thread order: the same bits for a given thread count. bf16:
// x, dy and dw in bf16, products and sums in f32, dw rounded once.
class DepthwiseWeightGrad {
 public:
  DepthwiseWeightGrad(const Conv2dShape& s, ElementType type);
  void run(const void* x, const void* dy, void* dw) const;

 private:
  float* partials() const;  // this thread's buffer of team x R x S x C partial sums

  Conv2dShape s_;
  ElementType type_;
  int team_ = 1;
};

}  // namespace ipu::kernels::fused::detail
