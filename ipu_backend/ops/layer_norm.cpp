// layer_norm: normalisation over the innermost axis (BERT's LayerNorm), and its backward.
//   x [R, C] (any leading dims flattened to R rows), gamma [C], beta [C], attribute eps
//   -> y [R, C] = (x - mean_r) * rstd_r * gamma + beta, mean [R] f32, rstd [R] f32
//      with mean_r, var_r over the C values of row r (biased) and rstd_r = 1 / sqrt(var_r + eps).
// layer_norm_grad: (x, dy, gamma, mean, rstd) -> dx [R, C], dgamma [C], dbeta [C]
//   xhat = (x - mean) * rstd, g = gamma * dy:
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), dgamma = sum_r dy * xhat,
//   dbeta = sum_r dy.
// Statistics accumulate in double in both modes, so tile and fused differ only in summation
// order of dgamma / dbeta.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "ipu_backend/compiler/executable.h"
#include "ipu_backend/ir/builder.h"
#include "ipu_backend/kernels/fused.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

struct RowsC {
  i64 rows, c;
};
RowsC rowsC(const Graph& g, int x) {
  const Shape& s = g.tensor(x).shape;
  return {numElements(s) / s.back(), s.back()};
}

// Mean and 1/sqrt(var + eps) of one row of c values.
void rowStats(const float* x, i64 c, double eps, float& mean, float& rstd) {
  double s = 0, ss = 0;
  for (i64 j = 0; j < c; ++j) s += x[j];
  const double m = s / static_cast<double>(c);
  for (i64 j = 0; j < c; ++j) ss += (x[j] - m) * (x[j] - m);
  mean = static_cast<float>(m);
  rstd = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
}

// dx of elements [j0, j1) of one row (x, dy: the row's c values).
void rowInputGrad(const float* x, const float* dy, const float* gamma, float mean, float rstd,
                  i64 c, i64 j0, i64 j1, float* dx) {
  double a = 0, b = 0;
  for (i64 j = 0; j < c; ++j) {
    const double g = static_cast<double>(gamma[j]) * dy[j];
    a += g;
    b += g * (x[j] - mean) * rstd;
  }
  a /= static_cast<double>(c);
  b /= static_cast<double>(c);
  for (i64 j = j0; j < j1; ++j) {
    const double xhat = (x[j] - mean) * static_cast<double>(rstd);
    dx[j - j0] = static_cast<float>(rstd * (gamma[j] * static_cast<double>(dy[j]) - a - xhat * b));
  }
}

std::vector<TensorType> inferForward(const std::vector<const Tensor*>& in, const Attrs& a,
                                     const std::string& label) {
  const Tensor &x = *in[0], &gamma = *in[1], &beta = *in[2];
  if (x.shape.empty()) fail(label, fmt::format("input '{}' must have rank >= 1", x.name));
  const i64 c = x.shape.back();
  for (const Tensor* p : {&gamma, &beta})
    if (p->shape != Shape{c})
      fail(label, fmt::format("'{}' {} must be [{}], the innermost dimension of '{}' {}", p->name,
                              shapeStr(p->shape), c, x.name, shapeStr(x.shape)));
  if (a.getFloat("eps") <= 0)
    fail(label, fmt::format("eps must be > 0, got {}", a.getFloat("eps")));
  const i64 rows = x.elements() / c;
  return {{x.shape, x.dtype}, {{rows}, DType::F32}, {{rows}, DType::F32}};
}

std::vector<TensorType> inferBackward(const std::vector<const Tensor*>& in, const Attrs& a,
                                      const std::string& label) {
  const Tensor &x = *in[0], &dy = *in[1];
  expectSameShape(x, dy, label);
  auto fwd = inferForward({&x, in[2], in[2]}, a, label);
  for (int i = 3; i < 5; ++i)
    if (in[i]->shape != fwd[1].shape)
      fail(label, fmt::format("'{}' {} must be the per-row statistics {} of '{}'", in[i]->name,
                              shapeStr(in[i]->shape), shapeStr(fwd[1].shape), x.name));
  const i64 c = x.shape.back();
  return {{x.shape, dy.dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
}

// Forward plan: phase 0 row statistics (a vertex per slice of `mean`, reading its rows of x),
// phase 1 normalise (a vertex per slice of y, reading its x elements, their rows' statistics
// and gamma / beta).
// The statistics ([R] f32) are small: mapped linearly they sit on a few tiles (256 B each), and
// each such tile's vertex reads its 64 rows of x (BERT-Large: 64 x 1,024 f16, 131,072 B
// gathered on one Mk2 tile). Where a vertex would read more than a quarter of a window budget
// of x, they are spread in blocks of rows that read at most that (PlanApi::mapInBlocks), and no
// wider: every tile that gets a block gets the statistics codelet and a vertex per layer norm
// (spread over all 1,472 tiles, that fixed cost made BERT-Large's fullest tiles 9-11 KB fuller).
void planForward(PlanApi& p, const Op& op) {
  const auto [rows, c] = rowsC(p.graph(), op.inputs[0]);
  const int x = op.inputs[0], mean = op.outputs[1], rstd = op.outputs[2];
  const i64 rowBytes = c * sizeOf(p.graph().tensor(x).dtype);
  i64 widest = 1;
  for (const TileSlice& sl : p.mapping(mean)) widest = std::max(widest, sl.end - sl.begin);
  if (widest * rowBytes > p.windowBudgetBytes() / 4) {
    const i64 perTile =
        std::max({i64{1}, ceilDiv(rows, p.numTiles()), p.windowBudgetBytes() / 4 / rowBytes});
    p.mapInBlocks(mean, perTile);
    p.mapInBlocks(rstd, perTile);
  }
  p.perSlice(op, 0, {mean, rstd}, [=](Range r) { return Windows{{x, r.begin * c, r.end * c}}; });
  p.perSlice(op, 1, {op.outputs[0]}, [&p, op, c = c, x, mean, rstd](Range r) {
    const i64 r0 = r.begin / c, r1 = (r.end - 1) / c + 1;
    return Windows{{x, r.begin, r.end},
                   {mean, r0, r1},
                   {rstd, r0, r1},
                   p.whole(op.inputs[1]),
                   p.whole(op.inputs[2])};
  });
}

std::function<void()> vertexForward(const VertexArgs& a) {
  const auto [rows, c] = rowsC(a.g, a.op.inputs[0]);
  const double eps = a.op.attrs.getFloat("eps");
  const Range work = a.work;
  if (a.phase == 0)  // windows: x rows; outputs: mean, rstd
    return [W = a.in, mean = a.out[0], rstd = a.out[1], work, c = c, eps] {
      for (i64 r = work.begin; r < work.end; ++r)
        rowStats(&W[0][r * c], c, eps, mean[r - work.begin], rstd[r - work.begin]);
    };
  // windows: x, mean, rstd, gamma, beta
  return [W = a.in, y = a.out[0], work, c = c] {
    for (i64 i = work.begin; i < work.end; ++i) {
      const i64 r = i / c, j = i % c;
      y[i - work.begin] = (W[0][i] - W[1][r]) * W[2][r] * W[3][j] + W[4][j];
    }
  };
}

std::function<void()> fusedForward(const FusedArgs& a) {
  const auto [rows, c] = rowsC(a.g, a.op.inputs[0]);
  const double eps = a.op.attrs.getFloat("eps");
  return [x = a.in[0], gamma = a.in[1], beta = a.in[2], y = a.out[0], mean = a.out[1],
          rstd = a.out[2], rows = rows, c = c, eps] {
#pragma omp parallel for schedule(static)
    for (i64 r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      rowStats(xr, c, eps, mean[r], rstd[r]);
      for (i64 j = 0; j < c; ++j) y[r * c + j] = (xr[j] - mean[r]) * rstd[r] * gamma[j] + beta[j];
    }
  };
}

void gradForward(const GradArgs& a) {
  if (a.dy[1] >= 0 || a.dy[2] >= 0)
    fail(a.label, "autodiff: the loss depends on the statistics outputs (mean, rstd)");
  const Op& op = a.op;
  const int bw =
      a.g.addOp(kindNamed("layer_norm_grad"),
                {op.inputs[0], a.dy[0], op.inputs[1], op.outputs[1], op.outputs[2]}, op.attrs);
  const std::vector<int> o = a.g.op(bw).outputs;
  for (int i = 0; i < 3; ++i)
    if (a.needs[i]) a.accumulate(op.inputs[i], o[i]);
}

// Backward plan: phases 0-1 dbeta and 2-3 dgamma (sums over rows split into parts), phase 4 dx
// (a vertex per slice of dx, reading its rows of x and dy).
void planBackward(PlanApi& p, const Op& op) {
  const auto [rows, c] = rowsC(p.graph(), op.inputs[0]);
  const int x = op.inputs[0], dy = op.inputs[1], mean = op.inputs[3], rstd = op.inputs[4];
  auto rowWindow = [c = c](int t, Range ch, Range red) {
    return NeedWindow{t, red.begin * c + ch.begin, (red.end - 1) * c + ch.end};
  };
  p.splitReduction(op, 0, op.outputs[2], rows, c * 4,
                   [=](Range ch, Range red) { return Windows{rowWindow(dy, ch, red)}; });
  p.splitReduction(op, 2, op.outputs[1], rows, c * 8, [=](Range ch, Range red) {
    return Windows{rowWindow(x, ch, red),
                   rowWindow(dy, ch, red),
                   {mean, red.begin, red.end},
                   {rstd, red.begin, red.end}};
  });
  p.perSlice(op, 4, {op.outputs[0]}, [&p, op, c = c, x, dy, mean, rstd](Range r) {
    const i64 r0 = r.begin / c, r1 = (r.end - 1) / c + 1;
    return Windows{{x, r0 * c, r1 * c},
                   {dy, r0 * c, r1 * c},
                   {mean, r0, r1},
                   {rstd, r0, r1},
                   p.whole(op.inputs[2])};
  });
}

std::function<void()> vertexBackward(const VertexArgs& a) {
  const auto [rows, c] = rowsC(a.g, a.op.inputs[0]);
  const Range work = a.work, red = a.red;
  if (a.phase == 1 || a.phase == 3) return sumPartials(a);
  if (a.phase == 0)  // dbeta over rows red: windows dy
    return [W = a.in, y = a.out[0], work, red, c = c] {
      for (i64 j = work.begin; j < work.end; ++j) {
        double s = 0;
        for (i64 r = red.begin; r < red.end; ++r) s += W[0][r * c + j];
        y[j - work.begin] = static_cast<float>(s);
      }
    };
  if (a.phase == 2)  // dgamma over rows red: windows x, dy, mean, rstd
    return [W = a.in, y = a.out[0], work, red, c = c] {
      for (i64 j = work.begin; j < work.end; ++j) {
        double s = 0;
        for (i64 r = red.begin; r < red.end; ++r)
          s += static_cast<double>(W[1][r * c + j]) * ((W[0][r * c + j] - W[2][r]) * W[3][r]);
        y[j - work.begin] = static_cast<float>(s);
      }
    };
  // dx: windows x rows, dy rows, mean, rstd, gamma
  return [W = a.in, dx = a.out[0], work, c = c] {
    for (i64 r = work.begin / c; r * c < work.end; ++r) {
      const i64 j0 = std::max(work.begin, r * c) - r * c;
      const i64 j1 = std::min(work.end, (r + 1) * c) - r * c;
      rowInputGrad(&W[0][r * c], &W[1][r * c], &W[4][0], W[2][r], W[3][r], c, j0, j1,
                   dx + (r * c + j0 - work.begin));
    }
  };
}

// Fused backward: each thread takes a block of rows, writes their dx and sums their dgamma /
// dbeta terms row by row (contiguous, vectorised) into its own double partials; the partials
// are then added in thread order (deterministic for a thread count). Walking each column over
// all rows instead touched a cache line per element.
std::function<void()> fusedBackward(const FusedArgs& a) {
  const auto [rows, c] = rowsC(a.g, a.op.inputs[0]);
  const int team = std::max(1, kernels::fused::numThreads());
  auto partials = std::make_shared<std::vector<double>>(static_cast<size_t>(team * 2 * c));
  return [x = a.in[0], dy = a.in[1], gamma = a.in[2], mean = a.in[3], rstd = a.in[4], dx = a.out[0],
          dgamma = a.out[1], dbeta = a.out[2], rows = rows, c = c, team, partials] {
    double* part = partials->data();
#pragma omp parallel num_threads(team)
    {
      const i64 t = omp_get_thread_num(), nt = omp_get_num_threads();
      double* pb = part + t * 2 * c;
      double* pg = pb + c;
      std::fill(pb, pb + 2 * c, 0.0);
      for (i64 r = rows * t / nt; r < rows * (t + 1) / nt; ++r) {
        const float *xr = x + r * c, *dyr = dy + r * c;
        rowInputGrad(xr, dyr, gamma, mean[r], rstd[r], c, 0, c, dx + r * c);
        const float m = mean[r], s = rstd[r];
#pragma omp simd
        for (i64 j = 0; j < c; ++j) {
          pb[j] += dyr[j];
          pg[j] += static_cast<double>(dyr[j]) * ((xr[j] - m) * s);
        }
      }
#pragma omp barrier
      for (i64 j = c * t / nt; j < c * (t + 1) / nt; ++j) {
        double sb = 0, sg = 0;
        for (i64 q = 0; q < nt; ++q) {
          sb += part[q * 2 * c + j];
          sg += part[q * 2 * c + c + j];
        }
        dbeta[j] = static_cast<float>(sb);
        dgamma[j] = static_cast<float>(sg);
      }
    }
  };
}

}  // namespace

IPU_REGISTER_OPS(layer_norm) {
  OpInfo f;
  f.def = {kUnassignedKind, "layer_norm", 3, 3, {}, {{"eps", AttrType::Float, true}}};
  f.doc = "x [..., C], gamma [C], beta [C] -> y [..., C], mean [R] f32, rstd [R] f32";
  f.inputDTypes = {floatTypes(), {DType::F32}, {DType::F32}};
  f.infer = inferForward;
  f.grad = gradForward;
  f.plan = planForward;
  f.vertex = vertexForward;
  f.fused = fusedForward;
  // Statistics: sum, square-and-sum (2 per element); normalise: subtract, two multiplies, add.
  f.cost = [](const Op&, int phase) { return phase == 0 ? 3.0 : 4.0; };
  f.tolerances.f32 = {1e-5, 1e-5, 2e-2};
  registerOp(std::move(f));

  OpInfo b;
  b.def = {kUnassignedKind, "layer_norm_grad", 5, 3, {}, {{"eps", AttrType::Float, true}}};
  b.doc = "x, dy [..., C], gamma [C], mean, rstd [R] -> dx [..., C], dgamma [C], dbeta [C]";
  b.inputDTypes = {floatTypes(), floatTypes(), {DType::F32}, {DType::F32}, {DType::F32}};
  b.infer = inferBackward;
  b.grad = noGradient("it is a backward op");
  b.plan = planBackward;
  b.vertex = vertexBackward;
  b.fused = fusedBackward;
  b.cost = [](const Op&, int phase) { return phase == 4 ? 8.0 : phase == 2 ? 3.0 : 1.0; };
  b.tolerances.f32 = {1e-5, 1e-4, 2e-2};
  registerOp(std::move(b));
}

}  // namespace ipu::ops
