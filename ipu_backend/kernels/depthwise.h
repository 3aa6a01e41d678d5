// Internal: our depthwise convolutions (one channel per group, NHWC): the weight gradient in f32
// and bf16 (f32 sums), the forward and data gradient in f32.
// oneDNN 2.6 has a dedicated depthwise weight-gradient kernel only for some shapes: its 5x5
// ones (EfficientNet's) fall back to its generic direct kernel at ~1.6 GMAC/s, a fifth of an
// EfficientNet-B4 step at 380x380 (bf16: two fifths); this loop runs them vectorised over the
// channels. DepthwiseConv runs the forward and the data gradient as one loop over tap tables;
// the kernels take it only for the f32 data gradient of a strided convolution, where oneDNN's
// NHWC kernel lost: 14.8 against 23.2 ms (190x190x144, 3x3 stride 2), 8.2 against 10.7 and 2.1
// against 2.9 ms (EfficientNet-B4's f32 step at 380x380 batch 8, one thread's CPU profile,
// interleaved). Elsewhere it was even or behind (3x3 stride 1 over 95x95x192: 19.9 against
// 15.7 ms; its forwards 206 against 201 ms in all), and in bf16 oneDNN's avx512_core_bf16
// kernels ran ~1.9x faster than this loop with widening loads.
#pragma once

#include <vector>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused::detail {

// A depthwise convolution: groups == C == K (one input and one output channel per group).
bool depthwiseShape(const Conv2dShape& s);
// ... with a stride above 1 (its data gradient's taps skip rows or columns).
bool depthwiseStrided(const Conv2dShape& s);

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

// The forward y = x (*) w or the data gradient dx = dy (*)^T w. Both are
//   out[n, i, j, c] = sum over the row taps (r, i') of i and the column taps (q, j') of j of
//                     in[n, i', j', c] * w[c, r, q]
// where the forward's taps of output row i are the input rows i' = i * stride - pad + r * dil
// inside the image, and the data gradient's taps of input row i are the output rows i' with
// i' * stride - pad + r * dil = i (the same for columns). The tables are built once; the loop
// walks them per output pixel, vectorised over up to four registers of channels (independent
// sums, so the FMA latency is hidden); inside the image, where a row's column taps are evenly
// spaced, eight pixels at a time share each weight load. The sum's order is the taps' (rows, then
// columns): the same bits for any thread count. bf16: in, w and out in bf16, products and sums in
// f32, out rounded to nearest even once.
class DepthwiseConv {
 public:
  enum class Pass { Forward, BackwardData };
  DepthwiseConv(Pass pass, const Conv2dShape& s);
  // Forward: (x, w) -> y; BackwardData: (dy, w) -> dx. w: [C, R, S] (the gohwi weights).
  void run(const float* in, const float* w, float* out) const;

  struct Tap {
    i64 weight;  // the tap's offset in the [R, S, C] weights: r * S * C or q * C
    i64 input;   // the input row's index (rows) or the input column's offset j' * C (columns)
  };
  // Taps of one output row (or column): taps[begin[i] .. begin[i + 1]).
  struct Taps {
    std::vector<i64> begin;
    std::vector<Tap> taps;
  };
  // The output columns [first, last) whose S column taps all lie inside the input, at input
  // columns col * step + offset + q * dil (q = 0..S-1; the data gradient: stride 1 only). There
  // a block of output pixels shares each weight load.
  struct RegularColumns {
    i64 first = 0, last = 0, step = 1, offset = 0, dil = 1, s = 1;
  };

 private:
  float* weights() const;  // this thread's [R, S, C] f32 copy of w, refreshed by run()

  Conv2dShape s_;
  i64 inRows_ = 0, inCols_ = 0, outRows_ = 0, outCols_ = 0;
  Taps rows_, cols_;
  RegularColumns regular_;
  int team_ = 1;
};

}  // namespace ipu::kernels::fused::detail
