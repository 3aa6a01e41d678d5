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

bool depthwiseStrided(const Conv2dShape& s) {
  return depthwiseShape(s) && (s.strideH > 1 || s.strideW > 1);
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

// ---- forward and data gradient ---------------------------------------------------------------

// Channels [ch, ch + G * W) of one output pixel: G independent sums over the taps.
template <int W, int G, typename T>
inline void pixel(const DepthwiseConv::Tap* rowBegin, const DepthwiseConv::Tap* rowEnd,
                  const DepthwiseConv::Tap* colBegin, const DepthwiseConv::Tap* colEnd,
                  const T* inImage, i64 inRowElems, const float* w, T* out, i64 ch) {
  Lanes<W> acc[G] = {};
  for (const DepthwiseConv::Tap* r = rowBegin; r != rowEnd; ++r) {
    const T* in = inImage + r->input * inRowElems + ch;
    const float* wr = w + r->weight + ch;
    for (const DepthwiseConv::Tap* q = colBegin; q != colEnd; ++q) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        acc[g] += load<W>(in + q->input + g * W) * load<W>(wr + q->weight + g * W);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) store<W>(out + ch + g * W, acc[g]);
}

// One register of channels [ch, ch + W) of P adjacent output pixels whose column taps are
// regular (RegularColumns), the first pixel's first tap at input column inCol: per tap, one
// weight load for P sums. The sums' order is pixel()'s: the same bits.
template <int W, int P, typename T>
inline void regularPixels(const DepthwiseConv::Tap* rowBegin, const DepthwiseConv::Tap* rowEnd,
                          const DepthwiseConv::RegularColumns& reg, const T* inImage,
                          i64 inRowElems, i64 inCol, const float* w, T* out, i64 c, i64 ch) {
  Lanes<W> acc[P] = {};
  const i64 pixelStep = reg.step * c, tapStep = reg.dil * c;
  for (const DepthwiseConv::Tap* r = rowBegin; r != rowEnd; ++r) {
    const T* in = inImage + r->input * inRowElems + inCol * c + ch;
    const float* wr = w + r->weight + ch;
    for (i64 q = 0; q < reg.s; ++q) {
      const Lanes<W> wq = load<W>(wr + q * c);
      const T* iq = in + q * tapStep;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] += load<W>(iq + p * pixelStep) * wq;
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) store<W>(out + p * c + ch, acc[p]);
}

// Every channel of one output pixel through the tap tables.
template <typename T>
inline void tablePixel(const DepthwiseConv::Tap* rowBegin, const DepthwiseConv::Tap* rowEnd,
                       const DepthwiseConv::Tap* colBegin, const DepthwiseConv::Tap* colEnd,
                       const T* inImage, i64 inRowElems, const float* w, T* outPixel, i64 c,
                       i64 ch) {
  for (; ch + 4 * kLanes <= c; ch += 4 * kLanes)
    pixel<kLanes, 4>(rowBegin, rowEnd, colBegin, colEnd, inImage, inRowElems, w, outPixel, ch);
  for (; ch + kLanes <= c; ch += kLanes)
    pixel<kLanes, 1>(rowBegin, rowEnd, colBegin, colEnd, inImage, inRowElems, w, outPixel, ch);
  if (kLanes > 8 && ch + 8 <= c)
    pixel<8, 1>(rowBegin, rowEnd, colBegin, colEnd, inImage, inRowElems, w, outPixel, ch), ch += 8;
  for (; ch < c; ++ch)
    pixel<1, 1>(rowBegin, rowEnd, colBegin, colEnd, inImage, inRowElems, w, outPixel, ch);
}

constexpr int kRegularPixels = 8;

// Output pixel by pixel (or block by block), all channels of a pixel before the next: the taps'
// input pixels are read as contiguous runs of C values (channel blocks strided over the pixels
// missed the cache line by line from memory: 2.4x slower in the model's step).
template <typename T>
void depthwiseRows(const DepthwiseConv::Taps& rows, const DepthwiseConv::Taps& cols,
                   const DepthwiseConv::RegularColumns& reg, i64 n, i64 inRows, i64 inCols, i64 c,
                   int team, const T* in, const float* w, T* out) {
  const i64 outRows = static_cast<i64>(rows.begin.size()) - 1;
  const i64 outCols = static_cast<i64>(cols.begin.size()) - 1;
  const i64 inRowElems = inCols * c, vectorChannels = c / kLanes * kLanes;
  forThreadRanges(team, n * outRows, [&](int, i64 begin, i64 end) {
    for (i64 row = begin; row < end; ++row) {
      const i64 image = row / outRows, i = row % outRows;
      const T* inImage = in + image * inRows * inRowElems;
      const DepthwiseConv::Tap* rowBegin = rows.taps.data() + rows.begin[i];
      const DepthwiseConv::Tap* rowEnd = rows.taps.data() + rows.begin[i + 1];
      T* outRow = out + row * outCols * c;
      auto table = [&](i64 col, i64 ch) {
        tablePixel(rowBegin, rowEnd, cols.taps.data() + cols.begin[col],
                   cols.taps.data() + cols.begin[col + 1], inImage, inRowElems, w, outRow + col * c,
                   c, ch);
      };
      i64 col = 0;
      for (; col < reg.first; ++col) table(col, 0);
      for (; col + kRegularPixels <= reg.last; col += kRegularPixels) {
        const i64 inCol = col * reg.step + reg.offset;
        for (i64 ch = 0; ch < vectorChannels; ch += kLanes)
          regularPixels<kLanes, kRegularPixels>(rowBegin, rowEnd, reg, inImage, inRowElems, inCol,
                                                w, outRow + col * c, c, ch);
        if (vectorChannels < c)
          for (i64 p = col; p < col + kRegularPixels; ++p) table(p, vectorChannels);
      }
      for (; col < outCols; ++col) table(col, 0);
    }
  });
}

// The taps of each of `outSize` outputs along one axis (rows or columns): forward, the inputs
// o * stride - pad + k * dil inside [0, inSize); data gradient, the outputs o' of the forward
// with o' * stride - pad + k * dil = o. weightStep and inputStep scale the tap index and the
// input position into offsets.
DepthwiseConv::Taps axisTaps(bool forward, i64 outSize, i64 inSize, i64 taps, i64 stride, i64 pad,
                             i64 dil, i64 weightStep, i64 inputStep) {
  DepthwiseConv::Taps t;
  t.begin.push_back(0);
  for (i64 o = 0; o < outSize; ++o) {
    for (i64 k = 0; k < taps; ++k) {
      i64 input = -1;
      if (forward) {
        input = o * stride - pad + k * dil;
      } else {
        const i64 num = o + pad - k * dil;
        if (num >= 0 && num % stride == 0) input = num / stride;
      }
      if (input >= 0 && input < inSize) t.taps.push_back({k * weightStep, input * inputStep});
    }
    t.begin.push_back(static_cast<i64>(t.taps.size()));
  }
  return t;
}

}  // namespace

DepthwiseConv::DepthwiseConv(Pass pass, const Conv2dShape& s) : s_(s) {
  const bool forward = pass == Pass::Forward;
  inRows_ = forward ? s.h : s.outH(), inCols_ = forward ? s.w : s.outW();
  outRows_ = forward ? s.outH() : s.h, outCols_ = forward ? s.outW() : s.w;
  rows_ = axisTaps(forward, outRows_, inRows_, s.r, s.strideH, s.padTop, s.dilH, s.s * s.c, 1);
  cols_ = axisTaps(forward, outCols_, inCols_, s.s, s.strideW, s.padLeft, s.dilW, s.c, s.c);
  // Regular columns: every forward column, where its taps are inside; the data gradient's only
  // at stride 1 (at stride 2 a column's taps alternate).
  if (forward || s.strideW == 1) {
    regular_.step = forward ? s.strideW : 1;
    regular_.offset = forward ? -s.padLeft : s.padLeft;
    regular_.dil = forward ? s.dilW : -s.dilW;
    regular_.s = s.s;
    auto inside = [&](i64 col) {
      const i64 a = col * regular_.step + regular_.offset;
      const i64 b = a + (s.s - 1) * regular_.dil;
      return std::min(a, b) >= 0 && std::max(a, b) < inCols_;
    };
    i64 first = 0;
    while (first < outCols_ && !inside(first)) ++first;
    i64 last = first;
    while (last < outCols_ && inside(last)) ++last;
    regular_.first = first, regular_.last = last;
  }
  const i64 rows = s.n * outRows_;
  team_ = teamFor(rows, rows * outCols_ * s.c * s.r * s.s);
  (void)weights();  // grows this thread's buffer now rather than in a step
}

float* DepthwiseConv::weights() const {
  thread_local std::vector<float> buffer;
  const i64 elements = s_.r * s_.s * s_.c;
  if (static_cast<i64>(buffer.size()) < elements) buffer.resize(static_cast<size_t>(elements));
  return buffer.data();
}

void DepthwiseConv::run(const float* in, const float* w, float* out) const {
  // [C, R, S] -> [R, S, C]: a tap's channels contiguous, as the activations'.
  float* wt = weights();
  const i64 c = s_.c, taps = s_.r * s_.s;
  for (i64 ch = 0; ch < c; ++ch)
    for (i64 tap = 0; tap < taps; ++tap) wt[tap * c + ch] = w[ch * taps + tap];
  depthwiseRows(rows_, cols_, regular_, s_.n, inRows_, inCols_, c, team_, in, wt, out);
}

void DepthwiseWeightGrad::run(const void* x, const void* dy, void* dw) const {
  if (type_ == ElementType::BF16)
    return weightGrad(s_, team_, partials(), static_cast<const std::uint16_t*>(x),
                      static_cast<const std::uint16_t*>(dy), nullptr,
                      static_cast<std::uint16_t*>(dw));
  weightGrad(s_, team_, partials(), static_cast<const float*>(x), static_cast<const float*>(dy),
             static_cast<float*>(dw), nullptr);
}

}  // namespace ipu::kernels::fused::detail
