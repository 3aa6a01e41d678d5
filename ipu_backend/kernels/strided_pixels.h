// Internal to the fused kernels: a strided 1x1 unpadded convolution (ResNet's downsampling
// shortcuts) is a GEMM over the subsampled pixels x[n, oh*sh, ow*sw, :]. StridedPixels copies
// them into a thread's [M, C] buffer for the forward and weight-gradient passes, and copies a
// [M, C] data gradient back out to the sampled pixels (the others get zero gradient). oneDNN's
// direct convolutions spend most of their time on such shapes outside the GEMM: see
// fused_onednn.cpp (f32) and fused_bf16.cpp (bf16) for the figures.
#pragma once

#include <algorithm>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"
#include "ipu_backend/kernels/onednn_common.h"

namespace ipu::kernels::fused::detail {

inline bool pointwiseStrided(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && (s.strideH > 1 || s.strideW > 1) && s.padTop == 0 &&
         s.padLeft == 0 && s.padBottom == 0 && s.padRight == 0 && s.groups == 1 && s.dilH == 1 &&
         s.dilW == 1;
}

// T: the stored element (float, or std::uint16_t for bf16 bits; T{} is +0 in both).
template <typename T>
class StridedPixels {
 public:
  explicit StridedPixels(const Conv2dShape& s) : s_(s), m_(s.n * s.outH() * s.outW()) {
    (void)buffer();  // grows this thread's buffer now rather than in a step
  }
  i64 m() const { return m_; }
  // This thread's [M, C] pixel matrix (valid until the next kernel runs on the thread).
  T* buffer() const {
    thread_local std::vector<T> b;
    if (static_cast<i64>(b.size()) < m_ * s_.c) b.resize(static_cast<size_t>(m_ * s_.c));
    return b.data();
  }
  // buffer[p, :] = x[pixel p sampled].
  void gather(const void* x) const {
    const auto* in = static_cast<const T*>(x);
    T* out = buffer();
    syncThreads();
    const i64 oh = s_.outH(), ow = s_.outW();
#pragma omp parallel for schedule(static)
    for (i64 p = 0; p < m_; ++p) {
      const i64 n = p / (oh * ow), y = p / ow % oh, xo = p % ow;
      const T* src = in + ((n * s_.h + y * s_.strideH) * s_.w + xo * s_.strideW) * s_.c;
      std::copy(src, src + s_.c, out + p * s_.c);
    }
  }
  // dx = buffer at the sampled pixels, zero elsewhere.
  void scatter(void* dx) const {
    auto* out = static_cast<T*>(dx);
    const T* in = buffer();
    syncThreads();
    const i64 oh = s_.outH(), ow = s_.outW(), image = s_.h * s_.w * s_.c;
#pragma omp parallel for schedule(static)
    for (i64 n = 0; n < s_.n; ++n) {
      std::fill(out + n * image, out + (n + 1) * image, T{});
      for (i64 y = 0; y < oh; ++y)
        for (i64 xo = 0; xo < ow; ++xo) {
          const T* src = in + ((n * oh + y) * ow + xo) * s_.c;
          std::copy(src, src + s_.c,
                    out + ((n * s_.h + y * s_.strideH) * s_.w + xo * s_.strideW) * s_.c);
        }
    }
  }

 private:
  Conv2dShape s_;
  i64 m_;
};

}  // namespace ipu::kernels::fused::detail
