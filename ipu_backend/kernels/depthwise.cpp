#include "ipu_backend/kernels/depthwise.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ipu_backend/kernels/parallel_ranges.h"
#include "ipu_backend/precision/half.h"

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
// accumulators can fit the register file (GCC 12 keeps some of them on the stack, in L1).
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

// W bf16 values (their bits) widened to f32: a shift, exact.
template <int W>
struct Bf16Vec {
  typedef std::uint16_t Bits __attribute__((vector_size(W * sizeof(std::uint16_t))));
  typedef std::uint32_t Words __attribute__((vector_size(W * sizeof(std::uint32_t))));
};

template <int W>
inline Lanes<W> load(const std::uint16_t* p) {
  if constexpr (W == 1) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(*p) << 16);
  } else {
    typename Bf16Vec<W>::Bits h;
    std::memcpy(&h, p, sizeof h);
    const auto words = __builtin_convertvector(h, typename Bf16Vec<W>::Words);
    return std::bit_cast<Lanes<W>>(words << 16);
  }
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

DepthwiseWeightGrad::DepthwiseWeightGrad(const Conv2dShape& s, ElementType type)
    : s_(s), type_(type) {
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

// One block of W channels at `ch` over the rows [begin, end), R x S known: each dy pixel is
// loaded once for all R x S taps, whose sums are local (registers or L1); added into acc
// [R, S, C].
template <int W, int R, int S, typename T>
void fixedTaps(const Conv2dShape& s, const T* x, const T* dy, i64 begin, i64 end, i64 ch,
               float* acc) {
  const i64 c = s.c, oh = s.outH(), ow = s.outW();
  Lanes<W> a[R][S] = {};
  for (i64 row = begin; row < end; ++row) {
    const i64 n = row / oh, y = row % oh;
    const T* dyRow = dy + row * ow * c + ch;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const i64 ih = y * s.strideH - s.padTop + r * s.dilH;
      if (ih < 0 || ih >= s.h) continue;
      const T* xRow = x + (n * s.h + ih) * s.w * c + ch;
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
template <int W, typename T>
void anyTaps(const Conv2dShape& s, const T* x, const T* dy, i64 begin, i64 end, i64 ch,
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
        const T* xTap = x + ((n * s.h + ih) * s.w + first * s.strideW + offset) * c + ch;
        const T* dyTap = dy + (row * ow + first) * c + ch;
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

template <int W, typename T>
void channelBlock(const Conv2dShape& s, const T* x, const T* dy, i64 begin, i64 end, i64 ch,
                  float* acc) {
  const bool square = s.r == s.s;
  if (square && s.r == 3) return fixedTaps<W, 3, 3, T>(s, x, dy, begin, end, ch, acc);
  if (square && s.r == 5) return fixedTaps<W, 5, 5, T>(s, x, dy, begin, end, ch, acc);
  anyTaps<W, T>(s, x, dy, begin, end, ch, acc);
}

template <typename T>
void weightGrad(const Conv2dShape& s, int team, float* part, const T* x, const T* dy, float* dw,
                std::uint16_t* dwBf16) {
  const i64 c = s.c, taps = s.r * s.s;
  forThreadRanges(team, s.n * s.outH(), [&](int t, i64 begin, i64 end) {
    float* acc = part + t * taps * c;  // [R, S, C]: channels contiguous
    std::fill(acc, acc + taps * c, 0.0f);
    // Row by row, every channel block: a row's R input rows stay in the cache (walking all
    // rows for one block strides over the whole tensor, a page per pixel at large C).
    for (i64 row = begin; row < end; ++row) {
      i64 ch = 0;
      for (; ch + kLanes <= c; ch += kLanes)
        channelBlock<kLanes, T>(s, x, dy, row, row + 1, ch, acc);
      if (kLanes > 8 && ch + 8 <= c) channelBlock<8, T>(s, x, dy, row, row + 1, ch, acc), ch += 8;
      for (; ch < c; ++ch) channelBlock<1, T>(s, x, dy, row, row + 1, ch, acc);
    }
  });
  // dw[c, tap] = the threads' partials in thread order (bf16: rounded to nearest even once).
  for (i64 ch = 0; ch < c; ++ch)
    for (i64 tap = 0; tap < taps; ++tap) {
      float sum = part[tap * c + ch];
      for (int t = 1; t < team; ++t) sum += part[(t * taps + tap) * c + ch];
      if (dwBf16)
        dwBf16[ch * taps + tap] = precision::toBF16(sum).bits;
      else
        dw[ch * taps + tap] = sum;
    }
}

}  // namespace

void DepthwiseWeightGrad::run(const void* x, const void* dy, void* dw) const {
  if (type_ == ElementType::BF16)
    return weightGrad(s_, team_, partials(), static_cast<const std::uint16_t*>(x),
                      static_cast<const std::uint16_t*>(dy), nullptr,
                      static_cast<std::uint16_t*>(dw));
  weightGrad(s_, team_, partials(), static_cast<const float*>(x), static_cast<const float*>(dy),
             static_cast<float*>(dw), nullptr);
}

}  // namespace ipu::kernels::fused::detail
