// Helpers shared by the kernel tests: random tensors, whole-tensor wrappers and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "ipu_backend/kernels/kernel_types.h"
#include "ipu_backend/kernels/reference.h"

namespace ipu::kernels::testing {

using Vec = std::vector<float>;

inline Vec randomVec(i64 n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Distinct values (a shuffled grid, spacing `step`): no ties, so max-pool argmaxes are stable
// under finite-difference perturbations smaller than step / 2.
inline Vec distinctVec(i64 n, unsigned seed, float step = 0.05f) {
  Vec v(n);
  for (i64 i = 0; i < n; ++i) v[i] = (i - n / 2) * step;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

inline ref::W win(const Vec& v) {
  return ref::W::whole(v.data(), static_cast<i64>(v.size()));
}
inline Range all(i64 n) {
  return Range{0, n};
}

inline float maxAbs(const Vec& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every |actual - expected| within tol * max(|expected|) (floored so that all-zero tensors
// compare absolutely).
inline ::testing::AssertionResult closeRel(const Vec& actual, const Vec& expected, float tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " != " << expected.size();
  }
  const float scale = std::max(maxAbs(expected), 1e-3f);
  for (size_t i = 0; i < actual.size(); ++i) {
    const float err = std::fabs(actual[i] - expected[i]);
    if (!(err <= tol * scale)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << actual[i] << " vs expected " << expected[i] << " (|err| "
             << err << " > " << tol << " * " << scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whole-tensor reference calls.
inline Vec refConvFwd(const Conv2dShape& s, const Vec& x, const Vec& w) {
  Vec y(s.outputElems());
  ref::conv2dForward(s, win(x), win(w), y.data(), all(s.outputElems()));
  return y;
}
inline Vec refConvBwdData(const Conv2dShape& s, const Vec& dy, const Vec& w) {
  Vec dx(s.inputElems());
  ref::conv2dBackwardData(s, win(dy), win(w), dx.data(), all(s.inputElems()), all(s.k));
  return dx;
}
inline Vec refConvBwdFilter(const Conv2dShape& s, const Vec& x, const Vec& dy) {
  Vec dw(s.weightElems());
  ref::conv2dBackwardFilter(s, win(x), win(dy), dw.data(), all(s.weightElems()),
                            all(s.n * s.outH()));
  return dw;
}
inline Vec refMatMul(const MatMulShape& s, const Vec& a, const Vec& b) {
  Vec c(s.cElems());
  ref::matMul(s, win(a), win(b), c.data(), all(s.cElems()), all(s.k));
  return c;
}

// Training-mode batch norm statistics (biased variance) from the reference partial sums.
inline void refBnStats(i64 rows, i64 c, const Vec& x, Vec& mean, Vec& var) {
  Vec sum(c), sumSq(c);
  ref::batchNormSums(rows, c, win(x), sum.data(), sumSq.data(), all(c), all(rows));
  mean.resize(c);
  var.resize(c);
  for (i64 j = 0; j < c; ++j) {
    mean[j] = sum[j] / rows;
    var[j] = std::max(0.0f, sumSq[j] / rows - mean[j] * mean[j]);
  }
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Central finite differences of L(x) = <f(x), cotangent> with respect to every element of x.
inline Vec finiteDiff(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& cotangent,
                      float h = 1e-2f) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = x0 + h;
    const double lp = dot(f(x), cotangent);
    x[i] = x0 - h;
    const double lm = dot(f(x), cotangent);
    x[i] = x0;
    g[i] = float((lp - lm) / (2.0 * h));
  }
  return g;
}

}  // namespace ipu::kernels::testing
