// Internal to the fused kernels: a Winograd F(4x4, 3x3) convolution of our own (Lavin & Gray
// 2016), for the 3x3 stride-1 f32 convolutions of CPUs where oneDNN has no Winograd (AVX2: its
// Winograd kernels need AVX-512). Each pass is three steps over whole tensors:
//   transform   the input's 6x6 tiles (stride 4) and the 3x3 weights into the Winograd domain,
//               [36][tiles][channels] and [36][K][C], vectorised over channels (OpenMP loops);
//   36 GEMMs    one oneDNN batched matmul, the multiply-accumulates: 36 per 4x4 outputs and
//               channel pair instead of 144 (direct), 4x fewer;
//   transform   back, each 6x6 product to a 4x4 output tile.
// The data gradient is the same convolution of dy with the weights rotated by 180 degrees and
// C, K swapped (padding 2 - p); the weight gradient transforms x's tiles and dy's 4x4 tiles
// (A dy A^T), multiplies them per Winograd point over the tiles and maps each 6x6 sum back to
// 3x3 (G^T Z G). f32 rounding differs from the direct sums (about 1e-6 relative per point for
// ResNet-50's magnitudes, as oneDNN's own F(4x4, 3x3)).
#pragma once

#include <memory>

#include "ipu_backend/kernels/kernel_types.h"

namespace ipu::kernels::fused::detail {

enum class WinogradPass {
  Forward,         // (x, w) -> y
  BackwardData,    // (dy, w) -> dx
  BackwardFilter,  // (x, dy) -> dw
};

// 3x3, stride 1, no dilation, one group, padding <= 2 on every side: the convolutions this
// kernel computes (which of them it is chosen for is the kernel rule's business).
bool winogradF43Computes(const Conv2dShape& s);

class WinogradF43 {
 public:
  WinogradF43(WinogradPass pass, const Conv2dShape& s);
  ~WinogradF43();
  void run(const float* in0, const float* in1, float* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ipu::kernels::fused::detail
