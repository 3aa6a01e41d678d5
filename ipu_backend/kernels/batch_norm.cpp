// f32 training-mode batch norm over x viewed as [rows, C] (channels last): the forward and the
// backward as plain OpenMP loops, because both are memory bound and oneDNN's channels-last
// kernels spend a pass more than the arithmetic needs:
//   forward   one read of x for the sum and the sum of squares (shifted by the first row, so
//             the variance does not cancel), one read of x + one write of y (fused: relu(y));
//             oneDNN reads x once for the mean and once more for the variance.
//   backward  one read of x and dy for sum(dy) and sum(dy * (x - mean)), one read of both +
//             one write of dx.
// The fused ReLU writes no mask: the forward keeps its per-channel affine map (y = x * a + b,
// one fma) in the workspace, and the backward recomputes the ReLU's decision from x with the
// same fma, so both passes agree on every element, ties included. The fused swish works the
// same way: the forward writes only swish(y), the backward recomputes y and swish'(y) (the
// element functions of the unary ops: the same bits as batch norm, swish and swish_grad op by
// op), which saves writing and reading y and the gradient between the ops (EfficientNet: every
// batch norm but the block outputs' is followed by a swish).
// Partial sums: f32 over blocks of kRowBlock rows (in registers), then f64 per thread, then
// over threads in a fixed order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ipu_backend/kernels/elementwise_math.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/kernels/parallel_ranges.h"

namespace ipu::kernels::fused {
namespace {

constexpr i64 kRowBlock = 32;   // rows summed in f32 before they are added in f64
constexpr i64 kChanBlock = 32;  // channels whose partial sums stay in registers
using detail::forThreadRanges;

// s[c] += sum over rows [r0, r1) of u(r, c), q[c] += sum of v(r, c), for channels [c0, c0+W):
// terms(i, ch, u, v) adds element i's (channel ch) two terms to u and v.
template <i64 W, typename Terms>
inline void sumBlock(i64 r0, i64 r1, i64 c, i64 c0, double* s, double* q, Terms&& terms) {
  float su[W] = {}, sq[W] = {};
  for (i64 r = r0; r < r1; ++r) {
#pragma omp simd
    for (i64 j = 0; j < W; ++j) terms(r * c + c0 + j, c0 + j, su[j], sq[j]);
  }
  for (i64 j = 0; j < W; ++j) {
    s[c0 + j] += su[j];
    q[c0 + j] += sq[j];
  }
}

// Per-thread partial sums over the thread's rows, in blocks of kRowBlock x kChanBlock;
// prepare(r0, r1) runs first on each block of rows (which then stays in the cache).
template <typename Terms, typename Prepare>
void sumRows(i64 begin, i64 end, i64 c, double* s, double* q, Terms&& terms, Prepare&& prepare) {
  std::fill(s, s + c, 0.0);
  std::fill(q, q + c, 0.0);
  const i64 fullBlocks = c / kChanBlock * kChanBlock;
  for (i64 r0 = begin; r0 < end; r0 += kRowBlock) {
    const i64 r1 = std::min(end, r0 + kRowBlock);
    prepare(r0, r1);
    for (i64 c0 = 0; c0 < fullBlocks; c0 += kChanBlock)
      sumBlock<kChanBlock>(r0, r1, c, c0, s, q, terms);
    for (i64 c0 = fullBlocks; c0 < c; ++c0) sumBlock<1>(r0, r1, c, c0, s, q, terms);
  }
}

template <typename Terms>
void sumRows(i64 begin, i64 end, i64 c, double* s, double* q, Terms&& terms) {
  sumRows(begin, end, c, s, q, std::forward<Terms>(terms), [](i64, i64) {});
}

// Calls row(r) for every row, over the team's row ranges.
template <typename Row>
void forEachRow(int team, i64 rows, Row&& row) {
  forThreadRanges(team, rows, [&](int, i64 begin, i64 end) {
    for (i64 r = begin; r < end; ++r) row(r);
  });
}

// Sums the per-thread partials (thread order: deterministic for a given team size).
void reducePartials(const std::vector<double>& part, int team, i64 c, double* s, double* q) {
  for (i64 j = 0; j < c; ++j) {
    double a = 0.0, b = 0.0;
    for (int t = 0; t < team; ++t) {
      a += part[(2 * t) * c + j];
      b += part[(2 * t + 1) * c + j];
    }
    s[j] = a;
    q[j] = b;
  }
}

// What the kernels of both directions keep: the shape, the OpenMP team and the storage of the
// two per-channel sums (forward: sum(x - x0), sum((x - x0)^2); backward: sum(dy'),
// sum(dy' (x - mean))). Allocated once, at construction.
struct BatchNormState {
  i64 rows = 0, c = 0;
  float eps = 0.0f;
  bool relu = false;   // a fused activation (the map kept in the workspace): ReLU or swish
  bool swish = false;  // the fused activation is swish
  int team = 1;
  std::vector<double> part, sum, sum2;  // [team][2][C] partials; the totals

  void init(i64 rows_, i64 c_, float eps_, BatchNormRelu r, const char* kernel) {
    if (rows_ < 1 || c_ < 1) throw std::invalid_argument(std::string(kernel) + ": empty [rows, C]");
    rows = rows_, c = c_, eps = eps_, relu = r != BatchNormRelu::kNone;
    swish = r == BatchNormRelu::kSwish;
    team = detail::teamFor(rows, rows * c);
    part.assign(static_cast<size_t>(2 * team * c), 0.0);
    sum.assign(static_cast<size_t>(c), 0.0);
    sum2.assign(static_cast<size_t>(c), 0.0);
  }
};

}  // namespace

struct BatchNormForwardTraining::Impl : BatchNormState {
  std::vector<float> affine;  // a, b (unfused forward; fused: the workspace)
};

BatchNormForwardTraining::BatchNormForwardTraining(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  impl_->init(rows, c, eps, relu, "BatchNormForwardTraining");
  impl_->affine.assign(static_cast<size_t>(2 * c), 0.0f);
}

BatchNormForwardTraining::~BatchNormForwardTraining() = default;

std::size_t BatchNormForwardTraining::workspaceBytes() const {
  return impl_->relu ? static_cast<std::size_t>(2 * impl_->c) * sizeof(float) : 0;
}

void BatchNormForwardTraining::runStatistics(const float* x, const float* gamma, const float* beta,
                                             float* mean, float* var, float* affine) {
  Impl& p = *impl_;
  const i64 rows = p.rows, c = p.c;
  const float* shift = x;  // row 0: sums of (x - x[0]) keep E[x^2] - E[x]^2 from cancelling
  forThreadRanges(p.team, rows, [&](int t, i64 begin, i64 end) {
    double* s = p.part.data() + (2 * t) * c;
    sumRows(begin, end, c, s, s + c, [&](i64 i, i64 ch, float& u, float& v) {
      const float d = x[i] - shift[ch];
      u += d;
      v += d * d;
    });
  });
  reducePartials(p.part, p.team, c, p.sum.data(), p.sum2.data());
  float* a = affine;
  float* b = affine + c;
  for (i64 j = 0; j < c; ++j) {
    const double m = p.sum[j] / static_cast<double>(rows);
    const double v = std::max(0.0, p.sum2[j] / static_cast<double>(rows) - m * m);
    mean[j] = static_cast<float>(shift[j] + m);
    var[j] = static_cast<float>(v);
    a[j] = gamma[j] / std::sqrt(var[j] + p.eps);
    b[j] = beta[j] - mean[j] * a[j];
  }
}

void BatchNormForwardTraining::run(const float* x, const float* gamma, const float* beta, float* y,
                                   float* mean, float* var, void* workspace) {
  Impl& p = *impl_;
  if (p.relu && !workspace)
    throw std::invalid_argument("BatchNormForwardTraining with fused ReLU: no workspace given");
  const i64 rows = p.rows, c = p.c;
  float* a = p.relu ? static_cast<float*>(workspace) : p.affine.data();
  const float* b = a + c;
  runStatistics(x, gamma, beta, mean, var, a);
  const bool relu = p.relu && !p.swish, swish = p.swish;
  forEachRow(p.team, rows, [&](i64 r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    if (swish) {
#pragma omp simd
      for (i64 j = 0; j < c; ++j)
        yr[j] = kernels::detail::unaryValue(UnaryKind::Swish, 1.0f, std::fma(xr[j], a[j], b[j]));
    } else if (relu) {
#pragma omp simd
      for (i64 j = 0; j < c; ++j) {
        const float z = std::fma(xr[j], a[j], b[j]);
        yr[j] = z > 0.0f ? z : 0.0f;  // as relu(): NaN -> 0 is the mask's decision too
      }
    } else {
#pragma omp simd
      for (i64 j = 0; j < c; ++j) yr[j] = std::fma(xr[j], a[j], b[j]);
    }
  });
}

namespace {

struct BackwardState : BatchNormState {
  std::vector<float> kDy, kX, kConst;  // dx = kDy * dy' + kX * (x - mean) + kConst per channel
};

}  // namespace

struct BatchNormBackward::Impl : BackwardState {};

BatchNormBackward::BatchNormBackward(i64 rows, i64 c, float eps, BatchNormRelu relu)
    : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.init(rows, c, eps, relu, "BatchNormBackward");
  p.kDy.assign(static_cast<size_t>(c), 0.0f);
  p.kX.assign(static_cast<size_t>(c), 0.0f);
  p.kConst.assign(static_cast<size_t>(c), 0.0f);
}

BatchNormBackward::~BatchNormBackward() = default;

namespace {

// The backward's two passes; kAct kFused: dy is the gradient of relu(x * a + b) (the fused
// forward's map), which passed dy where x * a + b > 0 (as relu_grad: dy * 0 keeps a NaN or inf
// dy visible to the loss scaler's overflow check); kSwish: of swish(x * a + b): the first pass
// writes g = dy * swish'(x * a + b) into dx a block of rows at a time, sums it while the block
// is in the cache, and the second reads it back (swish' is costly enough to compute once).
template <BatchNormRelu kAct>
void batchNormBackward(BackwardState& p, const float* x, const float* dy, const float* gamma,
                       const float* mean, const float* var, float* dx, float* dgamma, float* dbeta,
                       const float* a, const float* b, const PerSampleDy& perSample = {}) {
  const i64 rows = p.rows, c = p.c;
  auto gradAt = [=](i64 i, i64 ch) {
    if constexpr (kAct == BatchNormRelu::kFused)
      return dy[i] * (std::fma(x[i], a[ch], b[ch]) > 0.0f ? 1.0f : 0.0f);
    if constexpr (kAct == BatchNormRelu::kSwish) return dx[i];  // g, written by the first pass
    return dy[i];
  };
  auto swishGrad = [=](i64 r0, i64 r1) {
    if constexpr (kAct == BatchNormRelu::kSwish) {
      for (i64 r = r0; r < r1; ++r) {
        const i64 o = r * c;
        const float* dyr = dy + o;
        if (perSample.scale) {
          // dy = dy' * scale + shift into dx first, each loop storing its rounded result (no
          // multiply-add contracted), then dx = dy * swish' below in place.
          const i64 n = r / perSample.rowsPerSample;
          const float *sc = perSample.scale + n * c, *sh = perSample.shift + n * c;
          float* g = dx + o;
#pragma omp simd
          for (i64 j = 0; j < c; ++j) g[j] = dyr[j] * sc[j];
#pragma omp simd
          for (i64 j = 0; j < c; ++j) g[j] = g[j] + sh[j];
          dyr = g;
        }
#pragma omp simd
        for (i64 j = 0; j < c; ++j)
          dx[o + j] = dyr[j] * kernels::detail::unaryDerivative(UnaryKind::Swish, 1.0f,
                                                                std::fma(x[o + j], a[j], b[j]));
      }
    }
  };
  forThreadRanges(p.team, rows, [&](int t, i64 begin, i64 end) {
    double* s = p.part.data() + (2 * t) * c;
    sumRows(
        begin, end, c, s, s + c,
        [&](i64 i, i64 ch, float& u, float& v) {
          const float g = gradAt(i, ch);
          u += g;
          v += g * (x[i] - mean[ch]);
        },
        swishGrad);
  });
  reducePartials(p.part, p.team, c, p.sum.data(), p.sum2.data());
  // dx = gamma * rstd * (g - sum(g) / n - xhat * sum(g * xhat) / n), xhat = (x - mean) * rstd,
  // as dx = kDy * g + kX * (x - mean) + kConst.
  const double n = static_cast<double>(rows);
  for (i64 j = 0; j < c; ++j) {
    const double rstd = 1.0 / std::sqrt(static_cast<double>(var[j]) + p.eps);
    const double scale = gamma[j] * rstd;
    const double kx = -scale * rstd * rstd * p.sum2[j] / n;
    dbeta[j] = static_cast<float>(p.sum[j]);
    dgamma[j] = static_cast<float>(p.sum2[j] * rstd);
    p.kDy[j] = static_cast<float>(scale);
    p.kX[j] = static_cast<float>(kx);
    p.kConst[j] = static_cast<float>(-scale * p.sum[j] / n);
  }
  const float *kDy = p.kDy.data(), *kX = p.kX.data(), *kConst = p.kConst.data();
  forEachRow(p.team, rows, [&](i64 r) {
    const i64 o = r * c;
    float* dxr = dx + o;
#pragma omp simd
    for (i64 j = 0; j < c; ++j)
      dxr[j] = kDy[j] * gradAt(o + j, j) + kX[j] * (x[o + j] - mean[j]) + kConst[j];
  });
}

}  // namespace

void BatchNormBackward::run(const float* x, const float* dy, const float* gamma, const float* mean,
                            const float* var, float* dx, float* dgamma, float* dbeta,
                            const void* workspace, const PerSampleDy& perSample) {
  Impl& p = *impl_;
  if (perSample.scale && (!p.swish || !perSample.shift || perSample.rowsPerSample <= 0 ||
                          p.rows % perSample.rowsPerSample != 0))
    throw std::invalid_argument(
        "BatchNormBackward: a per-sample dy needs the fused swish, a shift and rows that are "
        "whole samples of rowsPerSample rows");
  if (!p.relu)
    return batchNormBackward<BatchNormRelu::kNone>(p, x, dy, gamma, mean, var, dx, dgamma, dbeta,
                                                   {}, {});
  if (!workspace)
    throw std::invalid_argument(std::string("BatchNormBackward with fused ") +
                                (p.swish ? "swish" : "ReLU") + ": no workspace given");
  const float* a = static_cast<const float*>(workspace);
  if (p.swish)
    return batchNormBackward<BatchNormRelu::kSwish>(p, x, dy, gamma, mean, var, dx, dgamma, dbeta,
                                                    a, a + p.c, perSample);
  batchNormBackward<BatchNormRelu::kFused>(p, x, dy, gamma, mean, var, dx, dgamma, dbeta, a,
                                           a + p.c);
}

namespace {

// kOtherBn: other is normalised by its own map (a2, b2) before the add, as its batch norm would.
template <bool kOtherBn>
void batchNormAddReluRows(const float* x, const float* affine, const float* other,
                          const float* otherAffine, float* out, i64 rows, i64 c,
                          std::uint8_t* reluBits) {
  const float *a = affine, *b = affine + c;
  const float *a2 = otherAffine, *b2 = otherAffine ? otherAffine + c : nullptr;
  forEachRow(detail::teamFor(rows, rows * c), rows, [&](i64 r) {
    const i64 o = r * c;
    if (!reluBits) {
#pragma omp simd
      for (i64 j = 0; j < c; ++j) {  // as the unfused ops: fma, then + other, then relu
        const float y2 = kOtherBn ? std::fma(other[o + j], a2[j], b2[j]) : other[o + j];
        const float z = std::fma(x[o + j], a[j], b[j]) + y2;
        out[o + j] = z > 0.0f ? z : 0.0f;
      }
      return;
    }
    for (i64 j = 0; j < c; j += 16) {
#if defined(__AVX512F__)
      __m512 y2 = _mm512_loadu_ps(other + o + j);
      if constexpr (kOtherBn)
        y2 = _mm512_fmadd_ps(y2, _mm512_loadu_ps(a2 + j), _mm512_loadu_ps(b2 + j));
      const __m512 z =
          _mm512_add_ps(_mm512_fmadd_ps(_mm512_loadu_ps(x + o + j), _mm512_loadu_ps(a + j),
                                        _mm512_loadu_ps(b + j)),
                        y2);
      const __mmask16 on = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ);
      _mm512_storeu_ps(out + o + j, _mm512_maskz_mov_ps(on, z));
      const std::uint16_t bits = on;
#elif defined(__AVX2__) && defined(__FMA__)
      std::uint16_t bits = 0;
      for (i64 h = 0; h < 16; h += 8) {  // two 8-lane halves: the same fma, add and compare
        __m256 y2 = _mm256_loadu_ps(other + o + j + h);
        if constexpr (kOtherBn)
          y2 = _mm256_fmadd_ps(y2, _mm256_loadu_ps(a2 + j + h), _mm256_loadu_ps(b2 + j + h));
        const __m256 z =
            _mm256_add_ps(_mm256_fmadd_ps(_mm256_loadu_ps(x + o + j + h),
                                          _mm256_loadu_ps(a + j + h), _mm256_loadu_ps(b + j + h)),
                          y2);
        const __m256 on = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(out + o + j + h, _mm256_and_ps(on, z));
        bits = static_cast<std::uint16_t>(bits | (_mm256_movemask_ps(on) << h));
      }
#else
      std::uint16_t bits = 0;
      for (i64 k = j; k < j + 16; ++k) {
        const float y2 = kOtherBn ? std::fma(other[o + k], a2[k], b2[k]) : other[o + k];
        const float z = std::fma(x[o + k], a[k], b[k]) + y2;
        out[o + k] = z > 0.0f ? z : 0.0f;
        bits = static_cast<std::uint16_t>(bits | (z > 0.0f ? 1u << (k - j) : 0u));
      }
#endif
      std::memcpy(reluBits + (o + j) / 8, &bits, sizeof bits);
    }
  });
}

}  // namespace

void batchNormAddRelu(const float* x, const float* affine, const float* other,
                      const float* otherAffine, float* out, i64 rows, i64 c,
                      std::uint8_t* reluBits) {
  if (reluBits && c % 16 != 0)
    throw std::invalid_argument("batchNormAddRelu: ReLU bits need C % 16 == 0");
  if (otherAffine)
    batchNormAddReluRows<true>(x, affine, other, otherAffine, out, rows, c, reluBits);
  else
    batchNormAddReluRows<false>(x, affine, other, nullptr, out, rows, c, reluBits);
}

}  // namespace ipu::kernels::fused
