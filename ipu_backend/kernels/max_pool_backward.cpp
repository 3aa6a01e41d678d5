// Max-pool backward over NHWC as one pass per image: each output position finds its window's
// first maximum per channel (scan order, strict >, as reference::maxPoolBackward) and adds dy
// there. dx rows are zeroed just before the first window that reaches them, so the zeroing
// and the scatter hit the same cache lines (oneDNN zero-fills all of dx first, then scatters:
// two passes over dx, plus the forward it reruns for its argmax workspace).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/parallel_ranges.h"

namespace ipu::kernels::fused {
namespace {

constexpr i64 kBlock = 16;  // channels whose maxima and argmaxes stay in registers

// One window over W channels: the first maximum of x over `cells` (offsets, scan order), then
// dy added to dx at that cell.
template <i64 W>
inline void windowBlock(const float* x, float* dx, const float* g, const i64* cells, int count) {
#if defined(__AVX512F__)
  if constexpr (W == 16) {
    __m512 best = _mm512_loadu_ps(x + cells[0]), arg = _mm512_setzero_ps();
    for (int k = 1; k < count; ++k) {
      const __m512 v = _mm512_loadu_ps(x + cells[k]);
      const __mmask16 more = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
      best = _mm512_mask_mov_ps(best, more, v);
      arg = _mm512_mask_mov_ps(arg, more, _mm512_set1_ps(static_cast<float>(k)));
    }
    const __m512 gv = _mm512_loadu_ps(g);
    for (int k = 0; k < count; ++k) {
      const __mmask16 here =
          _mm512_cmp_ps_mask(arg, _mm512_set1_ps(static_cast<float>(k)), _CMP_EQ_OQ);
      const __m512 d = _mm512_loadu_ps(dx + cells[k]);
      _mm512_storeu_ps(dx + cells[k], _mm512_mask_add_ps(d, here, d, gv));
    }
    return;
  }
#endif
  float best[W], arg[W];
  for (i64 j = 0; j < W; ++j) best[j] = x[cells[0] + j], arg[j] = 0.0f;
  for (int k = 1; k < count; ++k) {
    const float* v = x + cells[k];
    for (i64 j = 0; j < W; ++j) {
      if (v[j] > best[j]) best[j] = v[j], arg[j] = static_cast<float>(k);
    }
  }
  for (int k = 0; k < count; ++k) {
    float* d = dx + cells[k];
    for (i64 j = 0; j < W; ++j)
      if (arg[j] == static_cast<float>(k)) d[j] += g[j];
  }
}

}  // namespace

struct MaxPoolBackward::Impl {
  Pool2dShape s;
};

MaxPoolBackward::MaxPoolBackward(const Pool2dShape& s) : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.s = s;
  if (s.kh * s.kw > 255 || s.strideH < 1 || s.strideW < 1)
    throw std::invalid_argument("MaxPoolBackward: windows over 255 cells or stride < 1");
}

MaxPoolBackward::~MaxPoolBackward() = default;

void MaxPoolBackward::run(const float* x, const float* dy, float* dx) {
  Impl& p = *impl_;
  const Pool2dShape& s = p.s;
  const i64 oh = s.outH(), ow = s.outW(), c = s.c, rowElems = s.w * c;
  auto image = [&](i64 n) {
    const float* xi = x + n * s.h * rowElems;
    float* dxi = dx + n * s.h * rowElems;
    const float* dyi = dy + n * oh * ow * c;
    i64 zeroed = 0;  // dx rows [0, zeroed) are zero or hold gradient already
    auto zeroUpTo = [&](i64 rowEnd) {
      if (rowEnd <= zeroed) return;
      std::memset(dxi + zeroed * rowElems, 0,
                  static_cast<size_t>((rowEnd - zeroed) * rowElems) * sizeof(float));
      zeroed = rowEnd;
    };
    i64 cells[256];
    for (i64 ph = 0; ph < oh; ++ph) {
      const i64 h0 = ph * s.strideH - s.padTop;
      const i64 hBegin = std::max<i64>(h0, 0), hEnd = std::min(h0 + s.kh, s.h);
      zeroUpTo(hEnd);
      for (i64 pw = 0; pw < ow; ++pw) {
        const i64 w0 = pw * s.strideW - s.padLeft;
        const i64 wBegin = std::max<i64>(w0, 0), wEnd = std::min(w0 + s.kw, s.w);
        int count = 0;  // the window's in-bounds cells, in scan order
        for (i64 ih = hBegin; ih < hEnd; ++ih)
          for (i64 iw = wBegin; iw < wEnd; ++iw) cells[count++] = ih * rowElems + iw * c;
        const float* g = dyi + (ph * ow + pw) * c;
        if (count == 0) continue;  // a window wholly in the padding passes nothing back
        const i64 blocks = c / kBlock * kBlock;
        for (i64 j0 = 0; j0 < blocks; j0 += kBlock)
          windowBlock<kBlock>(xi + j0, dxi + j0, g + j0, cells, count);
        for (i64 j0 = blocks; j0 < c; ++j0) windowBlock<1>(xi + j0, dxi + j0, g + j0, cells, count);
      }
    }
    zeroUpTo(s.h);  // rows no window reaches
  };
  detail::forThreadRanges(detail::teamFor(s.n, s.inputElems()), s.n, [&](int, i64 begin, i64 end) {
    for (i64 n = begin; n < end; ++n) image(n);
  });
}

}  // namespace ipu::kernels::fused
