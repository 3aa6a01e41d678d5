// Backward reference kernels against central finite differences of the forward reference
// kernels: L = <forward(inputs), cotangent>, perturbing one input element at a time.
#include <gtest/gtest.h>

#include "tests/kernels/test_util.h"

namespace ipu::kernels {
namespace {

using testing::all;
using testing::closeRel;
using testing::finiteDiff;
using testing::randomVec;
using testing::Vec;
using testing::win;

constexpr float kTol = 1e-2f;

Conv2dShape convShape(i64 n, i64 h, i64 w, i64 c, i64 k, i64 r, i64 s, i64 stride, i64 pt, i64 pl,
                      i64 pb, i64 pr, i64 dil, i64 groups) {
  Conv2dShape cs;
  cs.n = n, cs.h = h, cs.w = w, cs.c = c, cs.k = k, cs.r = r, cs.s = s;
  cs.strideH = cs.strideW = stride;
  cs.padTop = pt, cs.padLeft = pl, cs.padBottom = pb, cs.padRight = pr;
  cs.dilH = cs.dilW = dil;
  cs.groups = groups;
  return cs;
}

TEST(GradConv, DataAndFilter) {
  const Conv2dShape cases[] = {
      convShape(2, 5, 6, 4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1),
      convShape(2, 7, 6, 4, 6, 3, 2, 2, 1, 0, 0, 1, 1, 1),  // stride 2, asymmetric pad
      convShape(1, 6, 7, 4, 6, 3, 3, 2, 1, 1, 1, 1, 1, 2),  // grouped, stride 2
      convShape(2, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3),  // depthwise
      convShape(1, 9, 8, 2, 3, 3, 3, 2, 2, 1, 1, 2, 2, 1),  // dilation 2
      convShape(1, 6, 6, 3, 5, 1, 1, 2, 0, 0, 0, 0, 1, 1),  // 1x1 stride 2
  };
  unsigned seed = 100;
  for (const auto& s : cases) {
    const Vec x = randomVec(s.inputElems(), seed++), w = randomVec(s.weightElems(), seed++),
              dy = randomVec(s.outputElems(), seed++);
    const Vec fdX = finiteDiff([&](const Vec& xx) { return testing::refConvFwd(s, xx, w); }, x, dy);
    EXPECT_TRUE(closeRel(testing::refConvBwdData(s, dy, w), fdX, kTol)) << "seed " << seed;
    const Vec fdW = finiteDiff([&](const Vec& ww) { return testing::refConvFwd(s, x, ww); }, w, dy);
    EXPECT_TRUE(closeRel(testing::refConvBwdFilter(s, x, dy), fdW, kTol)) << "seed " << seed;
  }
}

// dA and dB of C = op(A) op(B), written with the matmul kernel itself per batch entry (this
// exercises every transpose flag combination of the kernel as well).
TEST(GradMatMul, AllTransposeCombos) {
  for (int flags = 0; flags < 8; ++flags) {
    MatMulShape s;
    s.batch = 2, s.m = 3, s.k = 4, s.n = 5;
    s.transA = flags & 1, s.transB = flags & 2, s.broadcastB = flags & 4;
    const Vec a = randomVec(s.aElems(), 200 + flags), b = randomVec(s.bElems(), 300 + flags),
              dc = randomVec(s.cElems(), 400 + flags);
    Vec dA(a.size(), 0.0f), dB(b.size(), 0.0f);
    for (i64 bt = 0; bt < s.batch; ++bt) {
      const i64 bb = s.broadcastB ? 0 : bt;
      const Vec ab(a.begin() + bt * s.m * s.k, a.begin() + (bt + 1) * s.m * s.k);
      const Vec bm(b.begin() + bb * s.k * s.n, b.begin() + (bb + 1) * s.k * s.n);
      const Vec dcb(dc.begin() + bt * s.m * s.n, dc.begin() + (bt + 1) * s.m * s.n);
      MatMulShape ga, gb;
      Vec da, db;
      if (!s.transA) {  // dA[M,K] = dC op(B)^T
        ga.m = s.m, ga.k = s.n, ga.n = s.k, ga.transB = !s.transB;
        da = testing::refMatMul(ga, dcb, bm);
      } else {  // dA[K,M] = op(B) dC^T
        ga.m = s.k, ga.k = s.n, ga.n = s.m, ga.transA = s.transB, ga.transB = true;
        da = testing::refMatMul(ga, bm, dcb);
      }
      if (!s.transB) {  // dB[K,N] = op(A)^T dC
        gb.m = s.k, gb.k = s.m, gb.n = s.n, gb.transA = !s.transA;
        db = testing::refMatMul(gb, ab, dcb);
      } else {  // dB[N,K] = dC^T op(A)
        gb.m = s.n, gb.k = s.m, gb.n = s.k, gb.transA = true, gb.transB = s.transA;
        db = testing::refMatMul(gb, dcb, ab);
      }
      std::copy(da.begin(), da.end(), dA.begin() + bt * s.m * s.k);
      for (size_t i = 0; i < db.size(); ++i) dB[bb * s.k * s.n + i] += db[i];
    }
    const Vec fdA = finiteDiff([&](const Vec& aa) { return testing::refMatMul(s, aa, b); }, a, dc);
    const Vec fdB = finiteDiff([&](const Vec& bb) { return testing::refMatMul(s, a, bb); }, b, dc);
    EXPECT_TRUE(closeRel(dA, fdA, kTol)) << "flags " << flags;
    EXPECT_TRUE(closeRel(dB, fdB, kTol)) << "flags " << flags;
  }
}

TEST(GradPool, MaxAndAvg) {
  Pool2dShape shapes[3];
  shapes[0].n = 2, shapes[0].h = 6, shapes[0].w = 5, shapes[0].c = 3;
  shapes[0].kh = shapes[0].kw = 3, shapes[0].strideH = shapes[0].strideW = 2;
  shapes[0].padTop = shapes[0].padLeft = shapes[0].padBottom = shapes[0].padRight = 1;
  shapes[1] = shapes[0];
  shapes[1].kh = 2, shapes[1].kw = 3, shapes[1].strideW = 1, shapes[1].padBottom = 0;
  shapes[1].padRight = 2;  // asymmetric
  shapes[2] = shapes[0];
  shapes[2].strideH = shapes[2].strideW = 1;  // overlapping windows
  unsigned seed = 500;
  for (const auto& base : shapes) {
    for (bool include : {false, true}) {
      Pool2dShape s = base;
      s.countIncludePad = include;
      const Vec x = testing::distinctVec(s.inputElems(), seed++),
                dy = randomVec(s.outputElems(), seed++);
      auto maxFwd = [&](const Vec& xx) {
        Vec y(s.outputElems());
        ref::maxPoolForward(s, win(xx), y.data(), all(s.outputElems()));
        return y;
      };
      auto avgFwd = [&](const Vec& xx) {
        Vec y(s.outputElems());
        ref::avgPoolForward(s, win(xx), y.data(), all(s.outputElems()));
        return y;
      };
      Vec dxMax(s.inputElems()), dxAvg(s.inputElems());
      ref::maxPoolBackward(s, win(x), win(dy), dxMax.data(), all(s.inputElems()));
      ref::avgPoolBackward(s, win(dy), dxAvg.data(), all(s.inputElems()));
      // Spacing 0.05 between values, perturbation 0.01: argmaxes never change.
      EXPECT_TRUE(closeRel(dxMax, finiteDiff(maxFwd, x, dy), kTol));
      EXPECT_TRUE(closeRel(dxAvg, finiteDiff(avgFwd, x, dy), kTol));
    }
  }
}

TEST(GradUnary, EveryKind) {
  const UnaryKind kinds[] = {
      UnaryKind::Identity, UnaryKind::Relu,  UnaryKind::Neg,    UnaryKind::Exp,     UnaryKind::Log,
      UnaryKind::Sqrt,     UnaryKind::Rsqrt, UnaryKind::Square, UnaryKind::Sigmoid, UnaryKind::Tanh,
      UnaryKind::Gelu,     UnaryKind::Swish, UnaryKind::Scale};
  for (UnaryKind kind : kinds) {
    const bool positive =
        kind == UnaryKind::Log || kind == UnaryKind::Sqrt || kind == UnaryKind::Rsqrt;
    Vec x = randomVec(64, 600 + int(kind), positive ? 0.5f : -3.0f, positive ? 2.0f : 3.0f);
    if (kind == UnaryKind::Relu) {
      for (float& v : x) v = v < 0 ? v - 0.1f : v + 0.1f;  // away from the kink
    }
    const Vec dy = randomVec(64, 700 + int(kind));
    const float alpha = 1.7f;
    Vec dx(64);
    ref::unaryGrad(kind, alpha, win(x), win(dy), dx.data(), all(64));
    // Elementwise: perturb all elements at once.
    const float h = 1e-2f;
    Vec xp = x, xm = x, yp(64), ym(64), fd(64);
    for (int i = 0; i < 64; ++i) xp[i] += h, xm[i] -= h;
    ref::unary(kind, alpha, win(xp), yp.data(), all(64));
    ref::unary(kind, alpha, win(xm), ym.data(), all(64));
    for (int i = 0; i < 64; ++i) fd[i] = dy[i] * (double(yp[i]) - ym[i]) / (2.0 * h);
    EXPECT_TRUE(closeRel(dx, fd, kTol)) << "kind " << int(kind);
  }
}

TEST(GradBatchNorm, BackwardMatchesFiniteDifferences) {
  const i64 rows = 12, c = 3;
  const float eps = 1e-3f;
  const Vec x = randomVec(rows * c, 800, -2, 2), gamma = randomVec(c, 801, 0.5f, 1.5f),
            beta = randomVec(c, 802), dy = randomVec(rows * c, 803);
  auto forward = [&](const Vec& xx, const Vec& g, const Vec& b) {
    Vec mean, var, y(rows * c);
    testing::refBnStats(rows, c, xx, mean, var);
    ref::batchNormNormalize(rows, c, eps, win(xx), win(mean), win(var), win(g), win(b), y.data(),
                            all(rows * c));
    return y;
  };
  Vec mean, var;
  testing::refBnStats(rows, c, x, mean, var);
  Vec sumDy(c), sumDyXhat(c), dx(rows * c);
  ref::batchNormBackwardSums(rows, c, eps, win(x), win(dy), win(mean), win(var), sumDy.data(),
                             sumDyXhat.data(), all(c), all(rows));
  ref::batchNormBackwardData(rows, c, eps, win(x), win(dy), win(mean), win(var), win(gamma),
                             win(sumDy), win(sumDyXhat), dx.data(), all(rows * c));
  EXPECT_TRUE(closeRel(
      dx, finiteDiff([&](const Vec& xx) { return forward(xx, gamma, beta); }, x, dy, 1e-2f), kTol));
  EXPECT_TRUE(closeRel(
      sumDyXhat, finiteDiff([&](const Vec& g) { return forward(x, g, beta); }, gamma, dy), kTol));
  EXPECT_TRUE(closeRel(
      sumDy, finiteDiff([&](const Vec& b) { return forward(x, gamma, b); }, beta, dy), kTol));
}

TEST(GradSoftmax, SoftmaxGrad) {
  const i64 rows = 4, cols = 7;
  const Vec x = randomVec(rows * cols, 900, -2, 2), dy = randomVec(rows * cols, 901);
  auto forward = [&](const Vec& xx) {
    Vec y(rows * cols);
    ref::softmax(cols, win(xx), y.data(), all(rows * cols));
    return y;
  };
  const Vec y = forward(x);
  Vec dx(rows * cols);
  ref::softmaxGrad(cols, win(y), win(dy), dx.data(), all(rows * cols));
  EXPECT_TRUE(closeRel(dx, finiteDiff(forward, x, dy), kTol));
}

TEST(GradSoftmax, CrossEntropyGrad) {
  const i64 n = 5, classes = 6;
  const std::vector<std::int32_t> labels = {0, 5, 2, 2, 3};
  const auto lw = Window<std::int32_t>::whole(labels.data(), n);
  const Vec logits = randomVec(n * classes, 910, -3, 3), dloss = randomVec(n, 911);
  for (float smoothing : {0.0f, 0.1f}) {
    auto forward = [&](const Vec& l) {
      Vec loss(n);
      ref::softmaxCrossEntropy(classes, smoothing, win(l), lw, loss.data(), all(n));
      return loss;
    };
    Vec dl(n * classes);
    ref::softmaxCrossEntropyGrad(classes, smoothing, win(logits), lw, win(dloss), dl.data(),
                                 all(n * classes));
    EXPECT_TRUE(closeRel(dl, finiteDiff(forward, logits, dloss), kTol)) << smoothing;
  }
}

}  // namespace
}  // namespace ipu::kernels
