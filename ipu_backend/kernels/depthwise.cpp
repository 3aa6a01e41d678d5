#include "ipu_backend/kernels/depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ipu_backend/kernels/parallel_ranges.h"

namespace ipu::kernels::fused::detail {
namespace {

// A vector of W floats (GCC and Clang vector extensions; W = 1: a float).
template <int W>
struct Vec {
  typedef float Type __attribute__((vector_size(W * sizeof(float))));
};
template <>
struct Vec<1> {
  typedef float Type;
};
template <int W>
using Lanes = typename Vec<W>::Type;

// The main width: one register (AVX-512: 16 lanes; otherwise 8), so that a 5x5 kernel's 25
// accumulators stay in registers.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif

template <int W>
inline Lanes<W> load(const float* p) {
  Lanes<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int W>
inline void store(float* p, Lanes<W> v) {
  std::memcpy(p, &v, sizeof v);
}

// The output columns [begin, end) whose tap at input column offset `offset` (= s * dil - pad)
// lands inside [0, w): 0 <= ow * stride + offset < w.
void validColumns(i64 outW, i64 w, i64 stride, i64 offset, i64* begin, i64* end) {
  *begin = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  *end = w - offset <= 0 ? 0 : std::min(outW, (w - offset - 1) / stride + 1);
  *end = std::max(*begin, *end);
}

}  // namespace

bool depthwiseShape(const Conv2dShape& s) {
  return s.groups > 1 && s.groups == s.c && s.k == s.c;
}

DepthwiseWeightGrad::DepthwiseWeightGrad(const Conv2dShape& s) : s_(s) {
  const i64 rows = s.n * s.outH();
  team_ = teamFor(rows, rows * s.outW() * s.c * s.r * s.s);
  (void)partials();  // grows this thread's buffer now rather than in a step
}

float* DepthwiseWeightGrad::partials() const {
  thread_local std::vector<float> buffer;
  const i64 elements = team_ * s_.r * s_.s * s_.c;
  if (static_cast<i64>(buffer.size()) < elements) buffer.resize(static_cast<size_t>(elements));
  return buffer.data();
}

namespace {

// One block of W channels at `ch` over the rows [begin, end), R x S known: every tap's sum
// stays in a register while each dy pixel is loaded once; added into acc [R, S, C].
template <int W, int R, int S>
void fixedTaps(const Conv2dShape& s, const float* x, const float* dy, i64 begin, i64 end, i64 ch,
               float* acc) {
  const i64 c = s.c, oh = s.outH(), ow = s.outW();
  Lanes<W> a[R][S] = {};
  for (i64 row = begin; row < end; ++row) {
    const i64 n = row / oh, y = row % oh;
    const float* dyRow = dy + row * ow * c + ch;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const i64 ih = y * s.strideH - s.padTop + r * s.dilH;
      if (ih < 0 || ih >= s.h) continue;
      const float* xRow = x + (n * s.h + ih) * s.w * c + ch;
      for (i64 col = 0; col < ow; ++col) {
        const Lanes<W> d = load<W>(dyRow + col * c);
        const i64 iw0 = col * s.strideW - s.padLeft;
        if (iw0 >= 0 && iw0 + (S - 1) * s.dilW < s.w) {
#pragma GCC unroll 8
          for (int q = 0; q < S; ++q) a[r][q] += load<W>(xRow + (iw0 + q * s.dilW) * c) * d;
        } else {
#pragma GCC unroll 8
          for (int q = 0; q < S; ++q) {
            const i64 iw = iw0 + q * s.dilW;
            if (iw >= 0 && iw < s.w) a[r][q] += load<W>(xRow + iw * c) * d;
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < S; ++q) {
      float* out = acc + (r * S + q) * c + ch;
      store<W>(out, load<W>(out) + a[r][q]);
    }
}

// The same for any R x S: tap by tap, four sums over the columns (one FMA chain would wait on
// its latency).
template <int W>
void anyTaps(const Conv2dShape& s, const float* x, const float* dy, i64 begin, i64 end, i64 ch,
             float* acc) {
  const i64 c = s.c, oh = s.outH(), ow = s.outW(), xStep = s.strideW * c;
  for (i64 row = begin; row < end; ++row) {
    const i64 n = row / oh, y = row % oh;
    for (i64 r = 0; r < s.r; ++r) {
      const i64 ih = y * s.strideH - s.padTop + r * s.dilH;
      if (ih < 0 || ih >= s.h) continue;
      for (i64 q = 0; q < s.s; ++q) {
        const i64 offset = q * s.dilW - s.padLeft;
        i64 first, last;
        validColumns(ow, s.w, s.strideW, offset, &first, &last);
        if (first == last) continue;
        const float* xTap = x + ((n * s.h + ih) * s.w + first * s.strideW + offset) * c + ch;
        const float* dyTap = dy + (row * ow + first) * c + ch;
        Lanes<W> s0{}, s1{}, s2{}, s3{};
        i64 j = 0;
        for (; j + 4 <= last - first; j += 4) {
          s0 += load<W>(xTap + j * xStep) * load<W>(dyTap + j * c);
          s1 += load<W>(xTap + (j + 1) * xStep) * load<W>(dyTap + (j + 1) * c);
          s2 += load<W>(xTap + (j + 2) * xStep) * load<W>(dyTap + (j + 2) * c);
          s3 += load<W>(xTap + (j + 3) * xStep) * load<W>(dyTap + (j + 3) * c);
        }
        for (; j < last - first; ++j) s0 += load<W>(xTap + j * xStep) * load<W>(dyTap + j * c);
        float* out = acc + (r * s.s + q) * c + ch;
        store<W>(out, load<W>(out) + ((s0 + s1) + (s2 + s3)));
      }
    }
  }
}

template <int W>
void channelBlock(const Conv2dShape& s, const float* x, const float* dy, i64 begin, i64 end, i64 ch,
                  float* acc) {
  const bool square = s.r == s.s;
  if (square && s.r == 3) return fixedTaps<W, 3, 3>(s, x, dy, begin, end, ch, acc);
  if (square && s.r == 5) return fixedTaps<W, 5, 5>(s, x, dy, begin, end, ch, acc);
  anyTaps<W>(s, x, dy, begin, end, ch, acc);
}

}  // namespace

void DepthwiseWeightGrad::run(const float* x, const float* dy, float* dw) const {
  const i64 c = s_.c, taps = s_.r * s_.s;
  float* part = partials();
  forThreadRanges(team_, s_.n * s_.outH(), [&](int t, i64 begin, i64 end) {
    float* acc = part + t * taps * c;  // [R, S, C]: channels contiguous
    std::fill(acc, acc + taps * c, 0.0f);
    // Row by row, every channel block: a row's R input rows stay in the cache (walking all
    // rows for one block strides over the whole tensor, a page per pixel at large C).
    for (i64 row = begin; row < end; ++row) {
      i64 ch = 0;
      for (; ch + kLanes <= c; ch += kLanes) channelBlock<kLanes>(s_, x, dy, row, row + 1, ch, acc);
      if (kLanes > 8 && ch + 8 <= c) channelBlock<8>(s_, x, dy, row, row + 1, ch, acc), ch += 8;
      for (; ch < c; ++ch) channelBlock<1>(s_, x, dy, row, row + 1, ch, acc);
    }
  });
  // dw[c, tap] = the threads' partials in thread order.
  for (i64 ch = 0; ch < c; ++ch)
    for (i64 tap = 0; tap < taps; ++tap) {
      float sum = part[tap * c + ch];
      for (int t = 1; t < team_; ++t) sum += part[(t * taps + tap) * c + ch];
      dw[ch * taps + tap] = sum;
    }
}

}  // namespace ipu::kernels::fused::detail
