// Reference kernels: straightforward loops, one output element at a time, accumulating in
// double so that they are a trustworthy yardstick for the fused kernels.
#include "ipu_backend/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "ipu_backend/kernels/elementwise_math.h"

namespace ipu::kernels::ref {
namespace {

void checkLabel(i64 sample, std::int32_t label, i64 classes) {
  if (label < 0 || label >= classes) {
    throw std::invalid_argument("softmax cross-entropy: sample " + std::to_string(sample) +
                                " has label " + std::to_string(label) + " outside [0, " +
                                std::to_string(classes) + ")");
  }
}

// Row statistics of a softmax over x[row, 0..cols): the max and sum_j exp(x_j - max).
struct SoftmaxRow {
  double max = 0;
  double sumExp = 0;
};

SoftmaxRow softmaxRow(i64 cols, const W& x, i64 row) {
  SoftmaxRow r;
  r.max = -std::numeric_limits<double>::infinity();
  for (i64 j = 0; j < cols; ++j) r.max = std::max(r.max, double(x[row * cols + j]));
  for (i64 j = 0; j < cols; ++j) r.sumExp += std::exp(double(x[row * cols + j]) - r.max);
  return r;
}

// The data gradient's taps of input element i = ((n * H + ih) * W + iw) * C + c: every (r, t)
// whose output pixel (p, q) reads input pixel (ih, iw), found by solving
// p * stride - pad + r * dil == ih (and the same for q); calls tap(c, r, t, pixel) with
// pixel = (n * OH + p) * OW + q, in r-then-t order (the order every data-gradient kernel sums in).
template <class Tap>
void forEachDataGradTap(const Conv2dShape& s, i64 i, Tap&& tap) {
  const i64 oh = s.outH(), ow = s.outW();
  const i64 c = i % s.c, iw = (i / s.c) % s.w, ih = (i / (s.c * s.w)) % s.h,
            n = i / (s.c * s.w * s.h);
  for (i64 r = 0; r < s.r; ++r) {
    const i64 ph = ih + s.padTop - r * s.dilH;
    if (ph < 0 || ph % s.strideH != 0 || ph / s.strideH >= oh) continue;
    const i64 p = ph / s.strideH;
    for (i64 t = 0; t < s.s; ++t) {
      const i64 qw = iw + s.padLeft - t * s.dilW;
      if (qw < 0 || qw % s.strideW != 0 || qw / s.strideW >= ow) continue;
      tap(c, r, t, (n * oh + p) * ow + qw / s.strideW);
    }
  }
}

// The forward taps of output pixel (p, q): every (r, t) whose input pixel (ih, iw) lies inside
// the image; calls tap(r, t, ih, iw) in r-then-t order (the order every forward kernel sums in).
template <class Tap>
void forEachForwardTap(const Conv2dShape& s, i64 p, i64 q, Tap&& tap) {
  for (i64 r = 0; r < s.r; ++r) {
    const i64 ih = p * s.strideH - s.padTop + r * s.dilH;
    if (ih < 0 || ih >= s.h) continue;
    for (i64 t = 0; t < s.s; ++t) {
      const i64 iw = q * s.strideW - s.padLeft + t * s.dilW;
      if (iw < 0 || iw >= s.w) continue;
      tap(r, t, ih, iw);
    }
  }
}

// The weight gradient's pixels of tap (r, t) over the output rows `rows` (row = n * OH + p):
// every output pixel (row, q) whose input pixel (ih, iw) lies inside the image; calls
// pixel(row, q, ih, iw) in row-then-q order (the order every weight-gradient kernel sums in).
template <class Pixel>
void forEachFilterTapPixel(const Conv2dShape& s, i64 r, i64 t, Range rows, Pixel&& pixel) {
  const i64 oh = s.outH(), ow = s.outW();
  for (i64 row = rows.begin; row < rows.end; ++row) {
    const i64 ih = row % oh * s.strideH - s.padTop + r * s.dilH;
    if (ih < 0 || ih >= s.h) continue;
    for (i64 q = 0; q < ow; ++q) {
      const i64 iw = q * s.strideW - s.padLeft + t * s.dilW;
      if (iw < 0 || iw >= s.w) continue;
      pixel(row, q, ih, iw);
    }
  }
}

}  // namespace

// ---- convolution --------------------------------------------------------------------------

void conv2dForward(const Conv2dShape& s, W x, W w, float* y, Range out) {
  const i64 oh = s.outH(), ow = s.outW(), cpg = s.cPerGroup(), kpg = s.kPerGroup();
  for (i64 o = out.begin; o < out.end; ++o) {
    // o = ((n * OH + p) * OW + q) * K + k
    const i64 k = o % s.k, q = (o / s.k) % ow, p = (o / (s.k * ow)) % oh, n = o / (s.k * ow * oh);
    const i64 c0 = (k / kpg) * cpg;  // first input channel of k's group
    double acc = 0;
    forEachForwardTap(s, p, q, [&](i64 r, i64 t, i64 ih, i64 iw) {
      for (i64 c = 0; c < cpg; ++c)
        acc += double(x[((n * s.h + ih) * s.w + iw) * s.c + c0 + c]) *
               w[((k * s.r + r) * s.s + t) * cpg + c];
    });
    y[o - out.begin] = float(acc);
  }
}

void conv2dForwardGroupBlocks(const Conv2dShape& s, i64 gb, W xBlocks, W w, float* y, Range out) {
  const i64 oh = s.outH(), ow = s.outW(), cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 xb = gb * cpg, blockElems = s.n * s.h * s.w * xb;
  for (i64 o = out.begin; o < out.end; ++o) {
    const i64 k = o % s.k, q = (o / s.k) % ow, p = (o / (s.k * ow)) % oh, n = o / (s.k * ow * oh);
    const i64 g = k / kpg, b = g / gb;
    const i64 xbb = std::min(xb, s.c - b * xb);
    const i64 base = b * blockElems + g * cpg - b * xb;  // k's group's first channel in block b
    double acc = 0;
    forEachForwardTap(s, p, q, [&](i64 r, i64 t, i64 ih, i64 iw) {
      for (i64 c = 0; c < cpg; ++c)
        acc += double(xBlocks[base + ((n * s.h + ih) * s.w + iw) * xbb + c]) *
               w[((k * s.r + r) * s.s + t) * cpg + c];
    });
    y[o - out.begin] = float(acc);
  }
}

void conv2dBackwardData(const Conv2dShape& s, W dy, W w, float* dx, Range out, Range red) {
  const i64 cpg = s.cPerGroup(), kpg = s.kPerGroup();
  for (i64 i = out.begin; i < out.end; ++i) {
    double acc = 0;
    forEachDataGradTap(s, i, [&](i64 c, i64 r, i64 t, i64 pixel) {
      const i64 g = c / cpg, cl = c % cpg;
      const i64 k0 = std::max(g * kpg, red.begin), k1 = std::min((g + 1) * kpg, red.end);
      for (i64 k = k0; k < k1; ++k)
        acc += double(dy[pixel * s.k + k]) * w[((k * s.r + r) * s.s + t) * cpg + cl];
    });
    dx[i - out.begin] = float(acc);
  }
}

void conv2dBackwardDataTransposed(const Conv2dShape& s, W dy, W wt, float* dx, Range out) {
  for (i64 i = out.begin; i < out.end; ++i) {
    double acc = 0;
    forEachDataGradTap(s, i, [&](i64 c, i64 r, i64 t, i64 pixel) {
      const i64 dyRow = pixel * s.k, wRow = ((c * s.r + r) * s.s + t) * s.k;
      for (i64 k = 0; k < s.k; ++k) acc += double(dy[dyRow + k]) * wt[wRow + k];
    });
    dx[i - out.begin] = float(acc);
  }
}

void conv2dWeightsToKBlocks(const Conv2dShape& s, i64 kb, W w, float* blocks, Range out) {
  const i64 rs = s.r * s.s, blockElems = kb * s.c * rs;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 b = i / blockElems, kbb = std::min(kb, s.k - b * kb), j = i - b * blockElems;
    const i64 kk = j % kbb, rt = (j / kbb) % rs, c = j / (kbb * rs);
    blocks[i - out.begin] = w[((b * kb + kk) * rs + rt) * s.c + c];
  }
}

void conv2dKBlocksToTransposed(const Conv2dShape& s, i64 kb, const std::vector<W>& blocks,
                               float* wt, Range out) {
  const i64 rs = s.r * s.s, blockElems = kb * s.c * rs;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 k = i % s.k, row = i / s.k;  // row = c * R * S + r * S + t
    const i64 b = k / kb, kbb = std::min(kb, s.k - b * kb);
    wt[i - out.begin] = blocks[static_cast<size_t>(b)][b * blockElems + row * kbb + k % kb];
  }
}

void toChannelBlocks(i64 pixels, i64 c, i64 cb, W x, float* blocks, Range out) {
  const i64 blockElems = pixels * cb;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 b = i / blockElems, cbb = std::min(cb, c - b * cb), j = i - b * blockElems;
    blocks[i - out.begin] = x[(j / cbb) * c + b * cb + j % cbb];
  }
}

void conv2dBackwardDataGroupBlocks(const Conv2dShape& s, i64 gb, W dyBlocks, W w, float* dx,
                                   Range out) {
  const i64 cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 kb = gb * kpg, blockElems = s.n * s.outH() * s.outW() * kb;
  for (i64 i = out.begin; i < out.end; ++i) {
    double acc = 0;
    forEachDataGradTap(s, i, [&](i64 c, i64 r, i64 t, i64 pixel) {
      const i64 g = c / cpg, cl = c % cpg, b = g / gb;
      const i64 k0 = b * kb, kbb = std::min(kb, s.k - k0);
      const i64 dyRow = b * blockElems + pixel * kbb - k0;
      for (i64 k = g * kpg; k < (g + 1) * kpg; ++k)
        acc += double(dyBlocks[dyRow + k]) * w[((k * s.r + r) * s.s + t) * cpg + cl];
    });
    dx[i - out.begin] = float(acc);
  }
}

void conv2dBackwardDataKBlocks(const Conv2dShape& s, i64 kb, const std::vector<W>& dyBlocks, W w,
                               float* dx, Range out, Range red) {
  const i64 blockElems = s.n * s.outH() * s.outW() * kb;
  const i64 k0 = std::max<i64>(0, red.begin), k1 = std::min(s.k, red.end), b0 = k0 / kb;
  for (i64 i = out.begin; i < out.end; ++i) {
    double acc = 0;
    forEachDataGradTap(s, i, [&](i64 c, i64 r, i64 t, i64 pixel) {
      for (i64 b = b0; b * kb < k1; ++b) {
        const W& block = dyBlocks[static_cast<size_t>(b - b0)];
        const i64 first = b * kb, kbb = std::min(kb, s.k - first);
        const i64 row = b * blockElems + pixel * kbb - first;
        for (i64 k = std::max(k0, first); k < std::min(k1, first + kbb); ++k)
          acc += double(block[row + k]) * w[((k * s.r + r) * s.s + t) * s.c + c];
      }
    });
    dx[i - out.begin] = float(acc);
  }
}

void conv2dBackwardFilterGroupBlocks(const Conv2dShape& s, i64 gb, W xBlocks, W dyBlocks, float* dw,
                                     Range out, Range red) {
  const i64 oh = s.outH(), ow = s.outW(), cpg = s.cPerGroup(), kpg = s.kPerGroup();
  const i64 xb = gb * cpg, kb = gb * kpg;
  const i64 xBlockElems = s.n * s.h * s.w * xb, dyBlockElems = s.n * oh * ow * kb;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 cl = i % cpg, t = (i / cpg) % s.s, r = (i / (cpg * s.s)) % s.r,
              k = i / (cpg * s.s * s.r);
    const i64 g = k / kpg, b = g / gb;
    const i64 c = g * cpg + cl;
    // Within block b: x channel c - b*xb of xbb, dy channel k - b*kb of kbb.
    const i64 xbb = std::min(xb, s.c - b * xb), kbb = std::min(kb, s.k - b * kb);
    const i64 xBase = b * xBlockElems + c - b * xb, dyBase = b * dyBlockElems + k - b * kb;
    double acc = 0;
    forEachFilterTapPixel(s, r, t, red, [&](i64 row, i64 q, i64 ih, i64 iw) {
      acc += double(xBlocks[xBase + ((row / oh * s.h + ih) * s.w + iw) * xbb]) *
             dyBlocks[dyBase + (row * ow + q) * kbb];
    });
    dw[i - out.begin] = float(acc);
  }
}

void conv2dBackwardFilter(const Conv2dShape& s, W x, W dy, float* dw, Range out, Range red) {
  const i64 oh = s.outH(), ow = s.outW(), cpg = s.cPerGroup(), kpg = s.kPerGroup();
  for (i64 i = out.begin; i < out.end; ++i) {
    // i = ((k * R + r) * S + t) * C/G + cl
    const i64 cl = i % cpg, t = (i / cpg) % s.s, r = (i / (cpg * s.s)) % s.r,
              k = i / (cpg * s.s * s.r);
    const i64 c = (k / kpg) * cpg + cl;
    double acc = 0;
    forEachFilterTapPixel(s, r, t, red, [&](i64 row, i64 q, i64 ih, i64 iw) {
      acc += double(x[((row / oh * s.h + ih) * s.w + iw) * s.c + c]) * dy[(row * ow + q) * s.k + k];
    });
    dw[i - out.begin] = float(acc);
  }
}

void conv2dGradToChannelBlocks(const Conv2dShape& s, i64 kb, W dy, float* dyB, Range out) {
  const i64 pixels = s.n * s.outH() * s.outW();
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 b = i / (kb * pixels), rest = i - b * kb * pixels;
    const i64 kbb = std::min(kb, s.k - b * kb);
    dyB[i - out.begin] = dy[(rest / kbb) * s.k + b * kb + rest % kbb];
  }
}

void conv2dInputToChannelBlocks(const Conv2dShape& s, i64 cb, bool subsampled, W x, float* xB,
                                Range out) {
  const i64 oh = s.outH(), ow = s.outW();
  const i64 pixels = subsampled ? s.n * oh * ow : s.n * s.h * s.w;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 g = i / (cb * pixels), rest = i - g * cb * pixels;
    const i64 cbb = std::min(cb, s.c - g * cb), p = rest / cbb;
    const i64 src = subsampled ? ((p / (oh * ow)) * s.h + (p / ow) % oh * s.strideH) * s.w +
                                     (p % ow) * s.strideW
                               : p;
    xB[i - out.begin] = x[src * s.c + g * cb + rest % cbb];
  }
}

void conv2dBackwardFilterBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W xB, W dyB,
                               float* dwBlock, Range out, Range red) {
  const i64 oh = s.outH(), ow = s.outW(), rs = s.r * s.s, pixels = s.n * oh * ow;
  const i64 xPixels = subsampled ? pixels : s.n * s.h * s.w;
  // The block that holds `out`.
  const i64 b = out.begin / (kb * rs * s.c), kbb = std::min(kb, s.k - b * kb);
  const i64 inK = out.begin - b * kb * rs * s.c, g = inK / (kbb * rs * cb);
  const i64 cbb = std::min(cb, s.c - g * cb), base = b * kb * rs * s.c + g * kbb * rs * cb;
  const i64 dyBase = b * kb * pixels, xBase = g * cb * xPixels;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 e = i - base, cc = e % cbb, rsi = (e / cbb) % rs, kk = e / (cbb * rs);
    const i64 r = rsi / s.s, t = rsi % s.s;
    double acc = 0;
    forEachFilterTapPixel(s, r, t, red, [&](i64 row, i64 q, i64 ih, i64 iw) {
      const i64 xPixel = subsampled ? row * ow + q : (row / oh * s.h + ih) * s.w + iw;
      acc += double(xB[xBase + xPixel * cbb + cc]) * dyB[dyBase + (row * ow + q) * kbb + kk];
    });
    dwBlock[i - out.begin] = float(acc);
  }
}

void conv2dWeightsToFilterBlocks(const Conv2dShape& s, i64 kb, i64 cb, W w, float* wB, Range out) {
  const i64 rs = s.r * s.s;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 b = i / (kb * rs * s.c), kbb = std::min(kb, s.k - b * kb);
    const i64 g = (i - b * kb * rs * s.c) / (kbb * rs * cb), cbb = std::min(cb, s.c - g * cb);
    const i64 e = i - b * kb * rs * s.c - g * kbb * rs * cb;
    const i64 cc = e % cbb, rsi = (e / cbb) % rs, kk = e / (cbb * rs);
    wB[i - out.begin] = w[((b * kb + kk) * rs + rsi) * s.c + g * cb + cc];
  }
}

void conv2dForwardBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W xB, W wB,
                        float* yP, Range out) {
  const i64 oh = s.outH(), ow = s.outW(), rs = s.r * s.s, pixels = s.n * oh * ow;
  const i64 xPixels = subsampled ? pixels : s.n * s.h * s.w;
  // The (c-block g, k-block b) that holds `out`.
  const i64 g = out.begin / (pixels * s.k), inG = out.begin - g * pixels * s.k;
  const i64 b = inG / (kb * pixels), kbb = std::min(kb, s.k - b * kb);
  const i64 cbb = std::min(cb, s.c - g * cb), base = g * pixels * s.k + b * kb * pixels;
  const i64 xBase = g * cb * xPixels, wBase = b * kb * rs * s.c + g * kbb * rs * cb;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 e = i - base, kk = e % kbb, px = e / kbb;
    const i64 q = px % ow, p = (px / ow) % oh, n = px / (ow * oh);
    double acc = 0;
    forEachForwardTap(s, p, q, [&](i64 r, i64 t, i64 ih, i64 iw) {
      const i64 xPixel = subsampled ? px : (n * s.h + ih) * s.w + iw;
      for (i64 c = 0; c < cbb; ++c)
        acc += double(xB[xBase + xPixel * cbb + c]) * wB[wBase + (kk * rs + r * s.s + t) * cbb + c];
    });
    yP[i - out.begin] = float(acc);
  }
}

void conv2dBackwardDataBlock(const Conv2dShape& s, i64 kb, i64 cb, bool subsampled, W dyB, W wB,
                             float* dxP, Range out) {
  const i64 rs = s.r * s.s, pixels = s.n * s.h * s.w, P = s.n * s.outH() * s.outW();
  // The (k-block b, c-block g) that holds `out`.
  const i64 b = out.begin / (pixels * s.c), inB = out.begin - b * pixels * s.c;
  const i64 g = inB / (cb * pixels), kbb = std::min(kb, s.k - b * kb);
  const i64 cbb = std::min(cb, s.c - g * cb), base = b * pixels * s.c + g * cb * pixels;
  const i64 dyBase = b * kb * P, wBase = b * kb * rs * s.c + g * kbb * rs * cb;
  float* y = dxP;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 e = i - base, cc = e % cbb, px = e / cbb;
    double acc = 0;
    bool reached = false;
    forEachDataGradTap(s, px * s.c + g * cb + cc, [&](i64, i64 r, i64 t, i64 pixel) {
      reached = true;
      const i64 dyRow = dyBase + pixel * kbb, wAt = wBase + (r * s.s + t) * cbb + cc;
      for (i64 kk = 0; kk < kbb; ++kk) acc += double(dyB[dyRow + kk]) * wB[wAt + kk * rs * cbb];
    });
    if (subsampled && !reached) continue;  // not in the partials
    *y++ = float(acc);
  }
}

// ---- matmul -------------------------------------------------------------------------------

void matMul(const MatMulShape& s, W a, W b, float* c, Range out, Range red) {
  for (i64 o = out.begin; o < out.end; ++o) {
    // o = (batch * M + i) * N + j
    const i64 j = o % s.n, i = (o / s.n) % s.m, bt = o / (s.n * s.m);
    const i64 aBase = bt * s.m * s.k, bBase = (s.broadcastB ? 0 : bt) * s.k * s.n;
    double acc = 0;
    for (i64 kk = red.begin; kk < red.end; ++kk) {
      const float av = s.transA ? a[aBase + kk * s.m + i] : a[aBase + i * s.k + kk];
      const float bv = s.transB ? b[bBase + j * s.k + kk] : b[bBase + kk * s.n + j];
      acc += double(av) * bv;
    }
    c[o - out.begin] = float(acc);
  }
}

// ---- elementwise --------------------------------------------------------------------------

void unary(UnaryKind kind, float alpha, W x, float* y, Range out) {
  for (i64 i = out.begin; i < out.end; ++i) {
    y[i - out.begin] = detail::unaryValue(kind, alpha, x[i]);
  }
}

void unaryGrad(UnaryKind kind, float alpha, W x, W dy, float* dx, Range out) {
  for (i64 i = out.begin; i < out.end; ++i) {
    dx[i - out.begin] = dy[i] * detail::unaryDerivative(kind, alpha, x[i]);
  }
}

void binary(BinaryKind kind, const BroadcastShape& s, W a, W b, float* y, Range out) {
  for (i64 o = out.begin; o < out.end; ++o) {
    // Unflatten o into output coordinates, innermost first, and apply operand strides.
    i64 rest = o, ai = 0, bi = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const i64 coord = rest % s.outDims[d];
      rest /= s.outDims[d];
      ai += coord * s.aStrides[d];
      bi += coord * s.bStrides[d];
    }
    y[o - out.begin] = detail::binaryValue(kind, a[ai], b[bi]);
  }
}

// ---- reductions ---------------------------------------------------------------------------

void reduce(ReduceKind kind, const ReduceShape& s, W x, float* y, Range out, Range red) {
  const int rank = static_cast<int>(s.inDims.size());
  std::vector<i64> strides(rank);  // row-major strides of x
  for (i64 d = rank - 1, st = 1; d >= 0; --d) {
    strides[d] = st;
    st *= s.inDims[d];
  }
  for (i64 o = out.begin; o < out.end; ++o) {
    // Offset of the kept coordinates: unflatten o over the kept dims only.
    i64 keptOffset = 0;
    for (i64 d = rank - 1, rest = o; d >= 0; --d) {
      if (s.reduced[d]) continue;
      keptOffset += (rest % s.inDims[d]) * strides[d];
      rest /= s.inDims[d];
    }
    double acc = kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (i64 r = red.begin; r < red.end; ++r) {
      i64 offset = keptOffset;
      for (i64 d = rank - 1, rest = r; d >= 0; --d) {
        if (!s.reduced[d]) continue;
        offset += (rest % s.inDims[d]) * strides[d];
        rest /= s.inDims[d];
      }
      const double v = x[offset];
      acc = kind == ReduceKind::Max ? std::max(acc, v) : acc + v;
    }
    if (kind == ReduceKind::Mean) acc /= double(s.reducedCount());
    y[o - out.begin] = float(acc);
  }
}

// ---- layout -------------------------------------------------------------------------------

void transpose(const std::vector<i64>& inDims, const std::vector<int>& perm, W x, float* y,
               Range out) {
  const int rank = static_cast<int>(inDims.size());
  std::vector<i64> inStrides(rank);
  for (i64 d = rank - 1, st = 1; d >= 0; --d) {
    inStrides[d] = st;
    st *= inDims[d];
  }
  for (i64 o = out.begin; o < out.end; ++o) {
    // Output dim d has extent inDims[perm[d]] and walks x with stride inStrides[perm[d]].
    i64 src = 0;
    for (i64 d = rank - 1, rest = o; d >= 0; --d) {
      const i64 extent = inDims[perm[d]];
      src += (rest % extent) * inStrides[perm[d]];
      rest /= extent;
    }
    y[o - out.begin] = x[src];
  }
}

// ---- pooling ------------------------------------------------------------------------------

void maxPoolForward(const Pool2dShape& s, W x, float* y, Range out) {
  const i64 oh = s.outH(), ow = s.outW();
  for (i64 o = out.begin; o < out.end; ++o) {
    const i64 c = o % s.c, q = (o / s.c) % ow, p = (o / (s.c * ow)) % oh, n = o / (s.c * ow * oh);
    bool found = false;
    float best = 0;
    for (i64 i = 0; i < s.kh; ++i) {
      const i64 ih = p * s.strideH - s.padTop + i;
      if (ih < 0 || ih >= s.h) continue;
      for (i64 j = 0; j < s.kw; ++j) {
        const i64 iw = q * s.strideW - s.padLeft + j;
        if (iw < 0 || iw >= s.w) continue;
        const float v = x[((n * s.h + ih) * s.w + iw) * s.c + c];
        if (!found || v > best) best = v;
        found = true;
      }
    }
    y[o - out.begin] = best;
  }
}

void maxPoolBackward(const Pool2dShape& s, W x, W dy, float* dx, Range out) {
  const i64 oh = s.outH(), ow = s.outW();
  for (i64 idx = out.begin; idx < out.end; ++idx) {
    const i64 c = idx % s.c, iw = (idx / s.c) % s.w, ih = (idx / (s.c * s.w)) % s.h,
              n = idx / (s.c * s.w * s.h);
    double acc = 0;
    // Every output (p, q) whose window covers (ih, iw) at window cell (i, j).
    for (i64 i = 0; i < s.kh; ++i) {
      const i64 ph = ih + s.padTop - i;
      if (ph < 0 || ph % s.strideH != 0 || ph / s.strideH >= oh) continue;
      const i64 p = ph / s.strideH;
      for (i64 j = 0; j < s.kw; ++j) {
        const i64 qw = iw + s.padLeft - j;
        if (qw < 0 || qw % s.strideW != 0 || qw / s.strideW >= ow) continue;
        const i64 q = qw / s.strideW;
        // Find that window's first maximum; the gradient goes there only.
        i64 argH = -1, argW = -1;
        float best = 0;
        for (i64 wi = 0; wi < s.kh; ++wi) {
          const i64 hh = p * s.strideH - s.padTop + wi;
          if (hh < 0 || hh >= s.h) continue;
          for (i64 wj = 0; wj < s.kw; ++wj) {
            const i64 ww = q * s.strideW - s.padLeft + wj;
            if (ww < 0 || ww >= s.w) continue;
            const float v = x[((n * s.h + hh) * s.w + ww) * s.c + c];
            if (argH < 0 || v > best) {
              best = v;
              argH = hh;
              argW = ww;
            }
          }
        }
        if (argH == ih && argW == iw) acc += dy[((n * oh + p) * ow + q) * s.c + c];
      }
    }
    dx[idx - out.begin] = float(acc);
  }
}

namespace {

// Number of cells an average over window (p, q) divides by.
i64 avgDivisor(const Pool2dShape& s, i64 p, i64 q) {
  if (s.countIncludePad) return s.kh * s.kw;
  const i64 h0 = p * s.strideH - s.padTop, w0 = q * s.strideW - s.padLeft;
  const i64 hs = std::min(h0 + s.kh, s.h) - std::max<i64>(h0, 0);
  const i64 ws = std::min(w0 + s.kw, s.w) - std::max<i64>(w0, 0);
  return std::max<i64>(hs, 0) * std::max<i64>(ws, 0);
}

}  // namespace

void avgPoolForward(const Pool2dShape& s, W x, float* y, Range out) {
  const i64 oh = s.outH(), ow = s.outW();
  for (i64 o = out.begin; o < out.end; ++o) {
    const i64 c = o % s.c, q = (o / s.c) % ow, p = (o / (s.c * ow)) % oh, n = o / (s.c * ow * oh);
    double acc = 0;
    for (i64 i = 0; i < s.kh; ++i) {
      const i64 ih = p * s.strideH - s.padTop + i;
      if (ih < 0 || ih >= s.h) continue;
      for (i64 j = 0; j < s.kw; ++j) {
        const i64 iw = q * s.strideW - s.padLeft + j;
        if (iw < 0 || iw >= s.w) continue;
        acc += x[((n * s.h + ih) * s.w + iw) * s.c + c];
      }
    }
    const i64 div = avgDivisor(s, p, q);
    y[o - out.begin] = div > 0 ? float(acc / double(div)) : 0.0f;
  }
}

void avgPoolBackward(const Pool2dShape& s, W dy, float* dx, Range out) {
  const i64 oh = s.outH(), ow = s.outW();
  for (i64 idx = out.begin; idx < out.end; ++idx) {
    const i64 c = idx % s.c, iw = (idx / s.c) % s.w, ih = (idx / (s.c * s.w)) % s.h,
              n = idx / (s.c * s.w * s.h);
    double acc = 0;
    for (i64 i = 0; i < s.kh; ++i) {
      const i64 ph = ih + s.padTop - i;
      if (ph < 0 || ph % s.strideH != 0 || ph / s.strideH >= oh) continue;
      const i64 p = ph / s.strideH;
      for (i64 j = 0; j < s.kw; ++j) {
        const i64 qw = iw + s.padLeft - j;
        if (qw < 0 || qw % s.strideW != 0 || qw / s.strideW >= ow) continue;
        const i64 q = qw / s.strideW;
        acc += double(dy[((n * oh + p) * ow + q) * s.c + c]) / double(avgDivisor(s, p, q));
      }
    }
    dx[idx - out.begin] = float(acc);
  }
}

// ---- batch norm ---------------------------------------------------------------------------

void batchNormSums(i64 rows, i64 c, W x, float* sum, float* sumSq, Range out, Range red) {
  (void)rows;
  for (i64 ch = out.begin; ch < out.end; ++ch) {
    double s1 = 0, s2 = 0;
    for (i64 r = red.begin; r < red.end; ++r) {
      const double v = x[r * c + ch];
      s1 += v;
      s2 += v * v;
    }
    sum[ch - out.begin] = float(s1);
    sumSq[ch - out.begin] = float(s2);
  }
}

void batchNormNormalize(i64 rows, i64 c, float eps, W x, W mean, W var, W gamma, W beta, float* y,
                        Range out) {
  (void)rows;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 ch = i % c;
    const double inv = 1.0 / std::sqrt(double(var[ch]) + eps);
    y[i - out.begin] = float((x[i] - double(mean[ch])) * inv * gamma[ch] + beta[ch]);
  }
}

void batchNormBackwardSums(i64 rows, i64 c, float eps, W x, W dy, W mean, W var, float* sumDy,
                           float* sumDyXhat, Range out, Range red) {
  (void)rows;
  for (i64 ch = out.begin; ch < out.end; ++ch) {
    const double inv = 1.0 / std::sqrt(double(var[ch]) + eps);
    double s1 = 0, s2 = 0;
    for (i64 r = red.begin; r < red.end; ++r) {
      const double g = dy[r * c + ch];
      s1 += g;
      s2 += g * (x[r * c + ch] - double(mean[ch])) * inv;
    }
    sumDy[ch - out.begin] = float(s1);
    sumDyXhat[ch - out.begin] = float(s2);
  }
}

void batchNormBackwardData(i64 rows, i64 c, float eps, W x, W dy, W mean, W var, W gamma, W sumDy,
                           W sumDyXhat, float* dx, Range out) {
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 ch = i % c;
    const double inv = 1.0 / std::sqrt(double(var[ch]) + eps);
    const double xhat = (x[i] - double(mean[ch])) * inv;
    dx[i - out.begin] = float(gamma[ch] * inv / double(rows) *
                              (double(rows) * dy[i] - sumDy[ch] - xhat * sumDyXhat[ch]));
  }
}

// ---- loss ---------------------------------------------------------------------------------

void softmaxCrossEntropy(i64 classes, float smoothing, W logits, Window<std::int32_t> labels,
                         float* loss, Range out) {
  for (i64 n = out.begin; n < out.end; ++n) {
    const std::int32_t label = labels[n];
    checkLabel(n, label, classes);
    const SoftmaxRow row = softmaxRow(classes, logits, n);
    const double logSum = std::log(row.sumExp);
    double acc = 0;
    for (i64 j = 0; j < classes; ++j) {
      const double target = (j == label ? 1.0 - smoothing : 0.0) + double(smoothing) / classes;
      const double logSoftmax = logits[n * classes + j] - row.max - logSum;
      acc -= target * logSoftmax;
    }
    loss[n - out.begin] = float(acc);
  }
}

void softmaxCrossEntropyGrad(i64 classes, float smoothing, W logits, Window<std::int32_t> labels,
                             W dloss, float* dlogits, Range out) {
  i64 cachedRow = -1;
  SoftmaxRow row;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 n = i / classes, j = i % classes;
    const std::int32_t label = labels[n];
    if (n != cachedRow) {  // row statistics once per sample
      checkLabel(n, label, classes);
      row = softmaxRow(classes, logits, n);
      cachedRow = n;
    }
    const double p = std::exp(logits[i] - row.max) / row.sumExp;
    const double target = (j == label ? 1.0 - smoothing : 0.0) + double(smoothing) / classes;
    dlogits[i - out.begin] = float(dloss[n] * (p - target));
  }
}

void softmax(i64 cols, W x, float* y, Range out) {
  i64 cachedRow = -1;
  SoftmaxRow row;
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 r = i / cols;
    if (r != cachedRow) {
      row = softmaxRow(cols, x, r);
      cachedRow = r;
    }
    y[i - out.begin] = float(std::exp(x[i] - row.max) / row.sumExp);
  }
}

void softmaxGrad(i64 cols, W y, W dy, float* dx, Range out) {
  i64 cachedRow = -1;
  double dot = 0;  // sum_j dy_j * y_j of the current row
  for (i64 i = out.begin; i < out.end; ++i) {
    const i64 r = i / cols;
    if (r != cachedRow) {
      dot = 0;
      for (i64 j = 0; j < cols; ++j) dot += double(dy[r * cols + j]) * y[r * cols + j];
      cachedRow = r;
    }
    dx[i - out.begin] = float(y[i] * (dy[i] - dot));
  }
}

// ---- optimizer and state updates ----------------------------------------------------------

float larsLearningRate(float lr, float wSumSq, float gSumSq, float gradScaleInverse, float eta,
                       float weightDecay, float epsilon) {
  const double wNorm = std::sqrt(static_cast<double>(wSumSq));
  const double gNorm = std::sqrt(static_cast<double>(gSumSq)) * gradScaleInverse;
  // Not finite (an overflowed step under loss scaling): the update skips the step anyway; keep
  // the NaN visible rather than turning it into a rate.
  if (!std::isfinite(wNorm) || !std::isfinite(gNorm))
    return std::numeric_limits<float>::quiet_NaN();
  if (!(wNorm > 0.0) || !(gNorm > 0.0)) return lr;
  const double trust = eta * wNorm / (gNorm + weightDecay * wNorm + epsilon);
  return static_cast<float>(static_cast<double>(lr) * trust);
}

void emaUpdate(float momentum, float scale, float* running, const float* value, i64 count) {
  for (i64 i = 0; i < count; ++i) {
    running[i] = momentum * running[i] + (1.0f - momentum) * scale * value[i];
  }
}

}  // namespace ipu::kernels::ref
