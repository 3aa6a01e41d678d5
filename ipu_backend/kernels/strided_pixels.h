// Internal to the fused kernels: a strided 1x1 unpadded convolution (ResNet's downsampling
// shortcuts) is a GEMM over the subsampled pixels x[n, oh*sh, ow*sw, :]. StridedPixels copies
// them into a thread's [M, C] buffer for the forward and weight-gradient passes, and copies a
// [M, C] data gradient back out to the sampled pixels (the others get zero gradient). oneDNN's
// direct convolutions spend most of their time on such shapes outside the GEMM: see
// fused_onednn.cpp for the figures (f32 and bf16).
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"
#include "ipu_backend/kernels/onednn_common.h"

namespace ipu::kernels::fused::detail {

inline bool pointwiseStrided(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && (s.strideH > 1 || s.strideW > 1) && s.padTop == 0 &&
         s.padLeft == 0 && s.padBottom == 0 && s.padRight == 0 && s.groups == 1 && s.dilH == 1 &&
         s.dilW == 1;
}

// Elements of `elementBytes` bytes (4: f32, 2: bf16 bits); all-zero bytes are +0 in both.
class StridedPixels {
 public:
  StridedPixels(const Conv2dShape& s, std::size_t elementBytes)
      : s_(s),
        m_(s.n * s.outH() * s.outW()),
        pixelBytes_(static_cast<std::size_t>(s.c) * elementBytes) {
    (void)buffer();  // grows this thread's buffer now rather than in a step
  }
  i64 m() const { return m_; }
  // This thread's [M, C] pixel matrix (valid until the next kernel runs on the thread).
  void* buffer() const {
    thread_local std::vector<std::byte> b;
    const std::size_t bytes = static_cast<std::size_t>(m_) * pixelBytes_;
    if (b.size() < bytes) b.resize(bytes);
    return b.data();
  }
  // buffer[p, :] = x[pixel p sampled].
  void gather(const void* x) const {
    const auto* in = static_cast<const std::byte*>(x);
    auto* out = static_cast<std::byte*>(buffer());
    syncThreads();
    const i64 oh = s_.outH(), ow = s_.outW();
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < m_; ++p) {
      const i64 n = p / (oh * ow), y = p / ow % oh, xo = p % ow;
      const i64 pixel = (n * s_.h + y * s_.strideH) * s_.w + xo * s_.strideW;
      std::memcpy(out + static_cast<std::size_t>(p) * pixelBytes_,
                  in + static_cast<std::size_t>(pixel) * pixelBytes_, pixelBytes_);
    }
  }
  // dx = buffer at the sampled pixels, zero elsewhere.
  void scatter(void* dx) const {
    auto* out = static_cast<std::byte*>(dx);
    const auto* in = static_cast<const std::byte*>(buffer());
    syncThreads();
    const i64 oh = s_.outH(), ow = s_.outW();
    const std::size_t image = static_cast<std::size_t>(s_.h * s_.w) * pixelBytes_;
#pragma omp parallel for schedule(static)
    for (i64 n = 0; n < s_.n; ++n) {
      std::memset(out + static_cast<std::size_t>(n) * image, 0, image);
      for (i64 y = 0; y < oh; ++y)
        for (i64 xo = 0; xo < ow; ++xo) {
          const i64 src = (n * oh + y) * ow + xo;
          const i64 dst = (n * s_.h + y * s_.strideH) * s_.w + xo * s_.strideW;
          std::memcpy(out + static_cast<std::size_t>(dst) * pixelBytes_,
                      in + static_cast<std::size_t>(src) * pixelBytes_, pixelBytes_);
        }
    }
  }

 private:
  Conv2dShape s_;
  i64 m_;
  std::size_t pixelBytes_;
};

}  // namespace ipu::kernels::fused::detail
