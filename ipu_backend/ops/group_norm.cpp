// group_norm: normalisation over groups of channels of each sample, and its backward.
//   x [N, ..., C] (NHWC: channels innermost, P = the positions of one sample), gamma [C],
//   beta [C], attributes groups G (dividing C) and eps
//   -> y = (x - mean_ng) * rstd_ng * gamma + beta, mean [N*G] f32, rstd [N*G] f32,
//      statistics of group g of sample n over its P x C/G values (biased variance).
// group_norm_grad: (x, dy, gamma, mean, rstd) -> dx, dgamma [C], dbeta [C]; with
//   xhat = (x - mean) * rstd, h = gamma * dy, per group:
//   dx = rstd * (h - mean(h) - xhat * mean(h * xhat)), dgamma = sum dy * xhat, dbeta = sum dy.
// Statistics accumulate in double in both modes (tile mode: per part of the positions, the parts'
// f32 sums then added), so tile and fused differ only in summation order.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ipu_backend/ir/builder.h"
#include "ipu_backend/ops/op_info.h"

namespace ipu::ops {
namespace {

struct Geo {
  i64 n, p, c, g;  // samples, positions per sample, channels, groups
  i64 cg() const { return c / g; }
  i64 sample() const { return p * c; }
};
Geo geoOf(const Graph& gr, const Op& op) {
  const Shape& s = gr.tensor(op.inputs[0]).shape;
  const i64 n = s[0], c = s.back();
  return {n, numElements(s) / (n * c), c, op.attrs.getInt("groups")};
}

// Statistics of group gi of one sample (x: the sample's P x C values).
void groupStats(const Geo& q, const float* x, i64 gi, double eps, float& mean, float& rstd) {
  double s = 0, ss = 0;
  const i64 cg = q.cg(), c0 = gi * cg;
  for (i64 p = 0; p < q.p; ++p)
    for (i64 j = c0; j < c0 + cg; ++j) s += x[p * q.c + j];
  const double cnt = static_cast<double>(q.p * cg), m = s / cnt;
  for (i64 p = 0; p < q.p; ++p)
    for (i64 j = c0; j < c0 + cg; ++j) ss += (x[p * q.c + j] - m) * (x[p * q.c + j] - m);
  mean = static_cast<float>(m);
  rstd = static_cast<float>(1.0 / std::sqrt(ss / cnt + eps));
}

// dx of elements [e0, e1) (sample-relative) of one sample, all its groups' sums first.
void sampleInputGrad(const Geo& q, const float* x, const float* dy, const float* gamma,
                     const float* mean, const float* rstd, i64 e0, i64 e1, float* dx) {
  std::vector<double> a(static_cast<size_t>(q.g), 0.0), b(static_cast<size_t>(q.g), 0.0);
  for (i64 p = 0; p < q.p; ++p)
    for (i64 j = 0; j < q.c; ++j) {
      const i64 gi = j / q.cg(), e = p * q.c + j;
      const double h = static_cast<double>(gamma[j]) * dy[e];
      a[gi] += h;
      b[gi] += h * (x[e] - mean[gi]) * rstd[gi];
    }
  const double cnt = static_cast<double>(q.p * q.cg());
  for (i64 e = e0; e < e1; ++e) {
    const i64 j = e % q.c, gi = j / q.cg();
    const double xhat = (x[e] - mean[gi]) * static_cast<double>(rstd[gi]);
    dx[e - e0] = static_cast<float>(
        rstd[gi] * (gamma[j] * static_cast<double>(dy[e]) - a[gi] / cnt - xhat * b[gi] / cnt));
  }
}

std::vector<TensorType> inferForward(const std::vector<const Tensor*>& in, const Attrs& a,
                                     const std::string& label) {
  const Tensor &x = *in[0], &gamma = *in[1], &beta = *in[2];
  if (x.shape.size() < 2)
    fail(label, fmt::format("input '{}' {} must be [N, ..., C]", x.name, shapeStr(x.shape)));
  const i64 c = x.shape.back(), g = a.getInt("groups");
  if (g < 1 || c % g != 0)
    fail(label, fmt::format("groups={} must divide the {} channels of '{}'", g, c, x.name));
  for (const Tensor* p : {&gamma, &beta})
    if (p->shape != Shape{c})
      fail(label, fmt::format("'{}' {} must be [{}]", p->name, shapeStr(p->shape), c));
  if (a.getFloat("eps") <= 0) fail(label, "eps must be > 0");
  return {{x.shape, x.dtype}, {{x.shape[0] * g}, DType::F32}, {{x.shape[0] * g}, DType::F32}};
}

std::vector<TensorType> inferBackward(const std::vector<const Tensor*>& in, const Attrs& a,
                                      const std::string& label) {
  expectSameShape(*in[0], *in[1], label);
  auto fwd = inferForward({in[0], in[2], in[2]}, a, label);
  for (int i = 3; i < 5; ++i)
    if (in[i]->shape != fwd[1].shape)
      fail(label, fmt::format("'{}' {} must be the per-group statistics {}", in[i]->name,
                              shapeStr(in[i]->shape), shapeStr(fwd[1].shape)));
  const i64 c = in[0]->shape.back();
  return {{in[0]->shape, in[1]->dtype}, {{c}, DType::F32}, {{c}, DType::F32}};
}

// Sums over the positions (rows of C channels) of a split reduction whose reduced extent is all
// N x P rows: the vertex of rows `red` adds, for each group k = n * G + g of `work`, the rows of
// sample n among them (none: 0). Its window is those rows whole, whatever the outputs, so a part
// never gathers more than its rows and the (sample, group) sums need no whole-sample vertex.
// term(e, j, k): the summand of element e (channel j) in group k.
template <class Term>
void groupRowSums(const Geo& q, Range work, Range red, float* out, Term term) {
  const i64 ng = q.n * q.g;
  for (i64 o = work.begin; o < work.end; ++o) {
    const i64 k = o % ng, n = k / q.g, c0 = k % q.g * q.cg();
    const i64 r0 = std::max(red.begin, n * q.p), r1 = std::min(red.end, (n + 1) * q.p);
    double s = 0;
    for (i64 r = r0; r < r1; ++r)
      for (i64 j = c0; j < c0 + q.cg(); ++j) s += term(o / ng, r * q.c + j, j, k);
    out[o - work.begin] = static_cast<float>(s);
  }
}

// Window of rows `red` of an [N x P, C] operand.
NeedWindow rowsWindow(const Geo& q, int t, Range red) {
  return {t, red.begin * q.c, red.end * q.c};
}

// Forward: phases 0-1 sum of each (sample, group) (split over the N x P rows), phase 2 its mean,
// phases 3-4 sum of squared deviations from it, phase 5 rstd, phase 6 normalise (a vertex per
// slice of y, reading its elements and their samples' statistics).
void planForward(PlanApi& p, const Op& op) {
  const Geo q = geoOf(p.graph(), op);
  const int x = op.inputs[0], mean = op.outputs[1], rstd = op.outputs[2];
  const i64 ng = q.n * q.g, rowBytes = q.c * sizeOf(p.graph().tensor(x).dtype);
  const int sums = p.scratch(op, "group_sums", ng);
  const int squares = p.scratch(op, "group_squared_deviations", ng);
  p.splitReduction(op, 0, sums, q.n * q.p, rowBytes,
                   [=](Range, Range red) { return Windows{rowsWindow(q, x, red)}; });
  p.perSlice(op, 2, {mean}, [=](Range r) { return Windows{{sums, r.begin, r.end}}; });
  p.splitReduction(op, 3, squares, q.n * q.p, rowBytes, [&p, q, x, mean](Range, Range red) {
    return Windows{rowsWindow(q, x, red), p.whole(mean)};
  });
  p.perSlice(op, 5, {rstd}, [=](Range r) { return Windows{{squares, r.begin, r.end}}; });
  p.perSlice(op, 6, {op.outputs[0]}, [&p, op, q, x, mean, rstd](Range r) {
    const i64 n0 = r.begin / q.sample(), n1 = (r.end - 1) / q.sample() + 1;
    return Windows{{x, r.begin, r.end},
                   {mean, n0 * q.g, n1 * q.g},
                   {rstd, n0 * q.g, n1 * q.g},
                   p.whole(op.inputs[1]),
                   p.whole(op.inputs[2])};
  });
}

std::function<void()> vertexForward(const VertexArgs& a) {
  const Geo q = geoOf(a.g, a.op);
  const double eps = a.op.attrs.getFloat("eps");
  const double cnt = static_cast<double>(q.p * q.cg());
  switch (a.phase) {
    case 0:  // windows: x rows
      return [W = a.in, y = a.out[0], work = a.work, red = a.red, q] {
        groupRowSums(q, work, red, y,
                     [&](i64, i64 e, i64, i64) { return static_cast<double>(W[0][e]); });
      };
    case 3:  // windows: x rows, mean
      return [W = a.in, y = a.out[0], work = a.work, red = a.red, q] {
        groupRowSums(q, work, red, y, [&](i64, i64 e, i64, i64 k) {
          const double d = static_cast<double>(W[0][e]) - W[1][k];
          return d * d;
        });
      };
    case 1:
    case 4:
      return sumPartials(a);
    case 2:  // windows: sums -> mean
      return [W = a.in, y = a.out[0], work = a.work, cnt] {
        for (i64 k = work.begin; k < work.end; ++k)
          y[k - work.begin] = static_cast<float>(W[0][k] / cnt);
      };
    case 5:  // windows: squared deviations -> rstd
      return [W = a.in, y = a.out[0], work = a.work, cnt, eps] {
        for (i64 k = work.begin; k < work.end; ++k)
          y[k - work.begin] = static_cast<float>(1.0 / std::sqrt(W[0][k] / cnt + eps));
      };
    default:
      break;
  }
  return [W = a.in, y = a.out[0], work = a.work, q] {  // x, mean, rstd, gamma, beta
    for (i64 i = work.begin; i < work.end; ++i) {
      const i64 j = i % q.c, k = i / q.sample() * q.g + j / q.cg();
      y[i - work.begin] = (W[0][i] - W[1][k]) * W[2][k] * W[3][j] + W[4][j];
    }
  };
}

std::function<void()> fusedForward(const FusedArgs& a) {
  const Geo q = geoOf(a.g, a.op);
  const double eps = a.op.attrs.getFloat("eps");
  return [x = a.in[0], gamma = a.in[1], beta = a.in[2], y = a.out[0], mean = a.out[1],
          rstd = a.out[2], q, eps] {
#pragma omp parallel for schedule(static)
    for (i64 k = 0; k < q.n * q.g; ++k) {
      const i64 n = k / q.g, gi = k % q.g;
      const float* xs = x + n * q.sample();
      groupStats(q, xs, gi, eps, mean[k], rstd[k]);
      for (i64 p = 0; p < q.p; ++p)
        for (i64 j = gi * q.cg(); j < (gi + 1) * q.cg(); ++j) {
          const i64 e = n * q.sample() + p * q.c + j;
          y[e] = (x[e] - mean[k]) * rstd[k] * gamma[j] + beta[j];
        }
    }
  };
}

void gradForward(const GradArgs& a) {
  if (a.dy[1] >= 0 || a.dy[2] >= 0)
    fail(a.label, "autodiff: the loss depends on the statistics outputs (mean, rstd)");
  const Op& op = a.op;
  const auto o = add(a.g, "group_norm_grad",
                     {op.inputs[0], a.dy[0], op.inputs[1], op.outputs[1], op.outputs[2]}, op.attrs);
  for (int i = 0; i < 3; ++i)
    if (a.needs[i]) a.accumulate(op.inputs[i], o[i]);
}

// Backward: phases 0-1 dbeta, 2-3 dgamma (sums over the N x P positions split into parts),
// phases 4-5 the per-(sample, group) sums of h = gamma * dy and of h * xhat that dx needs
// (split over the positions the same way: no vertex gathers a whole sample), phase 6 dx (a
// vertex per slice of dx, reading its elements and their groups' statistics and sums).
void planBackward(PlanApi& p, const Op& op) {
  const Geo q = geoOf(p.graph(), op);
  const int x = op.inputs[0], dy = op.inputs[1], gamma = op.inputs[2], mean = op.inputs[3],
            rstd = op.inputs[4];
  auto rows = [q](int t, Range ch, Range red) {
    return NeedWindow{t, red.begin * q.c + ch.begin, (red.end - 1) * q.c + ch.end};
  };
  auto stats = [q](int t, Range red) {
    return NeedWindow{t, red.begin / q.p * q.g, ((red.end - 1) / q.p + 1) * q.g};
  };
  p.splitReduction(op, 0, op.outputs[2], q.n * q.p, q.c * 4,
                   [=](Range ch, Range red) { return Windows{rows(dy, ch, red)}; });
  p.splitReduction(op, 2, op.outputs[1], q.n * q.p, q.c * 8, [=](Range ch, Range red) {
    return Windows{rows(x, ch, red), rows(dy, ch, red), stats(mean, red), stats(rstd, red)};
  });
  const i64 ng = q.n * q.g;
  const i64 rowBytes =
      q.c * (sizeOf(p.graph().tensor(x).dtype) + sizeOf(p.graph().tensor(dy).dtype));
  const int sums = p.scratch(op, "group_sums", 2 * ng);  // [sum h, sum h * xhat] per group
  p.splitReduction(op, 4, sums, q.n * q.p, rowBytes,
                   [&p, q, x, dy, gamma, mean, rstd](Range, Range red) {
                     return Windows{rowsWindow(q, x, red), rowsWindow(q, dy, red), p.whole(mean),
                                    p.whole(rstd), p.whole(gamma)};
                   });
  p.perSlice(op, 6, {op.outputs[0]}, [&p, op, q, x, dy, gamma, mean, rstd, sums](Range r) {
    const i64 n0 = r.begin / q.sample(), n1 = (r.end - 1) / q.sample() + 1;
    return Windows{{x, r.begin, r.end},        {dy, r.begin, r.end}, {mean, n0 * q.g, n1 * q.g},
                   {rstd, n0 * q.g, n1 * q.g}, p.whole(gamma),       p.whole(sums)};
  });
}

std::function<void()> vertexBackward(const VertexArgs& a) {
  const Geo q = geoOf(a.g, a.op);
  if (a.phase == 1 || a.phase == 3 || a.phase == 5) return sumPartials(a);
  if (a.phase == 0 || a.phase == 2)  // dbeta (windows dy) or dgamma (x, dy, mean, rstd)
    return [W = a.in, y = a.out[0], work = a.work, red = a.red, q, dgamma = a.phase == 2] {
      for (i64 j = work.begin; j < work.end; ++j) {
        double s = 0;
        for (i64 r = red.begin; r < red.end; ++r) {
          const i64 e = r * q.c + j;
          if (!dgamma) {
            s += W[0][e];
            continue;
          }
          const i64 k = r / q.p * q.g + j / q.cg();
          s += static_cast<double>(W[1][e]) * ((W[0][e] - W[2][k]) * W[3][k]);
        }
        y[j - work.begin] = static_cast<float>(s);
      }
    };
  if (a.phase == 4)  // windows: x rows, dy rows, mean, rstd, gamma; outputs [sum h | sum h xhat]
    return [W = a.in, y = a.out[0], work = a.work, red = a.red, q] {
      groupRowSums(q, work, red, y, [&](i64 which, i64 e, i64 j, i64 k) {
        const double h = static_cast<double>(W[4][j]) * W[1][e];
        return which == 0 ? h : h * (W[0][e] - W[2][k]) * W[3][k];
      });
    };
  // dx: windows x, dy (the slice), mean, rstd (its samples), gamma, sums
  return [W = a.in, dx = a.out[0], work = a.work, q] {
    const i64 ng = q.n * q.g;
    const double cnt = static_cast<double>(q.p * q.cg());
    for (i64 e = work.begin; e < work.end; ++e) {
      const i64 j = e % q.c, k = e / q.sample() * q.g + j / q.cg();
      const double xhat = (W[0][e] - W[2][k]) * static_cast<double>(W[3][k]);
      dx[e - work.begin] =
          static_cast<float>(W[3][k] * (W[4][j] * static_cast<double>(W[1][e]) - W[5][k] / cnt -
                                        xhat * W[5][ng + k] / cnt));
    }
  };
}

std::function<void()> fusedBackward(const FusedArgs& a) {
  const Geo q = geoOf(a.g, a.op);
  return [x = a.in[0], dy = a.in[1], gamma = a.in[2], mean = a.in[3], rstd = a.in[4], dx = a.out[0],
          dgamma = a.out[1], dbeta = a.out[2], q] {
#pragma omp parallel for schedule(static)
    for (i64 n = 0; n < q.n; ++n) {
      const i64 b = n * q.sample();
      sampleInputGrad(q, x + b, dy + b, gamma, mean + n * q.g, rstd + n * q.g, 0, q.sample(),
                      dx + b);
    }
#pragma omp parallel for schedule(static)
    for (i64 j = 0; j < q.c; ++j) {
      double sb = 0, sg = 0;
      for (i64 r = 0; r < q.n * q.p; ++r) {
        const i64 e = r * q.c + j, k = r / q.p * q.g + j / q.cg();
        sb += dy[e];
        sg += static_cast<double>(dy[e]) * ((x[e] - mean[k]) * rstd[k]);
      }
      dbeta[j] = static_cast<float>(sb);
      dgamma[j] = static_cast<float>(sg);
    }
  };
}

std::vector<AttrSpec> attrSpecs() {
  return {{"groups", AttrType::Int, true}, {"eps", AttrType::Float, true}};
}

}  // namespace

IPU_REGISTER_OPS(group_norm) {
  OpInfo f;
  f.def = {kUnassignedKind, "group_norm", 3, 3, {}, attrSpecs()};
  f.doc = "x [N,...,C], gamma [C], beta [C] -> y, mean [N*G] f32, rstd [N*G] f32";
  f.inputDTypes = {floatTypes(), {DType::F32}, {DType::F32}};
  f.infer = inferForward;
  f.grad = gradForward;
  f.plan = planForward;
  f.vertex = vertexForward;
  f.fused = fusedForward;
  // Sums: one add per element (squared deviations: subtract, multiply-add); mean / rstd per
  // group; normalise: subtract, two multiplies, add.
  f.cost = [](const Op&, int phase) {
    return phase == 0 || phase == 1 || phase == 4 ? 1.0 : phase == 3 ? 2.0 : phase == 6 ? 4.0 : 2.0;
  };
  registerOp(std::move(f));

  OpInfo b;
  b.def = {kUnassignedKind, "group_norm_grad", 5, 3, {}, attrSpecs()};
  b.doc = "x, dy [N,...,C], gamma [C], mean, rstd [N*G] -> dx, dgamma [C], dbeta [C]";
  b.inputDTypes = {floatTypes(), floatTypes(), {DType::F32}, {DType::F32}, {DType::F32}};
  b.infer = inferBackward;
  b.grad = noGradient("it is a backward op");
  b.plan = planBackward;
  b.vertex = vertexBackward;
  b.fused = fusedBackward;
  b.cost = [](const Op&, int phase) {
    return phase == 6 ? 6.0 : phase == 4 ? 5.0 : phase == 2 ? 3.0 : 1.0;
  };
  b.tolerances.f32 = {1e-5, 1e-4, 2e-2};
  registerOp(std::move(b));
}

}  // namespace ipu::ops
